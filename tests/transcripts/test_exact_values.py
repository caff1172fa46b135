"""A recording is read for exactly the values it holds. A JSON file is read as JSON (a list
too: nock's), so ``1e-7`` stays a number and ``\\ud83d\\ude00`` an emoji; what JSON cannot hold
exactly (NaN, a number out of range, a 5,000-digit integer) refuses the file instead of being
read again as YAML text; and YAML's own integer of 5,000 digits is one line, not a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.paths import REFUND_OPENAI

from toolloop_cli.errors import TranscriptError
from toolloop_cli.transcripts.cassette import load_cassette

ANSWER = yaml.safe_load(REFUND_OPENAI.read_text())["interactions"][0]["response"]["body"]["string"]


def nock(extra: str) -> str:
    """A nock list whose answer carries ``"extra": <extra>`` as written."""
    definition = {
        "scope": "https://api.openai.com:443",
        "method": "POST",
        "path": "/v1/responses",
        "body": {"model": "gpt-4.1", "input": "hi"},
        "status": 200,
        "response": json.loads(ANSWER),
    }
    text = json.dumps([definition])
    return text.replace('"response": {', '"response": {"extra": ' + extra + ", ", 1)


@pytest.mark.parametrize(
    ("written", "value"), [("1e-7", 1e-7), ("1E5", 1e5), ('"\\ud83d\\ude00"', "😀")]
)
def test_a_json_list_is_read_as_json(tmp_path: Path, written: str, value: object) -> None:
    """YAML read ``1e-7`` as the text "1e-7" and refused the escaped emoji."""
    path = tmp_path / "nock.json"
    path.write_text(nock(written))
    (interaction,) = load_cassette(path).interactions
    assert json.loads(interaction.response.body)["extra"] == value


def test_a_json_file_with_a_byte_order_mark_is_read_as_json(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_bytes(b"\xef\xbb\xbf" + nock("1e-7").encode())
    (interaction,) = load_cassette(path).interactions
    assert json.loads(interaction.response.body)["extra"] == 1e-7


@pytest.mark.parametrize(
    ("written", "reason"),
    [
        ("NaN", "non-finite number NaN is not JSON"),
        ("1e400", "number 1e400 is out of range"),
        ("9" * 5000, "Exceeds the limit (4300 digits)"),
    ],
)
def test_json_that_cannot_be_read_exactly_refuses_the_file(
    tmp_path: Path, written: str, reason: str
) -> None:
    """NaN and 1e400 were read again as YAML, and served as the strings "NaN" and "1e400"."""
    path = tmp_path / "nock.json"
    path.write_text(nock(written))
    with pytest.raises(TranscriptError, match="JSON that cannot be read exactly") as refused:
        load_cassette(path)
    assert reason in str(refused.value)


def test_a_yaml_integer_of_5000_digits_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """PyYAML's int() raised ValueError past the 4,300-digit limit: exit 1, a traceback."""
    path = tmp_path / "big.yaml"
    path.write_text(REFUND_OPENAI.read_text() + f"extra: {'9' * 5000}\n")
    with pytest.raises(TranscriptError, match="a value that cannot be read: Exceeds the limit"):
        load_cassette(path)


def test_json_nested_past_every_limit_says_so(tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text(nock("[" * 5000 + "]" * 5000))
    with pytest.raises(TranscriptError, match="JSON nested deeper than 128 levels"):
        load_cassette(path)


def test_a_recording_of_more_interactions_than_one_replay_reads_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Millions of tiny records under the byte cap took gigabytes and minutes to read."""
    from toolloop_cli.transcripts import cassette, httprr

    monkeypatch.setattr(cassette, "MAX_INTERACTIONS", 3)
    monkeypatch.setattr(httprr, "MAX_INTERACTIONS", 3)
    with pytest.raises(TranscriptError, match="4 interactions, more than the 3 one replay reads"):
        load_cassette(REFUND_OPENAI)  # its four exchanges
    asked, answered = b"GET https://x/ HTTP/1.1\r\n\r\n", b"HTTP/1.1 204 No Content\r\n\r\n"
    record = b"%d %d\n" % (len(asked), len(answered)) + asked + answered
    trace = tmp_path / "many.httprr"
    trace.write_bytes(b"httprr trace v1\n" + record * 4)
    with pytest.raises(TranscriptError, match="more than 3 records, more than one replay reads"):
        load_cassette(trace)
