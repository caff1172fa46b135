"""``handler: http:POST …`` tools against a real HTTP server on 127.0.0.1, started by the test:
the Idempotency-Key header, status mapping, the timeout, the response cap, and a resent
request (the reconcile) carrying the same key and refunding once."""

from __future__ import annotations

import gzip
import json
import threading
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.scripted import answer, call, final, run_script

from toolloop_cli.errors import RegistryError
from toolloop_cli.store import open_store
from toolloop_cli.tools.registry import load_registry

pytestmark = pytest.mark.timeout(60)
REFUND = {"order_id": "ord_1001", "amount_cents": 4999}


class Refunds(ThreadingHTTPServer):
    """A payments endpoint that keeps its answer per Idempotency-Key, as careful APIs do."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.saved: dict[str, dict[str, Any]] = {}
        self.seen: list[dict[str, str]] = []
        #: how the next requests misbehave, consumed one per request: "503_after_commit",
        #: "hang", "huge", "422", "gzip" (a compressed answer), "bomb" (a small compressed
        #: answer that inflates to 100 MB), "br" (an encoding toolloop did not ask for)
        self.script: list[str] = []

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that stopped reading (the response cap) is expected, not an error."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/refunds"


class _Handler(BaseHTTPRequestHandler):
    server: Refunds

    def log_message(self, format: str, *args: Any) -> None:  # keep the test output quiet
        pass

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(min(size, 65536)) or b"{}")
        key = self.headers.get("Idempotency-Key", "")
        self.server.seen.append(
            {
                "key": key,
                "call": self.headers.get("X-Toolloop-Call-Id", ""),
                "path": self.path,
                "accept-encoding": self.headers.get("Accept-Encoding", ""),
            }
        )
        mode = self.server.script.pop(0) if self.server.script else ""
        if mode == "hang":
            time.sleep(3)
        if mode == "422":
            return self._send(422, {"error": "amount exceeds what was paid"})
        if mode == "huge":
            return self._send(200, {"pad": "x" * 100_000})
        if mode in ("bomb", "br"):
            return self._send_encoded(_BOMB if mode == "bomb" else b"\x0b\x03\x80{}\x03", mode)
        if self.path == "/lookup":
            found = self.server.saved.get(key)
            return self._send(200, found) if found else self._send(404, {"error": "no such key"})
        if key not in self.server.saved:
            refund_id = f"rf_{len(self.server.saved) + 1}"
            self.server.saved[key] = {**body, "refund_id": refund_id, "status": "submitted"}
        if mode == "503_after_commit":
            return self._send(503, {"error": "gateway timeout after the write"})
        if mode == "gzip":
            return self._send_encoded(gzip.compress(json.dumps(self.server.saved[key]).encode()))
        self._send(200, self.server.saved[key])

    def _send(self, status: int, value: Any) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_encoded(self, data: bytes, encoding: str = "gzip") -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip" if encoding == "bomb" else encoding)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _gzip_bomb(size: int) -> bytes:
    """A gzip body that inflates to a ``size``-byte JSON object (about 1,000:1)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"0" * (1 << 20)
    parts = [packer.compress(b'{"pad": "')]
    parts += [packer.compress(zeros) for _ in range(size >> 20)]
    return b"".join([*parts, packer.compress(b'"}'), packer.flush()])


_BOMB = _gzip_bomb(100 << 20)


@pytest.fixture
def server() -> Iterator[Refunds]:
    httpd = Refunds()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
    thread.join(5)


def _registry(tmp_path: Path, handler: str, **tool: Any) -> Path:
    doc = {
        "registry": "http-refunds",
        "revision": "1",
        "policy": {"revision": "p1", "approvers": ["ops-lead"]},
        "tools": {
            "submit_refund": {
                "schema_version": "submit-v1",
                "description": "Submit a refund.",
                "risk": "irreversible",
                "approval": "never",
                "timeout_ms": 10000,
                "handler": handler,
                "idempotency": {"key_fields": ["order_id", "amount_cents"]},
                "parameters": {
                    "type": "object",
                    "properties": {
                        "order_id": {"type": "string"},
                        "amount_cents": {"type": "integer"},
                    },
                    "required": ["order_id", "amount_cents"],
                    "additionalProperties": False,
                },
                **tool,
            }
        },
    }
    path = tmp_path / "http.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _submit(tmp_path: Path, registry: Path) -> Any:
    store = open_store(tmp_path / "store.db")
    script = [answer("resp_1", call("submit_refund", REFUND, "call_1")), final("done")]
    result, _ = run_script(store, script, registry=registry)
    (submitted,) = store.calls(result.operation.operation_id)
    return result.operation, submitted


def test_a_2xx_is_the_result_and_the_call_key_goes_in_idempotency_key(
    tmp_path: Path, server: Refunds
) -> None:
    op, submitted = _submit(tmp_path, _registry(tmp_path, f"http:POST {server.url}"))
    assert (op.state.value, submitted.state.value) == ("COMPLETED", "SUCCEEDED")
    assert submitted.model_result["result"]["refund_id"] == "rf_1"
    (seen,) = server.seen
    assert seen["key"] == submitted.idempotency_key and seen["key"]
    assert seen["call"] == "call_1"


def test_a_4xx_is_a_business_error_the_model_is_told(tmp_path: Path, server: Refunds) -> None:
    server.script = ["422"]
    op, submitted = _submit(tmp_path, _registry(tmp_path, f"http:POST {server.url}"))
    assert submitted.state.value == "FAILED"
    error = submitted.model_result["error"]
    assert error["code"] == "tool_error"
    assert "HTTP 422" in error["message"] and "exceeds what was paid" in error["message"]
    assert op.state.value == "COMPLETED"


def test_a_5xx_after_the_write_is_resent_with_the_same_key_and_refunds_once(
    tmp_path: Path, server: Refunds
) -> None:
    server.script = ["503_after_commit"]
    handler = f"http:POST {server.url}"
    registry = _registry(tmp_path, handler, reconcile=handler)
    op, submitted = _submit(tmp_path, registry)
    assert submitted.state.value == "RECONCILED"
    assert op.state.value == "COMPLETED"
    first, resent = server.seen
    assert first["key"] == resent["key"] == submitted.idempotency_key
    assert len(server.saved) == 1
    assert submitted.model_result["result"]["refund_id"] == "rf_1"


def test_a_5xx_with_no_reconcile_leaves_unknown_outcome(tmp_path: Path, server: Refunds) -> None:
    server.script = ["503_after_commit"]
    op, submitted = _submit(tmp_path, _registry(tmp_path, f"http:POST {server.url}"))
    assert submitted.state.value == "UNKNOWN_OUTCOME"
    assert op.state.value == "ESCALATED"
    assert "HTTP 503" in str((submitted.protected_audit or {}).get("error"))


def test_a_lookup_404_means_no_record_so_the_failed_call_did_not_happen(
    tmp_path: Path, server: Refunds
) -> None:
    server.script = ["422", ""]  # the submit is refused; nothing to look up
    registry = _registry(
        tmp_path, f"http:POST {server.url}", reconcile=f"http:POST {server.url[:-8]}/lookup"
    )
    op, submitted = _submit(tmp_path, registry)
    assert submitted.state.value == "FAILED"
    assert server.saved == {}


def test_a_timed_out_side_effect_the_lookup_cannot_confirm_is_unknown(
    tmp_path: Path, server: Refunds
) -> None:
    server.script = ["hang"]
    lookup = f"http:POST {server.url[:-8]}/lookup"
    registry = _registry(tmp_path, f"http:POST {server.url}", timeout_ms=300, reconcile=lookup)
    op, submitted = _submit(tmp_path, registry)
    # the lookup ran while the hung request was still being served: nothing saved yet
    assert submitted.state.value == "UNKNOWN_OUTCOME"
    audit = submitted.protected_audit or {}
    assert audit.get("status") == "timed_out"
    assert "timed out after" in str(audit.get("error"))
    assert audit.get("reconcile") == "no record of the key"
    assert [s["path"] for s in server.seen] == ["/refunds", "/lookup"]


def test_a_response_over_the_cap_is_not_read_and_is_not_a_result(
    tmp_path: Path, server: Refunds
) -> None:
    server.script = ["huge"]
    registry = _registry(tmp_path, f"http:POST {server.url}", max_result_bytes=4096)
    op, submitted = _submit(tmp_path, registry)
    assert submitted.state.value == "UNKNOWN_OUTCOME"
    assert "over the tool's max_result_bytes (4096)" in str(submitted.protected_audit)


def _answered(tmp_path: Path, server: Refunds, mode: str) -> Any:
    """The submitted call, when the endpoint answers as ``mode`` says."""
    server.script = [mode]
    return _submit(tmp_path, _registry(tmp_path, f"http:POST {server.url}"))[1]


def test_a_compressed_answer_is_decoded_and_gzip_or_deflate_is_all_that_is_asked_for(
    tmp_path: Path, server: Refunds
) -> None:
    submitted = _answered(tmp_path, server, "gzip")
    assert submitted.state.value == "SUCCEEDED"
    assert submitted.model_result["result"]["refund_id"] == "rf_1"
    assert server.seen[0]["accept-encoding"] == "gzip, deflate"


def _traced_peak(tmp_path: Path, server: Refunds, mode: str) -> tuple[Any, int]:
    """The call ``mode`` answers, and the most memory Python held while it ran."""
    server.script = [mode]
    folder = tmp_path / mode
    folder.mkdir()
    registry = _registry(folder, f"http:POST {server.url}", max_result_bytes=65536)
    tracemalloc.start()
    try:
        _, submitted = _submit(folder, registry)
        return submitted, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_compression_bomb_is_refused_at_the_cap_without_being_inflated(
    tmp_path: Path, server: Refunds
) -> None:
    """100 KB of gzip that inflates to 100 MB, against a 64 KiB cap: the body is inflated a
    bounded piece at a time and the read stops at the cap, so the call takes no more memory
    than one with a small gzip answer. Before, each received chunk was inflated whole (about
    130 MB more) before the cap was checked."""
    _, small = _traced_peak(tmp_path, server, "gzip")
    submitted, bomb = _traced_peak(tmp_path, server, "bomb")
    assert submitted.state.value == "UNKNOWN_OUTCOME"
    assert "over the tool's max_result_bytes (65536)" in str(submitted.protected_audit)
    assert bomb < small + (8 << 20), f"peak {bomb:,} bytes against {small:,}"


def test_an_encoding_toolloop_did_not_ask_for_is_refused_not_read(
    tmp_path: Path, server: Refunds
) -> None:
    submitted = _answered(tmp_path, server, "br")
    assert submitted.state.value == "UNKNOWN_OUTCOME"
    assert "content-encoding 'br', which toolloop does not accept" in str(submitted.protected_audit)


@pytest.mark.parametrize(
    ("handler", "message"),
    [
        ("http:POST http://example.com/refunds", "plain http is allowed to loopback only"),
        ("http:GET https://example.com/refunds", "must be 'http:POST URL'"),
        ("http:POST ftp://example.com/x", "is not an http(s) URL"),
    ],
)
def test_bad_http_handlers_are_refused_at_load(tmp_path: Path, handler: str, message: str) -> None:
    with pytest.raises(RegistryError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_registry(_registry(tmp_path, handler))


def test_header_variables_must_be_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REFUNDS_TOKEN", raising=False)
    registry = _registry(
        tmp_path,
        "http:POST https://example.com/refunds",
        headers_from_env={"Authorization": "REFUNDS_TOKEN"},
    )
    with pytest.raises(RegistryError, match="environment variable REFUNDS_TOKEN is not set"):
        load_registry(registry)
    assert load_registry(registry, import_handlers=False).imported is False


def test_a_2xx_json_body_with_a_repeated_key_is_a_failure_not_its_last_value() -> None:
    """``{"a": 1, "a": 2}`` was the result ``{"a": 2}``: what the endpoint meant is unknown, so
    the call fails (the operator has the reason). Text that is not JSON is still the result."""
    from toolloop_cli.tools.http_tool import _outcome

    url = "https://tools.example/refund"
    with pytest.raises(RuntimeError, match="answered JSON toolloop does not take: duplicate key"):
        _outcome("POST", url, 200, b'{"a": 1, "a": 2}', reconcile=False)
    assert _outcome("POST", url, 200, b'{"a": 1}', reconcile=False) == {"a": 1}
    assert _outcome("POST", url, 200, b"<html>ok</html>", reconcile=False) == "<html>ok</html>"
