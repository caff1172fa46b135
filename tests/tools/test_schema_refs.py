"""A tool's parameters schema is the allowlist: a ``$ref`` resolves inside it or the registry
is refused, and validating a call never fetches anything.

jsonschema's default follows a remote ``$ref`` when a call is validated: the schema fetched
would then decide what a call may hold, and an unreachable one was a traceback.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import Invoke

from toolloop_cli.tools.validation import compile_validator, schema_problem, violations


@pytest.fixture
def schema_host() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server that serves a permissive schema and logs every request."""
    fetched: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetched.append(self.path)
            body = b'{"type": "integer"}'
            self.send_response(200)
            self.send_header("content-type", "application/schema+json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/schema.json", fetched
    finally:
        server.shutdown()
        server.server_close()


def test_a_local_ref_resolves_inside_the_schema() -> None:
    schema = {
        "type": "object",
        "$defs": {"key": {"type": "string"}},
        "properties": {"key": {"$ref": "#/$defs/key"}},
    }
    assert schema_problem(schema) is None
    validator = compile_validator(schema)
    assert violations(validator, {"key": 7}) == ["$.key: 7 is not of type 'string'"]
    assert violations(validator, {"key": "k"}) == []


def test_a_ref_pointing_nowhere_inside_the_schema_is_a_schema_problem() -> None:
    schema = {"type": "object", "properties": {"key": {"$ref": "#/$defs/missing"}}}
    assert schema_problem(schema) == (
        ".properties.key.$ref",
        "$ref '#/$defs/missing' does not resolve inside the schema",
    )


def test_a_remote_ref_is_never_fetched(schema_host: tuple[str, list[str]]) -> None:
    url, fetched = schema_host
    schema = {"type": "object", "properties": {"amount": {"$ref": url}}}
    assert schema_problem(schema) == (
        ".properties.amount.$ref",
        f"$ref {url!r} does not resolve without a fetch",
    )
    # a validator compiled anyway (no registry check) refuses the call, and fetches nothing
    found = violations(compile_validator(schema), {"amount": 5})
    assert found == [f"$: the schema's $ref {url!r} does not resolve"]
    assert fetched == []


def test_a_registry_whose_schema_refers_outside_itself_is_refused(
    cli: Invoke, tmp_path: Path, schema_host: tuple[str, list[str]]
) -> None:
    url, fetched = schema_host
    registry = tmp_path / "registry.yaml"
    registry.write_text(
        "registry: refs\nrevision: '1'\npolicy:\n  revision: p1\n  approvers: [ops]\n"
        "tools:\n  probe:\n    schema_version: v1\n    description: Probe.\n    risk: read\n"
        "    timeout_ms: 1000\n    handler: toolloop_cli.examples.refunds:get_order\n"
        "    approval: never\n    parameters:\n      type: object\n      properties:\n"
        f"        x: {{$ref: '{url}'}}\n"
    )
    result = cli("registry", "check", str(registry))
    assert result.exit_code == 2, result.output
    assert "tools.probe.parameters.properties.x.$ref" in result.output
    assert "does not resolve without a fetch" in result.output
    assert fetched == []


def test_a_ref_key_in_a_value_is_data_not_a_reference() -> None:
    """``const``, ``enum``, ``default`` and ``examples`` hold values: an object value with a
    ``"$ref"`` string (a JSON Pointer document, say) is allowed, and validated as a value."""
    pointer = {"$ref": "http://example.invalid/x"}
    schema = {
        "type": "object",
        "properties": {
            "target": {"const": pointer, "default": pointer, "examples": [pointer]},
            "kind": {"enum": [pointer, "#/nowhere"]},
        },
    }
    assert schema_problem(schema) is None
    validator = compile_validator(schema)
    assert violations(validator, {"target": pointer, "kind": pointer}) == []
    assert violations(validator, {"target": {"$ref": "other"}}) == [
        "$.target: {'$ref': 'http://example.invalid/x'} was expected"
    ]


def test_a_property_named_like_a_data_keyword_is_still_a_schema() -> None:
    """Under ``properties`` a key is a name: a property called ``const`` or ``enum`` with a
    remote ``$ref`` is refused as any other."""
    schema = {
        "type": "object",
        "properties": {"const": {"$ref": "http://example.invalid/x"}},
    }
    assert schema_problem(schema) == (
        ".properties.const.$ref",
        "$ref 'http://example.invalid/x' does not resolve without a fetch",
    )
