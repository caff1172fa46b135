"""OpenTelemetry export: the refund flow's spans, live and rebuilt from the store, as a real
OTLP/HTTP receiver on 127.0.0.1 decodes them (the ``opentelemetry-proto`` messages).

Checked against the GenAI semantic conventions v1.41.0: span names, kinds, the tree,
``gen_ai.*`` attributes, approvals as events, the operation's state as the span status, and
the content opt-in.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan, Status
from support.cli import Invoke, json_out
from support.paths import REFUND_OPENAI, REGISTRY, ROOT, TASK

import toolloop_cli

MAX_BODY = 8 * 1024 * 1024
INTERNAL, CLIENT = ProtoSpan.SPAN_KIND_INTERNAL, ProtoSpan.SPAN_KIND_CLIENT
UNSET, OK, ERROR = Status.STATUS_CODE_UNSET, Status.STATUS_CODE_OK, Status.STATUS_CODE_ERROR


# -- a real OTLP/HTTP receiver ---------------------------------------------------------------


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(v) for v in value.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


@dataclass
class Collector:
    """What the receiver got: each request's raw bytes and its decoded message."""

    url: str = ""
    raw: list[bytes] = field(default_factory=list)
    requests: list[ExportTraceServiceRequest] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)

    def spans(self, index: int | None = None) -> list[dict[str, Any]]:
        """Every span received (or those of request ``index``), as plain values."""
        chosen = self.requests if index is None else [self.requests[index]]
        out: list[dict[str, Any]] = []
        for request in chosen:
            for rs in request.resource_spans:
                service = _attributes(rs.resource.attributes).get("service.name")
                for ss in rs.scope_spans:
                    scope = (ss.scope.name, ss.scope.version, ss.schema_url)
                    out.extend(_span(s, scope, service) for s in ss.spans)
        return out


def _span(s: ProtoSpan, scope: tuple[str, str, str], service: Any) -> dict[str, Any]:
    return {
        "name": s.name,
        "trace_id": s.trace_id.hex(),
        "span_id": s.span_id.hex(),
        "parent": s.parent_span_id.hex() or None,
        "kind": s.kind,
        "start": s.start_time_unix_nano,
        "end": s.end_time_unix_nano,
        "attributes": _attributes(s.attributes),
        "status": (s.status.code, s.status.message),
        "events": [(e.name, e.time_unix_nano, _attributes(e.attributes)) for e in s.events],
        "links": [(x.trace_id.hex(), x.span_id.hex(), _attributes(x.attributes)) for x in s.links],
        "scope": scope,
        "service": service,
    }


@pytest.fixture
def collector() -> Iterator[Collector]:
    got = Collector()

    class Handler(BaseHTTPRequestHandler):
        timeout = 10

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if self.path != "/v1/traces":
                self.send_error(404)
                return
            if not 0 < length <= MAX_BODY:
                self.send_error(413)
                return
            raw = self.rfile.read(length)
            request = ExportTraceServiceRequest()
            request.ParseFromString(raw)
            got.raw.append(raw)
            got.headers.append({k.lower(): v for k, v in self.headers.items()})
            got.requests.append(request)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(autouse=True)
def _no_ambient_otel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracing here is only what each test asks for."""
    for name in list(os.environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("TOOLLOOP_LEDGER", raising=False)


# -- the refund flow -------------------------------------------------------------------------


def run_refund(cli: Invoke, *extra: str) -> dict[str, Any]:
    args = ["--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI), "--json"]
    result = cli("run", TASK, *args, *extra)
    assert result.exit_code == 10, result.output
    return json_out(result)


def pending(view: dict[str, Any]) -> str:
    (apr,) = [a["approval_id"] for a in view["approvals"] if a["status"] == "PENDING"]
    return str(apr)


def approve_and_resume(cli: Invoke, view: dict[str, Any], *extra: str) -> dict[str, Any]:
    result = cli("approve", pending(view), "--as", "ops-lead", "--resume", "--json", *extra)
    assert result.exit_code == 0, result.output
    return json_out(result)


def by_name(spans: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for s in spans:
        found.setdefault(s["name"], []).append(s)
    return found


def expected_trace_id(operation_id: str) -> str:
    """Independently of the code: 128 bits of SHA-256 over the operation id (docs/telemetry.md)."""
    return hashlib.sha256(f"toolloop\x00trace\x00{operation_id}".encode()).digest()[:16].hex()


def comparable(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(spans, key=lambda s: s["span_id"])


def test_the_live_refund_flow_exports_the_span_tree_of_the_conventions(
    cli: Invoke, collector: Collector
) -> None:
    view = run_refund(cli, "--otel", collector.url)
    op = view["operation_id"]
    assert view["otel"]["spans"] == 6 and view["otel"]["endpoint"] == collector.url + "/v1/traces"
    assert len(collector.requests) == 1, "the paused segment is exported when run ends"
    first = by_name(collector.spans(0))
    (root,) = first["invoke_agent refunds"]
    assert root["parent"] is None and root["kind"] == INTERNAL
    assert root["trace_id"] == expected_trace_id(op)
    assert root["scope"] == (
        "toolloop",
        toolloop_cli.__version__,
        "https://opentelemetry.io/schemas/1.41.0",
    )
    assert root["service"] == "toolloop"
    a = root["attributes"]
    assert a["gen_ai.operation.name"] == "invoke_agent"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.agent.name"] == "refunds" and a["gen_ai.agent.version"] == "2026-12-01.1"
    assert a["gen_ai.conversation.id"] == op == a["toolloop.operation.id"]
    assert (a["toolloop.tenant"], a["toolloop.subject"]) == ("default", "operator")
    assert (a["toolloop.registry.name"], a["toolloop.policy.revision"]) == ("refunds", "pol-3")
    # paused: the span ends, unset status, and says so
    assert root["status"] == (UNSET, "")
    assert a["toolloop.paused"] is True and a["toolloop.operation.state"] == "WAITING_APPROVAL"
    ((event, at, ev),) = root["events"]
    assert event == "toolloop.approval.requested" and root["start"] <= at <= root["end"]
    assert ev["toolloop.approval.id"] == pending(view)
    assert ev["gen_ai.tool.name"] == "submit_refund"
    assert ev["toolloop.approval.requested_by"] == "operator"

    turns = {t["index"]: t for t in view["turns"]}
    chats = first["chat gpt-4.1-2025-04-14"]
    assert [c["attributes"]["toolloop.turn.index"] for c in chats] == [0, 1, 2]
    for chat in chats:
        c, turn = chat["attributes"], turns[chat["attributes"]["toolloop.turn.index"]]
        assert chat["parent"] == root["span_id"] and chat["kind"] == CLIENT
        assert root["start"] <= chat["start"] <= chat["end"] <= root["end"]
        assert c["gen_ai.operation.name"] == "chat"
        assert c["gen_ai.provider.name"] == "openai"
        assert c["gen_ai.request.model"] == "gpt-4.1-2025-04-14"
        assert c["gen_ai.response.model"] == "gpt-4.1-2025-04-14"  # read from the answer
        assert c["gen_ai.response.id"] == turn["response_id"]
        assert c["gen_ai.response.finish_reasons"] == (turn["finish_reason"],)
        assert c["gen_ai.usage.input_tokens"] == turn["usage"]["input_tokens"]
        assert c["gen_ai.usage.output_tokens"] == turn["usage"]["output_tokens"]
    calls = {c["name"]: c for c in view["calls"]}
    for tool in ("get_order", "create_refund_draft"):
        (span,) = first[f"execute_tool {tool}"]
        t = span["attributes"]
        assert span["parent"] == root["span_id"] and span["kind"] == INTERNAL
        assert t["gen_ai.operation.name"] == "execute_tool"
        assert t["gen_ai.tool.name"] == tool and t["gen_ai.tool.type"] == "function"
        assert t["gen_ai.tool.call.id"] == calls[tool]["call_id"]
        assert t["toolloop.call.state"] == "SUCCEEDED" and span["status"] == (UNSET, "")
        assert t["toolloop.call.idempotency_key"] == calls[tool]["idempotency_key"]
    assert "execute_tool submit_refund" not in first  # waiting: not settled in this segment

    done = approve_and_resume(cli, view, "--otel", collector.url)
    assert done["state"] == "COMPLETED" and done["otel"]["spans"] == 3
    assert len(collector.requests) == 2, "the resumed segment: what happened since"
    second = by_name(collector.spans(1))
    (resumed,) = second["invoke_agent refunds"]
    assert resumed["trace_id"] == root["trace_id"] and resumed["span_id"] != root["span_id"]
    assert resumed["status"] == (OK, "")
    r = resumed["attributes"]
    assert r["toolloop.paused"] is False and r["toolloop.operation.state"] == "COMPLETED"
    assert r["toolloop.segment"] == 1 and r["toolloop.resumed_from"] == "WAITING_APPROVAL"
    assert resumed["links"] == [(root["trace_id"], root["span_id"], {"toolloop.link": "resumes"})]
    ((submit,),) = [second["execute_tool submit_refund"]]
    s = submit["attributes"]
    assert submit["parent"] == resumed["span_id"]
    assert s["toolloop.call.state"] == "SUCCEEDED"
    assert s["toolloop.call.approval_id"] == pending(view)
    ((name, at, decided),) = submit["events"]
    assert (
        name == "toolloop.approval.approved"
        and decided["toolloop.approval.decided_by"] == "ops-lead"
    )
    (final,) = second["chat gpt-4.1-2025-04-14"]
    assert final["attributes"]["toolloop.turn.outcome"] == "FINAL_TEXT"
    assert final["parent"] == resumed["span_id"]
    everything = collector.spans()
    assert len({s["span_id"] for s in everything}) == len(everything) == 9
    assert {s["trace_id"] for s in everything} == {root["trace_id"]}


def test_export_otel_rebuilds_exactly_the_live_spans_and_twice_is_the_same(
    cli: Invoke, collector: Collector
) -> None:
    view = run_refund(cli, "--otel", collector.url)
    approve_and_resume(cli, view, "--otel", collector.url)
    live = comparable(collector.spans())
    again = cli("export-otel", view["operation_id"], "--endpoint", collector.url, "--json")
    assert again.exit_code == 0, again.output
    report = json_out(again)
    assert report["spans"] == 9 and report["operations"][0]["segments"] == 2
    assert comparable(collector.spans(2)) == live
    assert cli("export-otel", "--endpoint", collector.url).exit_code == 0  # every operation
    assert comparable(collector.spans(3)) == live


def test_a_run_made_without_tracing_can_be_exported_later(
    cli: Invoke, collector: Collector
) -> None:
    view = run_refund(cli)
    assert "otel" not in view
    approve_and_resume(cli, view)
    assert collector.requests == []
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url}  # the standard variable, no flag
    result = cli("export-otel", view["operation_id"], env=env)
    assert result.exit_code == 0, result.output
    spans = collector.spans()
    roots = [s for s in spans if s["parent"] is None]
    assert [r["attributes"]["toolloop.operation.state"] for r in roots] == [
        "WAITING_APPROVAL",
        "COMPLETED",
    ]
    assert {s["trace_id"] for s in spans} == {expected_trace_id(view["operation_id"])}
    assert sorted(s["name"] for s in spans) == sorted(
        ["invoke_agent refunds"] * 2
        + ["chat gpt-4.1-2025-04-14"] * 4
        + [
            "execute_tool get_order",
            "execute_tool create_refund_draft",
            "execute_tool submit_refund",
        ]
    )
    # timestamps are the store's: each chat span ends when its turn was committed
    shown = json_out(cli("show", view["operation_id"], "--json"))
    assert len(shown["turns"]) == 4


def test_stepping_exports_each_segment_once_when_it_closes(
    cli: Invoke, collector: Collector
) -> None:
    view = run_refund(cli, "--otel", collector.url)
    op = view["operation_id"]
    assert cli("approve", pending(view), "--as", "ops-lead").exit_code == 0
    steps = 0
    while json_out(cli("show", op, "--json"))["state"] != "COMPLETED":
        assert cli("step", op, "--otel", collector.url).exit_code == 0
        steps += 1
    assert steps > 3 and len(collector.requests) == 2, "only the closing step sent spans"
    stepped = comparable(collector.spans())
    cli("export-otel", op, "--endpoint", collector.url)
    assert comparable(collector.spans(2)) == stepped


# -- content: off unless asked for -------------------------------------------------------------

SECRETS = (
    TASK,
    "arrived damaged",  # the task
    "ord_1001",  # an argument value
    "amount_cents",  # an argument name
    "cus_42",  # a result value
    "rf_1001_1",  # the refund a result and the final text name
    "I looked up order",  # the final text
    "customer is abroad",  # a denial reason
)


def test_no_content_is_exported_without_the_opt_in(cli: Invoke, collector: Collector) -> None:
    view = run_refund(cli, "--otel", collector.url)
    approve_and_resume(cli, view, "--otel", collector.url)
    denied = run_refund(cli, "--otel", collector.url)
    deny = ["--deny", "--reason", "customer is abroad", "--resume", "--otel", collector.url]
    assert cli("approve", pending(denied), "--as", "finance", *deny).exit_code == 0
    for raw in collector.raw:
        for secret in SECRETS:
            assert secret.encode() not in raw, secret
    spans = collector.spans()
    assert not [
        k for s in spans for k in s["attributes"] if k.endswith(("messages", "arguments", "result"))
    ]
    (refused,) = [
        s for s in spans if s["name"] == "execute_tool submit_refund" and s["status"][0] == ERROR
    ]
    assert refused["attributes"]["error.type"] == "denied"
    assert refused["attributes"]["toolloop.call.state"] == "DENIED"
    ((name, _, attrs),) = refused["events"]
    assert name == "toolloop.approval.denied" and attrs["toolloop.approval.decided_by"] == "finance"
    assert "toolloop.approval.reason" not in attrs


def test_the_content_opt_in_exports_messages_arguments_and_results(
    cli: Invoke, collector: Collector
) -> None:
    view = run_refund(cli, "--otel", collector.url, "--otel-content")
    done = approve_and_resume(cli, view, "--otel", collector.url, "--otel-content")
    spans = by_name(collector.spans())
    seg0, seg1 = sorted(spans["invoke_agent refunds"], key=lambda s: s["start"])
    assert json.loads(seg0["attributes"]["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": TASK}]}
    ]
    (final,) = json.loads(seg1["attributes"]["gen_ai.output.messages"])
    assert final["parts"] == [{"type": "text", "content": done["final_text"]}]
    assert final["finish_reason"] == "stop"
    calls = {c["call_id"]: c for c in done["calls"]}
    for name in ("get_order", "create_refund_draft", "submit_refund"):
        (span,) = spans[f"execute_tool {name}"]
        call = calls[span["attributes"]["gen_ai.tool.call.id"]]
        assert json.loads(span["attributes"]["gen_ai.tool.call.arguments"]) == call["arguments"]
        assert json.loads(span["attributes"]["gen_ai.tool.call.result"]) == call["result"]["result"]
    chats = sorted(
        spans["chat gpt-4.1-2025-04-14"], key=lambda s: s["attributes"]["toolloop.turn.index"]
    )
    history = json.loads(chats[3]["attributes"]["gen_ai.input.messages"])
    assert [m["role"] for m in history] == ["user"] + ["assistant", "tool"] * 3
    asked = [
        p
        for m in history
        if m["role"] == "assistant"
        for p in m["parts"]
        if p["type"] == "tool_call"
    ]
    answered = [p for m in history if m["role"] == "tool" for p in m["parts"]]
    assert [p["id"] for p in asked] == [p["id"] for p in answered] == list(calls)
    assert all(p["type"] == "tool_call_response" and p["response"]["ok"] for p in answered)
    (out,) = json.loads(chats[0]["attributes"]["gen_ai.output.messages"])
    assert out["finish_reason"] == "tool_call" and out["parts"][0]["name"] == "get_order"
    assert done["final_text"].encode() in b"".join(collector.raw)


# -- failures: one clear line ---------------------------------------------------------------

BLOCK_OTEL = """
import sys
class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _Refuse())
sys.argv = ["toolloop", *sys.argv[1:]]
from toolloop_cli.cli import main
main()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("command", "env"),
    [
        (
            [
                "run",
                TASK,
                "--registry",
                str(REGISTRY),
                "--transcript",
                str(REFUND_OPENAI),
                "--otel",
                "http://127.0.0.1:9",
            ],
            {},
        ),
        (
            ["run", TASK, "--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI)],
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"},
        ),
        (["export-otel"], {}),
    ],
    ids=["flag", "environment", "export-otel"],
)
def test_without_the_extra_tracing_is_one_line_naming_the_install(
    tmp_path: Path, command: list[str], env: dict[str, str]
) -> None:
    store = tmp_path / "store.db"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_OTEL, *command, "--store", str(store)],
        capture_output=True,
        text=True,
        env={**clean, **env},
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "pip install 'toolloop[otel]'" in lines[0], done.stderr
    assert "Traceback" not in done.stderr
    assert not store.exists(), "nothing ran: the store was not even opened"


def test_an_unreachable_collector_is_a_warning_and_the_state_stands(
    cli: Invoke, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    closed = f"http://127.0.0.1:{_free_port()}"
    args = ["--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI), "--otel", closed]
    result = cli("run", TASK, *args)
    assert result.exit_code == 10, result.output  # the operation's own state
    lines = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and "export-otel op_" in lines[0] and closed in lines[0]
    assert "Traceback" not in result.stderr
    failed = cli("export-otel", "--endpoint", closed)
    assert failed.exit_code == 2
    errors = [line for line in failed.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "failed" in errors[0]


def test_the_standard_headers_variable_reaches_the_collector(
    cli: Invoke, collector: Collector, monkeypatch: pytest.MonkeyPatch
) -> None:
    """How Langfuse, Logfire or Honeycomb are given their key (docs/telemetry.md)."""
    view = run_refund(cli)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20secret-1,x-team=ops")
    assert cli("export-otel", view["operation_id"], "--endpoint", collector.url).exit_code == 0
    (headers,) = collector.headers
    assert headers["authorization"] == "Bearer secret-1" and headers["x-team"] == "ops"
    assert headers["content-type"] == "application/x-protobuf"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "not a header list")
    refused = cli("export-otel", view["operation_id"], "--endpoint", collector.url)
    assert refused.exit_code == 2 and "not sent" in refused.stderr
    assert len(collector.requests) == 1, "nothing is sent without the headers it was told to add"


@pytest.mark.parametrize("endpoint", ["notaurl", "ftp://host:4318", "http://"])
def test_an_endpoint_that_is_not_an_http_url_is_refused_before_anything_runs(
    cli: Invoke, store_path: Path, endpoint: str
) -> None:
    args = ["--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI), "--otel", endpoint]
    result = cli("run", TASK, *args)
    assert result.exit_code == 2 and f"{endpoint!r} is not an http" in result.stderr
    assert not store_path.exists()


def test_content_without_an_endpoint_is_a_usage_error(cli: Invoke) -> None:
    args = ["--registry", str(REGISTRY), "--transcript", str(REFUND_OPENAI), "--otel-content"]
    result = cli("run", TASK, *args)
    assert result.exit_code == 2 and "--otel-content needs an endpoint" in result.stderr


# -- layering -----------------------------------------------------------------------------------


def test_span_building_loads_no_opentelemetry_no_store_and_no_adapter() -> None:
    """spans.py (with segments, content, model) is pure: records in, span values out."""
    code = (
        "import sys, toolloop_cli.telemetry.spans; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('opentelemetry', 'sqlite3',"
        " 'sqlite_utils', 'httpx') or m.startswith(('toolloop_cli.store', 'toolloop_cli.wiring',"
        " 'toolloop_cli.adapters'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- every outcome of the refund exercise, replayed ---------------------------------------------

BRANCHES = ROOT / "transcripts" / "branches" / "openai"


@pytest.mark.parametrize(
    ("branch", "state"),
    [
        ("max_tokens_mid_call", "INCOMPLETE"),
        ("unknown_tool", "COMPLETED"),
        ("approval_expired", "COMPLETED"),
        ("submit_timeout_reconciled", "COMPLETED"),
        ("duplicate_then_no_progress", "NO_PROGRESS"),
    ],
)
def test_each_branch_replayed_has_one_span_per_turn_and_call_and_its_state_as_status(
    cli: Invoke, collector: Collector, branch: str, state: str
) -> None:
    args = ["--registry", str(REGISTRY), "--approve-as", "ops-lead", "--otel", collector.url]
    env = {"TOOLLOOP_REFUND_DELAY_MS": "600"}  # the reconciled branch's timeout
    view = json_out(cli("replay", str(BRANCHES / f"{branch}.yaml"), "--json", *args, env=env))
    assert view["state"] == state
    spans = collector.spans()
    roots = sorted(
        (s for s in spans if s["parent"] is None), key=lambda s: s["attributes"]["toolloop.segment"]
    )
    last = roots[-1]
    assert last["attributes"]["toolloop.operation.state"] == state
    if state == "COMPLETED":
        assert last["status"] == (OK, "")
    else:
        assert last["status"][0] == ERROR and last["status"][1].startswith(f"{state}: ")
        assert last["attributes"]["error.type"] == state
    # a replay's clock stands still: spans are placed by the log's order, not by time
    chats = [s for s in spans if s["attributes"]["gen_ai.operation.name"] == "chat"]
    assert sorted(c["attributes"]["toolloop.turn.index"] for c in chats) == [
        t["index"] for t in view["turns"]
    ]
    segment_of = {r["span_id"]: r["attributes"]["toolloop.segment"] for r in roots}
    by_turn = sorted(chats, key=lambda c: c["attributes"]["toolloop.turn.index"])
    placed = [segment_of[c["parent"]] for c in by_turn]
    assert placed == sorted(placed) and placed[0] == 0, "each request under the segment it ran in"
    tools = {
        s["attributes"]["gen_ai.tool.call.id"]: s
        for s in spans
        if s["name"].startswith("execute_tool")
    }
    assert {c["call_id"]: c["state"] for c in view["calls"]} == {
        k: s["attributes"]["toolloop.call.state"] for k, s in tools.items()
    }
    for call in view["calls"]:
        span = tools[call["call_id"]]
        assert span["name"] == f"execute_tool {call['name']}"
        errored = call["state"] not in ("SUCCEEDED", "RECONCILED", "DUPLICATE")
        assert (span["status"][0] == ERROR) is errored, call
        if errored:
            assert span["attributes"]["error.type"] == call["result"]["error"]["code"]
    if branch == "approval_expired":
        names = [e[0] for s in tools.values() for e in s["events"]]
        assert names.count("toolloop.approval.expired") == 1
        assert names.count("toolloop.approval.approved") == 1


# -- span building alone: an escalation continued by an operator ------------------------------


def _history(upto: int) -> Any:
    """An operation whose call's outcome was unknown (ESCALATED), continued and reconciled."""
    from toolloop_cli.engine.records import (
        CallRecord,
        Counters,
        Guards,
        OperationRecord,
        TurnRecord,
    )
    from toolloop_cli.engine.sources import LiveSource
    from toolloop_cli.engine.states import CallState, OpState
    from toolloop_cli.engine.types import TurnOutcome, Usage
    from toolloop_cli.telemetry.model import History

    def at(n: int) -> str:
        return f"2026-12-01T10:00:{n:02d}.000000Z"

    log = [
        ("operation", None, None, "MODEL_REQUESTED", None),
        ("operation", None, "MODEL_REQUESTED", "VALIDATING", "1 call(s) proposed"),
        ("call", "c1", "PROPOSED", "APPROVED", None),
        ("operation", None, "VALIDATING", "EXECUTING", None),
        ("call", "c1", "APPROVED", "EXECUTING", "intent committed"),
        ("call", "c1", "EXECUTING", "UNKNOWN_OUTCOME", "timed out"),
        ("operation", None, "EXECUTING", "ESCALATED", "outcome of submit_refund unknown"),
        ("operation", None, "ESCALATED", "EXECUTING", "continued by ops-lead"),
        ("call", "c1", "UNKNOWN_OUTCOME", "RECONCILED", "reconciled"),
        ("operation", None, "EXECUTING", "RESULTS_READY", None),
        ("operation", None, "RESULTS_READY", "MODEL_REQUESTED", None),
        ("operation", None, "MODEL_REQUESTED", "COMPLETED", "completed"),
    ][: upto + 1]
    transitions = [
        {"kind": k, "call_id": c, "source": s, "target": t, "reason": r, "at": at(i)}
        for i, (k, c, s, t, r) in enumerate(log)
    ]
    settled = upto >= 8
    turns = [
        TurnRecord(
            operation_id="op_x",
            idx=0,
            response_id="resp_0",
            outcome=TurnOutcome.TOOL_PROPOSALS,
            finish_reason="completed",
            request_sha256="sha256:a",
            response_sha256="sha256:b",
            usage=Usage(input_tokens=10, output_tokens=2, total_tokens=12),
            created_at=at(1),
        ),
    ]
    if upto >= 11:
        turns.append(
            TurnRecord(
                operation_id="op_x",
                idx=1,
                response_id="resp_1",
                outcome=TurnOutcome.FINAL_TEXT,
                finish_reason="completed",
                text="done: rf_1",
                request_sha256="sha256:c",
                response_sha256="sha256:d",
                created_at=at(11),
            )
        )
    call = CallRecord(
        operation_id="op_x",
        turn_idx=0,
        seq=0,
        response_id="resp_0",
        call_id="c1",
        name="submit_refund",
        raw_arguments='{"order_id": "ord_1"}',
        arguments={"order_id": "ord_1"},
        state=CallState.RECONCILED if settled else CallState.UNKNOWN_OUTCOME,
        idempotency_key="idk_1",
        model_result={"ok": True, "result": {"refund_id": "rf_1"}} if settled else None,
        result_sha256="sha256:r" if settled else None,
    )
    state = OpState(log[-1][3])
    op = OperationRecord(
        operation_id="op_x",
        state=state,
        task="refund ord_1",
        provider="anthropic",
        api_family="messages",
        model="claude-x",
        adapter_revision="anthropic-messages/1",
        tenant="t",
        subject="s",
        registry_name="refunds",
        registry_revision="r1",
        registry_path="/r.yaml",
        registry_sha256="sha256:g",
        policy_revision="p1",
        settings={"model": "claude-x"},
        source=LiveSource(base_url="https://api.anthropic.com"),
        guards=Guards(),
        counters=Counters(),
        final_text="done: rf_1" if upto >= 11 else None,
        created_at=at(0),
        updated_at=at(upto),
        deadline_at=at(59),
    )
    return History(operation=op, turns=turns, calls=[call], approvals=[], transitions=transitions)


@pytest.mark.parametrize("content", [False, True])
def test_closed_segments_never_change_and_a_call_settled_again_gets_a_second_span(
    content: bool,
) -> None:
    from toolloop_cli.telemetry.spans import build_spans

    escalated = build_spans(_history(6), content=content)
    full = build_spans(_history(11), content=content)
    assert full[: len(escalated)] == escalated, (
        "what an earlier export sent is what a later one sends"
    )
    assert build_spans(_history(11), since=1, content=content) == full[len(escalated) :]
    root0, chat0, tool0 = escalated
    assert (root0.status, root0.description) == (
        "ERROR",
        "ESCALATED: outcome of submit_refund unknown",
    )
    assert (
        root0.attributes["error.type"] == "ESCALATED"
        and root0.attributes["toolloop.paused"] is False
    )
    assert (
        chat0.attributes["server.address"] == "api.anthropic.com"
        and chat0.attributes["server.port"] == 443
    )
    assert chat0.attributes["gen_ai.provider.name"] == "anthropic"
    assert tool0.attributes["toolloop.call.state"] == "UNKNOWN_OUTCOME" and tool0.status == "ERROR"
    assert "gen_ai.tool.call.result" not in tool0.attributes
    root1, chat1, tool1 = full[3:]
    assert (
        root1.links[0].span_id == root0.span_id
        and root1.attributes["toolloop.resumed_from"] == "ESCALATED"
    )
    assert tool1.attributes["toolloop.call.state"] == "RECONCILED" and tool1.status == "UNSET"
    assert tool1.attributes["toolloop.call.attempt"] == 1 and tool1.span_id != tool0.span_id
    assert tool1.parent_id == root1.span_id and chat1.parent_id == root1.span_id
    assert ("gen_ai.tool.call.result" in tool1.attributes) is content
    assert all(s.trace_id == root0.trace_id for s in full)
