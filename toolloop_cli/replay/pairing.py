"""Which recorded result answers which call: per request, the results new in it, paired with
the calls of the answer just before it.

A client may send a result under an id the model never gave (pydantic-ai's ``pyd_ai_…`` for
Gemini calls that had none), under a rewritten id (``<response id>:call_0``), or under none
(generateContent's ``functionResponse`` by name). And a provider may reuse an id in every turn
(``call_0``). So results are never keyed over the whole conversation: each request's new
results are paired with the calls of the answer just before it, by id when the id is one of
that answer's calls, else by position among that answer's calls without one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolloop_cli.engine.types import RecordedResult

from .shapes import Api, continues_from, request_results

__all__ = ["Paired", "new_results", "pair"]


def new_results(api: Api, bodies: Sequence[Any]) -> list[list[RecordedResult]]:
    """Per request, the results it carries that the request before it did not.

    The first request's are all its results (history it starts from, when it has any). A
    request that continues provider state carries only new items; a stateless one repeats the
    earlier ones first.
    """
    if not bodies:
        return []
    found: list[list[RecordedResult]] = [request_results(api, bodies[0])]
    for index in range(1, len(bodies)):
        results = request_results(api, bodies[index])
        if continues_from(api, bodies[index]) is None:
            results = results[len(request_results(api, bodies[index - 1])) :]
        found.append(results)
    return found


class Paired:
    """Results paired with calls: ``by_call`` (call id → result) and ``unpaired`` ones."""

    def __init__(self, by_call: dict[str, RecordedResult], unpaired: list[RecordedResult]):
        self.by_call = by_call
        self.unpaired = unpaired


def pair(results: Sequence[RecordedResult], call_ids: Sequence[str]) -> Paired:
    """Pair ``results`` with the calls ``call_ids`` of the answer before them (see above)."""
    wanted = set(call_ids)
    by_call: dict[str, RecordedResult] = {}
    rest: list[RecordedResult] = []
    for result in results:
        if result.call_id in wanted and result.call_id not in by_call:
            by_call[result.call_id] = result
        else:
            rest.append(result)
    for call_id in call_ids:
        if call_id not in by_call and rest:
            by_call[call_id] = rest.pop(0)
    return Paired(by_call, rest)
