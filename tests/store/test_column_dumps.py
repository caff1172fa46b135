"""A row's JSON columns are dumped once per value object, and the text is what ``dump`` writes."""

from __future__ import annotations

import pytest

from toolloop_cli.engine.records import Counters
from toolloop_cli.errors import StoreError
from toolloop_cli.store import rows


def test_dump_once_writes_what_dump_writes() -> None:
    value = {"b": [1, 2.5, "é"], "a": None, "c": {"z": True}}
    assert rows.dump_once(value) == rows.dump(value)
    assert rows.dump_once(None) is None


def test_a_repeated_object_is_served_from_the_cache_and_a_new_one_is_dumped() -> None:
    counters = Counters(turns=2)
    calls: list[int] = []

    def make() -> object:
        calls.append(1)
        return counters.model_dump()

    first = rows.dump_once(counters, make)
    assert rows.dump_once(counters, make) == first
    assert len(calls) == 1  # the same object is not dumped twice

    changed = counters.model_copy(update={"turns": 3})
    text = rows.dump_once(changed, changed.model_dump)
    assert text == rows.dump(changed.model_dump()) != first


def test_equal_content_in_another_object_gets_its_own_entry() -> None:
    one, two = {"k": 1}, {"k": 1}
    rows.dump_once(one)
    assert rows._DUMPED[id(one)][0] is one
    rows.dump_once(two)
    assert rows._DUMPED[id(two)][0] is two  # keyed by identity, the value held


def test_the_cache_stays_bounded() -> None:
    values = [{"n": n} for n in range(rows._DUMPED_MAX * 2)]
    for value in values:
        rows.dump_once(value)
    assert len(rows._DUMPED) <= rows._DUMPED_MAX
    assert rows.dump_once(values[-1]) == f'{{"n": {len(values) - 1}}}'


@pytest.mark.parametrize("number", [float("inf"), float("-inf"), float("nan")])
def test_a_number_json_has_no_form_for_is_refused_not_stored(number: float) -> None:
    """Written as ``Infinity``, it made every later read of its row report the store as
    tampered (``runs`` too), so the write is refused before anything is stored."""
    with pytest.raises(StoreError, match="NaN or an infinity"):
        rows.dump({"cost_usd": number})
    with pytest.raises(StoreError, match="NaN or an infinity"):
        rows.dump_once({"price": {"input_per_mtok": number}})
