"""Every layout another recorder writes, broken anywhere, is read or refused in one line.

Ruby VCR, go-vcr, php-vcr, HAR and LangChain's layouts of the shipped refund recordings have
one to three of their values replaced (by the wrong type, a placeholder, base64 or gzip that is
not, an unknown coding) or removed, and are loaded as ``toolloop replay`` loads a cassette: the
result is a cassette or a ``TranscriptError``/``NestedTooDeep`` (a ``ToolloopError``, one line
on stderr and exit 2), never another exception. ``TOOLLOOP_SOAK=1`` runs ten times as many.
"""

from __future__ import annotations

import copy
import gzip
import os
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings, strategies as st
from support.nested import value_paths
from test_har import har
from test_langchain_blanked import blanked
from test_vcr_family import go_vcr, ruby_vcr

from toolloop_cli.errors import ToolloopError
from toolloop_cli.transcripts.cassette import load_cassette

SOAK = os.environ.get("TOOLLOOP_SOAK") == "1"

LAYOUTS: dict[str, Any] = {
    "ruby": yaml.safe_load(ruby_vcr("openai-stream", "base64_string")),
    "go": go_vcr("anthropic"),
    "php": go_vcr("openai")["interactions"],
    "har": har("gemini-stream", base64_answers=True),
    "langchain": blanked("anthropic-stream", uri=True, encoding=True),
}
WRONG = [
    None, 0, -1, 2**70, 1.5, True, "", "x", "**REDACTED**", "H4sI", [], {}, [1], {"a": 1},
    "POST", "https://x", "%%%", b"\x1f\x8b\x08not gzip", "200 OK", "br", "zstd", "gzip",
    "base64", "é", "H4sIé",
]  # fmt: skip


@st.composite
def broken(draw: st.DrawFn) -> tuple[str, bytes]:
    name = draw(st.sampled_from(sorted(LAYOUTS)))
    document = copy.deepcopy(LAYOUTS[name])
    where = value_paths(document)[1:]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(where))
        parent = document
        try:
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict) and draw(st.booleans()):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(st.sampled_from(WRONG))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change took this place away
    data = yaml.safe_dump(document).encode()
    return name, gzip.compress(data) if draw(st.booleans()) else data


@settings(max_examples=4000 if SOAK else 400, deadline=None, derandomize=not SOAK)
@given(case=broken())
def test_a_broken_foreign_cassette_is_read_or_refused_in_one_line(
    tmp_path_factory: Any, case: tuple[str, bytes]
) -> None:
    _, data = case
    path: Path = tmp_path_factory.mktemp("broken") / "cassette.yaml"
    path.write_bytes(data)
    try:
        load_cassette(path)
    except ToolloopError as exc:
        assert "\n" not in str(exc).strip()
