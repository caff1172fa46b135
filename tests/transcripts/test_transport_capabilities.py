"""The optional transport capabilities, as Protocols (``engine.ports``), not attribute probes.

A recording's transport says which model it asked for (``KnowsRecordedModel``), so a run from
it is shown under that model; a ``--record`` transport writes its cassette out at the end of
a run (``Flushable``). Transports without them are simply not asked.
"""

from __future__ import annotations

from pathlib import Path

from support.paths import REFUND_OPENAI, REGISTRY, TASK

from toolloop_cli.adapters.scripted import ScriptedTransport
from toolloop_cli.engine.ports import Flushable, KnowsRecordedModel
from toolloop_cli.service import operations
from toolloop_cli.store import open_store
from toolloop_cli.transcripts.cassette import load_cassette
from toolloop_cli.transcripts.record import RecordingTransport
from toolloop_cli.wiring import transcript_transport


def test_each_transport_has_the_capabilities_it_implements(tmp_path: Path) -> None:
    replay, _ = transcript_transport(REFUND_OPENAI)
    recording = RecordingTransport(ScriptedTransport([]), tmp_path / "rec.yaml")
    scripted = ScriptedTransport([])
    assert _capabilities(replay) == (True, False)
    assert _capabilities(recording) == (False, True)
    assert _capabilities(scripted) == (False, False)


def _capabilities(transport: object) -> tuple[bool, bool]:
    """(knows its recorded model, can be flushed), checked at run time as the wiring does."""
    return isinstance(transport, KnowsRecordedModel), isinstance(transport, Flushable)


def test_a_run_from_a_recording_is_shown_under_the_recorded_model(tmp_path: Path) -> None:
    recorded = load_cassette(REFUND_OPENAI).interactions[0].request.json()["model"]
    store = open_store(tmp_path / "store.db")
    options = operations.RunOptions(task=TASK, registry=REGISTRY, transcript=REFUND_OPENAI)
    result = operations.start(store, options)
    assert recorded != "recorded" and result.operation.model == recorded
