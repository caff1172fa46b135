"""Malformed provider payloads, as properties over every adapter.

Bodies come from generated JSON, from recorded fixtures mutated (keys dropped, retyped,
duplicated, nulled; huge numbers; NaN; invalid UTF-8; cut short) and from raw bytes. An
adapter either classifies the answer (a ``ModelTurn``) or raises the declared
``AdapterError``/``MalformedProviderPayload``; nothing else escapes. Run through the engine,
garbage ends the operation FAILED or INCOMPLETE and no handler runs. Interrupted streams
are tested with the streaming code in ``test_streaming.py``. Longer, coverage-
guided runs: ``fuzz/`` (atheris).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from support.nested import value_paths
from support.paths import ROOT

from toolloop_cli.adapters import ADAPTERS, get_adapter
from toolloop_cli.engine.types import HttpRequest, HttpResponse, ModelTurn, TurnOutcome
from toolloop_cli.errors import AdapterError
from toolloop_cli.service import operations
from toolloop_cli.store import open_store
from toolloop_cli.transcripts import load_cassette

SOAK = os.environ.get("TOOLLOOP_SOAK") == "1"
#: the soak draws 50 000 answers per adapter: minutes, not the suite default
pytestmark = pytest.mark.timeout(3600 if SOAK else 600)
EXAMPLES = 50_000 if SOAK else 2000
ENGINE_EXAMPLES = 1000 if SOAK else 60
#: every provider adapter the package declares, by (provider, api family); the scripted one
#: reads a format the tests write themselves, never a model's output, so it is not fuzzed
APIS = sorted(api for api in ADAPTERS if api[0] != "scripted")
#: found by this property and left to the adapter's owner (strict: passing again fails here)
KNOWN: dict[tuple[str, str], str] = {}


def _marked(api: tuple[str, str], *, strict: bool = True) -> Any:
    marks = [pytest.mark.xfail(strict=strict, reason=KNOWN[api])] if api in KNOWN else []
    return pytest.param(api, marks=marks, id="/".join(api))


#: the --provider name that selects each live API family (the scripted one has its own)
PROVIDER_OPTION = {
    ("openai", "responses"): "openai",
    ("anthropic", "messages"): "anthropic",
    ("gemini", "interactions"): "gemini",
    ("gemini", "generate_content"): "gemini-generate",
}
FOLDERS = {"openai": "openai", "anthropic": "anthropic", "gemini": "gemini"}


def _recorded(api: tuple[str, str]) -> list[bytes]:
    """JSON answer bodies recorded for this API (fixtures and transcripts)."""
    provider, family = api
    folder = "gemini_generate" if family == "generate_content" else FOLDERS.get(provider, "")
    paths = sorted((ROOT / "tests" / "fixtures" / folder).glob("*.yaml")) if folder else []
    paths += sorted((ROOT / "transcripts").glob(f"refund-{provider}*.yaml"))
    bodies = []
    for path in paths:
        for item in load_cassette(path).interactions:
            if item.api == api and item.response.body[:1] == b"{":
                bodies.append(item.response.body)
    if provider == "scripted":
        bodies += [
            b'{"calls":[{"name":"get_order","arguments":{"order_id":"ord_1"}}]}',
            b'{"text":"x"}',
        ]
    return bodies


RECORDED = {api: _recorded(api) for api in APIS}

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=6)
    ),
    max_leaves=30,
)
_ODD_NUMBERS = st.sampled_from(["1e999999", "-1e999999", "NaN", "Infinity", "9" * 5000, "1" * 30])


def _set(value: Any, path: tuple[Any, ...], new: Any, drop: bool = False) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    copy = dict(value) if isinstance(value, dict) else list(value)
    if drop and not rest:
        del copy[head]
    else:
        copy[head] = _set(copy[head], rest, new, drop)
    return copy


@st.composite
def mutated(draw: st.DrawFn, api: tuple[str, str]) -> bytes:
    """A recorded body with one structural or textual mutation."""
    body = draw(st.sampled_from(RECORDED[api]))
    doc = json.loads(body)
    path = draw(st.sampled_from(value_paths(doc)))
    kind = draw(
        st.sampled_from(
            ["drop", "null", "retype", "generated", "duplicate", "odd_number", "bad_utf8", "cut"]
        )
    )
    if kind == "drop" and path:
        return json.dumps(_set(doc, path, None, drop=True)).encode()
    if kind in ("null", "drop"):
        return json.dumps(_set(doc, path, None)).encode()
    if kind == "retype":
        return json.dumps(
            _set(doc, path, draw(st.sampled_from([[], {}, "", 0, True, 1.5])))
        ).encode()
    if kind == "generated":
        return json.dumps(_set(doc, path, draw(_JSON))).encode()
    text = json.dumps(_set(doc, path, "\x00MARK\x00"))
    marker = json.dumps("\x00MARK\x00")
    if kind == "duplicate" and path and isinstance(path[-1], str):
        return text.replace(marker, f"{marker}, {json.dumps(path[-1])}: 1", 1).encode()
    if kind == "odd_number":
        return text.replace(marker, draw(_ODD_NUMBERS), 1).encode()
    if kind == "bad_utf8":
        return text.replace(marker, '"', 1).encode().replace(b'"', b'"\xff\xfe', 1)
    return body[: draw(st.integers(0, max(0, len(body) - 1)))]


def _bodies(api: tuple[str, str]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        mutated(api),
        _JSON.map(lambda v: json.dumps(v).encode()),
        st.binary(max_size=200),
    )


def _classify(api: tuple[str, str], body: bytes, status: int = 200) -> ModelTurn | None:
    adapter = get_adapter(*api)
    response = HttpResponse(status=status, headers={"content-type": "application/json"}, body=body)
    try:
        return adapter.parse_response(response)
    except AdapterError:
        return None


@pytest.mark.parametrize("api", APIS, ids="/".join)
def test_every_adapter_has_recorded_answers_to_mutate(api: tuple[str, str]) -> None:
    assert RECORDED[api], api


# derandomized in CI, the property finds the known failure every time; a soak's random
# search may not, so there the mark does not insist on it
@pytest.mark.parametrize("api", [_marked(api, strict=not SOAK) for api in APIS])
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=not SOAK,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_an_adapter_classifies_any_body_or_raises_only_its_declared_error(
    api: tuple[str, str], data: st.DataObject
) -> None:
    body = data.draw(_bodies(api))
    status = data.draw(st.sampled_from([200, 200, 200, 400, 429, 500]))
    turn = _classify(api, body, status)  # anything but AdapterError propagates and fails
    if turn is not None:
        assert isinstance(turn.outcome, TurnOutcome)
        for c in turn.calls:
            assert isinstance(c.raw_arguments, str)
            # parsed (or refused) at the edge, or text left for the engine to parse
            assert c.arguments is None or c.argument_error is None
        if status != 200:
            assert turn.outcome is TurnOutcome.API_FAILURE and not turn.calls


class Garbage:
    """A transport that answers the first request with ``body`` and counts what it sent."""

    name = "test"

    def __init__(self, body: bytes) -> None:
        self.body, self.sent = body, 0

    def send(self, request: HttpRequest) -> HttpResponse:
        self.sent += 1
        if self.sent > 1:  # a retry of a retryable classification: end the run
            return HttpResponse(400, {"content-type": "application/json"}, b"{}")
        return HttpResponse(200, {"content-type": "application/json"}, self.body)


_GARBAGE = st.one_of(
    _JSON.filter(lambda v: not isinstance(v, dict) or not v).map(lambda v: json.dumps(v).encode()),
    st.dictionaries(st.text(max_size=8), _JSON, max_size=4).map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=100),
)


def _refund_options(api: tuple[str, str]) -> operations.RunOptions:
    """The refund run through ``api``'s adapter, retrying a failed answer once."""
    return operations.RunOptions(
        task="refund ord_1001",
        registry=ROOT / "registries" / "refunds.yaml",
        provider=PROVIDER_OPTION[api],
        model="m",
        guard_overrides={"max_retries": 1},
    )


@pytest.mark.parametrize("api", APIS, ids="/".join)
@settings(
    max_examples=ENGINE_EXAMPLES,
    deadline=None,
    derandomize=not SOAK,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(body=_GARBAGE)
def test_garbage_from_the_model_ends_failed_or_incomplete_and_runs_nothing(
    api: tuple[str, str], body: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("garbage")
    store = open_store(folder / "store.db")
    options = _refund_options(api)
    transport = Garbage(body)
    result = operations.start(store, options, transport=transport)
    op = result.operation
    assert op.state.value in ("FAILED", "INCOMPLETE"), (body, op.state, op.reason)
    assert op.counters.tool_calls == 0
    assert not (folder / "payments.db").exists()
    store.close()


@pytest.mark.parametrize(
    "api",
    [_marked(api, strict=False) if SOAK else pytest.param(api, id="/".join(api)) for api in APIS],
)
@settings(
    max_examples=ENGINE_EXAMPLES,
    deadline=None,
    derandomize=not SOAK,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_mutated_answer_never_crashes_the_engine(
    api: tuple[str, str], data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Whatever the answer, the run ends in a state (or waits); no foreign error escapes."""
    folder = tmp_path_factory.mktemp("mutated")
    store = open_store(folder / "store.db")
    options = _refund_options(api)
    result = operations.start(store, options, transport=Garbage(data.draw(mutated(api))))
    assert result.operation.state.value != "MODEL_REQUESTED"
    store.close()


def test_a_number_without_a_finite_value_fails_the_turn_instead_of_sticking(tmp_path: Path) -> None:
    """Found by the property above: 1e999999 would parse to inf, which has no canonical form;
    the adapter refuses the body as malformed."""
    body = json.dumps(
        {
            "id": "r",
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "role": "assistant",
                    "x": "INF",
                    "content": [{"type": "output_text", "text": "done", "annotations": []}],
                }
            ],
        }
    ).replace('"INF"', "1e999999")
    store = open_store(tmp_path / "store.db")
    options = operations.RunOptions(
        task="t", registry=ROOT / "registries" / "refunds.yaml", provider="openai", model="m"
    )
    result = operations.start(store, options, transport=Garbage(body.encode()))
    assert result.operation.state.value == "FAILED"
    assert "number 1e999999 is out of range" in (result.operation.reason or "")


def test_control_a_well_formed_answer_does_run_a_handler(tmp_path: Path) -> None:
    """The engine property can fail: a real proposal of a read tool does run it."""
    store = open_store(tmp_path / "store.db")
    answer = json.dumps(
        {"calls": [{"name": "get_order", "arguments": {"order_id": "ord_1001"}}]}
    ).encode()
    options = operations.RunOptions(
        task="t",
        registry=ROOT / "registries" / "refunds.yaml",
        provider="scripted",
        model="m",
        guard_overrides={"max_retries": 1},
    )
    result = operations.start(store, options, transport=Garbage(answer))
    assert result.operation.counters.tool_calls == 1
    assert (tmp_path / "payments.db").exists()
