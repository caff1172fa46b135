"""httpmock recordings (Rust; rig records its provider tests with it) replay as the recording
they hold does: one YAML document per exchange, ``when`` the request and ``then`` its answer,
the URI only a path and query."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
import yaml
from foreign import recorded, refused, replays_as_recorded
from support.cli import Invoke, json_out
from support.paths import REGISTRY


def _named(pairs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in pairs.items()]


def httpmock(name: str, *, base64_answers: bool = False) -> list[dict[str, Any]]:
    """``transcripts/refund-NAME.yaml`` as httpmock documents."""
    exchanges = recorded(name)
    documents = []
    for i in exchanges:
        request, response = i["request"], i["response"]
        uri = urlsplit(request["uri"])
        answer = response["body"]["string"]
        then: dict[str, Any] = {
            "status": response["status"]["code"],
            "header": _named({k: v[0] for k, v in (response.get("headers") or {}).items()}),
            "body": answer,
        }
        if base64_answers:
            then.update(body=base64.b64encode(answer.encode()).decode(), body_encoding="base64")
        when = {
            "path": uri.path,
            "method": request["method"],
            "query_param": _named(dict(parse_qsl(uri.query))),
            "header": _named({"accept": "*/*", "content-type": "application/json"}),
            "body": request["body"],
        }
        documents.append({"when": when, "then": then})
    return documents


def written(path: Path, documents: list[dict[str, Any]]) -> Path:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("name", "base64_answers"),
    [("anthropic", False), ("openai-stream", False), ("gemini-generate-stream", True)],
)
def test_an_httpmock_recording_replays_as_the_recording_does(
    cli: Invoke, tmp_path: Path, name: str, base64_answers: bool
) -> None:
    """Was "not valid YAML … but found another document"."""
    path = written(tmp_path / "multi_step.yaml", httpmock(name, base64_answers=base64_answers))
    replays_as_recorded(cli, path, name)


def test_an_httpmock_recording_of_one_exchange_and_an_unquoted_date_header_is_read(
    cli: Invoke, tmp_path: Path
) -> None:
    """A single document was "no 'interactions' list"; YAML reads ``anthropic-version:
    2023-06-01`` written unquoted as a date, which is the header's text."""
    document = httpmock("anthropic")[0]
    document["when"]["header"].append({"name": "anthropic-version", "value": "2023-06-01"})
    text = yaml.safe_dump(document, sort_keys=False).replace("'2023-06-01'", "2023-06-01")
    assert "value: 2023-06-01\n" in text
    path = tmp_path / "smoke.yaml"
    path.write_text(text)
    result = cli("replay", str(path), "--registry", str(REGISTRY), "--json")
    out = json_out(result)
    assert (result.exit_code, out["state"], out["divergences"]) == (12, "INCOMPLETE", [])
    assert len(out["turns"]) == 1


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda d: d[1]["when"].pop("path"),
            "httpmock document 1: 'when' has no 'path' and 'method' text",
        ),
        (
            lambda d: d[1]["then"].update(header=[{"name": "a"}]),
            "httpmock document 1 'then' header holds {'name': 'a'}, not {name, value}",
        ),
        (
            lambda d: d[1]["then"].update(body_encoding="hex"),
            "httpmock document 1: body_encoding 'hex' is not base64",
        ),
        (
            lambda d: d.append({"interactions": []}),
            "5 YAML documents, not one cassette: document 4 is no httpmock 'when'/'then'",
        ),
        (
            lambda d: d[2]["then"].update(status="OK", again={"a": 1}),
            "response has no HTTP status code",
        ),
    ],
)
def test_an_httpmock_recording_that_is_not_one_is_refused_naming_the_document(
    cli: Invoke, tmp_path: Path, change: Any, problem: str
) -> None:
    documents = httpmock("anthropic")
    change(documents)
    path = written(tmp_path / "broken.yaml", documents)
    refused(cli, path, problem)


def test_a_key_repeated_in_a_later_document_is_refused_naming_that_document(
    cli: Invoke, tmp_path: Path
) -> None:
    text = yaml.safe_dump_all(httpmock("anthropic"), sort_keys=False)
    first, _, rest = text.partition("\n---\n")
    path = tmp_path / "twice.yaml"
    path.write_text(first + "\n---\n" + rest.replace("then:\n", "then:\n  status: 500\n", 1))
    refused(cli, path, "document [1].then.status: duplicate key")


def test_values_are_read_as_the_text_they_are_and_a_trailing_separator_holds_nothing(
    tmp_path: Path,
) -> None:
    """YAML read ``2025-03-11T16:38:02Z`` as a date and wrote it back as
    ``2025-03-11T16:38:02+00:00``; ``off`` became ``false``, ``1.10`` became ``1.1``."""
    from toolloop_cli.transcripts.cassette import load_cassette

    documents = httpmock("anthropic")
    documents[0]["then"]["header"] += [
        {"name": "anthropic-ratelimit-requests-reset", "value": "2025-03-11T16:38:02Z"},
        {"name": "x-off", "value": "off"},
    ]
    documents[0]["when"]["query_param"] = [{"name": "v", "value": "1.10"}]
    text = yaml.safe_dump_all(documents, sort_keys=False)
    for value in ("2025-03-11T16:38:02Z", "off", "1.10"):
        text = text.replace(f"'{value}'", value)  # as httpmock writes them: unquoted
    path = tmp_path / "values.yaml"
    path.write_text(text + "---\n")
    first = load_cassette(path).interactions[0]
    assert first.response.headers["anthropic-ratelimit-requests-reset"] == ["2025-03-11T16:38:02Z"]
    assert first.response.headers["x-off"] == ["off"]
    assert first.request.uri.endswith("?v=1.10")
