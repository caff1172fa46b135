"""An answer proposing hundreds of calls is validated like any other.

Validation looks each call's idempotency key and intent up among the operation's earlier
calls, one term of a compound SELECT per lookup; SQLite takes at most 500 terms in one, so
an answer with some 250 calls or more once failed every step with a store error and left
its operation stuck. The lookups are now split over several statements.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.scripted import answer, call, final, run_script

from toolloop_cli.engine.states import CallState, OpState
from toolloop_cli.service.verify import verify_store
from toolloop_cli.store import Store, open_store
from toolloop_cli.store.repo import LOOKUPS_PER_QUERY


@pytest.fixture
def store(store_path: Path) -> Store:
    return open_store(store_path)


def test_an_answer_with_three_hundred_calls_runs_and_its_repeats_are_found(store: Store) -> None:
    many = 300
    first = answer("resp_1", *(call("echo", {"n": n}, f"c{n}") for n in range(many)))
    again = answer("resp_2", *(call("echo", {"n": n}, f"d{n}") for n in range(many)))
    result, _ = run_script(store, [first, again, final("done")], max_tool_calls=2 * many)
    assert result.target is OpState.COMPLETED, result.operation.reason
    calls = store.calls(result.operation.operation_id)
    assert sum(c.state is CallState.SUCCEEDED for c in calls) == many
    # every call of the second answer repeats one of the first: each was found, over more
    # than one statement, and answered as a repeat instead of being run again
    assert sum(c.state is CallState.DUPLICATE for c in calls) == many
    assert 2 * many > LOOKUPS_PER_QUERY  # a key and an intent per call: several statements
    assert verify_store(store).ok


def test_lookups_split_over_statements_give_each_earlier_call_once_in_turn_order(
    store: Store,
) -> None:
    many = 300
    first = answer("resp_1", *(call("echo", {"n": n}, f"c{n}") for n in range(many)))
    result, _ = run_script(store, [first, final("done")], max_tool_calls=many)
    op = result.operation
    earlier = {c.call_id: c for c in store.calls(op.operation_id)}
    keys = [c.idempotency_key for c in earlier.values() if c.idempotency_key]
    intents = [(c.name, c.arguments_sha256) for c in earlier.values() if c.arguments_sha256]
    assert len(keys) + len(intents) > LOOKUPS_PER_QUERY  # more than one statement's worth
    found = store.earlier_calls(op.operation_id, 99, [*intents, *intents], [*keys, *keys])
    assert [c.call_id for c in found] == [f"c{n}" for n in range(many)]  # once each, in order
