"""An answer holding a value with no canonical JSON form (an integer beyond 2**53 in a call's
object-valued input) cannot be stored content-addressed, hashed or sent back as it came, so
the turn fails and nothing of it runs; the reason names the provider and where the value is
(it said only "value has no canonical JSON form: …")."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from support.cli import Invoke
from support.providers import assert_nothing_ran, run_fixture, transcript

from toolloop_cli.transcripts import load_cassette
from toolloop_cli.transcripts.cassette import dump_cassette

BIG = "9007199254740993"  # 2**53 + 1


@pytest.mark.parametrize(
    ("option", "old", "where"),
    [
        ("anthropic", b'"order_id":"ord_1001"', "[0].content[0].input.n"),
        ("gemini-generate", b'"order_id":"ord_1001"', "[0].parts[0].functionCall.args.n"),
    ],
)
def test_a_value_with_no_canonical_form_fails_the_turn_naming_where_it_is(
    cli: Invoke, store_path: Path, tmp_path: Path, option: str, old: bytes, where: str
) -> None:
    cassette = load_cassette(transcript(option))
    interactions = list(cassette.interactions)
    first = interactions[0]
    body = first.response.body.replace(b" ", b"")
    assert old in body, body[:400]
    body = body.replace(old, old + b',"n":' + BIG.encode(), 1)
    json.loads(body)  # still valid JSON
    interactions[0] = replace(first, response=replace(first.response, body=body))
    path = tmp_path / "big.yaml"
    dump_cassette(interactions, path)
    code, view = run_fixture(cli, path)
    assert (code, view["state"]) == (13, "FAILED")
    provider = option.split("-")[0]
    assert view["reason"].startswith(
        f"{provider}: the answer cannot be kept and audited as it came: output item {where} "
        f"has no canonical JSON form: {BIG}"
    )
    assert_nothing_ran(view, store_path)
