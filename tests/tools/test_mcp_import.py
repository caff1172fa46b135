"""``registry import-mcp``: a registry skeleton from a real MCP server's tool list that loads
back, every tool write + always-approved, with the schema hashes pinned."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.cli import Invoke
from support.mcp_servers import SERVER, announced, http_server, stdio_entry
from support.scripted import answer, call, final, run_script

from toolloop_cli.audit.canonical import sha256_of
from toolloop_cli.store import open_store
from toolloop_cli.tools.mcp_client import close_all
from toolloop_cli.tools.registry import load_registry

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def _close_servers() -> Iterator[None]:
    yield
    close_all()


def test_import_from_a_stdio_server_writes_a_pinned_gated_skeleton_that_loads(
    cli: Invoke, tmp_path: Path
) -> None:
    out = tmp_path / "imported.yaml"
    command = shlex.join([sys.executable, str(SERVER)])
    result = cli("registry", "import-mcp", "--stdio", command, "--name", "refunds", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    doc = yaml.safe_load(out.read_text())
    schemas = announced(stdio_entry(tmp_path))
    assert list(doc["tools"]) == list(schemas)
    for name, tool in doc["tools"].items():
        assert (tool["risk"], tool["approval"]) == ("write", "always")
        assert tool["handler"] == f"mcp:refunds/{name}"
        assert tool["parameters"] == schemas[name]
        assert tool["input_schema_sha256"] == sha256_of(schemas[name])
    assert doc["mcp_servers"]["refunds"] == {"command": sys.executable, "args": [str(SERVER)]}
    loaded = load_registry(out)  # connects, lists and checks every pin
    assert set(loaded.tools) == set(schemas)
    assert all(t.approval == "always" and t.side_effecting for t in loaded.tools.values())
    assert cli("registry", "check", str(out)).exit_code == 0


def test_import_from_a_streamable_http_server_to_stdout(cli: Invoke, tmp_path: Path) -> None:
    with http_server(tmp_path) as entry:
        result = cli("registry", "import-mcp", "--url", entry["url"], "--name", "refunds")
        assert result.exit_code == 0, result.stderr
        doc = yaml.safe_load(result.stdout)
        assert doc["mcp_servers"] == {"refunds": {"url": entry["url"]}}
        path = tmp_path / "from-http.yaml"
        path.write_text(result.stdout)
        assert set(load_registry(path).tools) == {
            "get_order",
            "create_refund_draft",
            "submit_refund",
            "lookup_refund",
        }


def test_import_needs_exactly_one_server_and_says_so_on_one_line(cli: Invoke) -> None:
    result = cli("registry", "import-mcp")
    assert result.exit_code == 2
    assert result.stderr.strip().count("\n") == 0
    assert "exactly one of --stdio" in result.stderr


def test_import_from_a_command_that_is_not_a_server_fails_on_one_stderr_line(
    tmp_path: Path,
) -> None:
    """A real process, so the SDK's own logging (a parse traceback) would show if it leaked."""
    command = shlex.join([sys.executable, "-c", "print('not an MCP server')"])
    argv = [sys.executable, "-m", "toolloop_cli", "registry", "import-mcp", "--stdio", command]
    done = subprocess.run(
        [*argv, "--name", "bad"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert "MCP server 'bad' could not be reached" in done.stderr


def test_an_existing_output_file_is_replaced_only_with_force(cli: Invoke, tmp_path: Path) -> None:
    """An edited registry (risks lowered, approvals set by its owner) is not reset to the
    skeleton by a second import: without --force it is refused before the server starts."""
    out = tmp_path / "edited.yaml"
    out.write_text("registry: mine\n# edited by hand\n")
    command = shlex.join([sys.executable, str(SERVER)])
    args = ("registry", "import-mcp", "--stdio", command, "--name", "refunds", "-o", str(out))
    refused = cli(*args)
    assert refused.exit_code == 2
    assert "exists; refusing to replace it (--force does)" in refused.stderr
    assert out.read_text() == "registry: mine\n# edited by hand\n"
    forced = cli(*args, "--force")
    assert forced.exit_code == 0, forced.stderr
    assert set(yaml.safe_load(out.read_text())["tools"]) == set(announced(stdio_entry(tmp_path)))


def test_an_output_that_is_not_a_regular_file_is_refused(cli: Invoke, tmp_path: Path) -> None:
    command = shlex.join([sys.executable, str(SERVER)])
    result = cli("registry", "import-mcp", "--stdio", command, "-o", str(tmp_path), "--force")
    assert result.exit_code == 2
    assert "is a directory, not a registry file" in result.stderr


def _stdio_server(name: str, handlers: str) -> str:
    """The source of a low-level MCP server over stdio: ``handlers`` defines ``list_tools`` and
    ``call_tool`` (with ``anyio`` and ``mcp_types as types`` imported)."""
    return f"""
import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
{handlers}
server = Server({name!r}, on_list_tools=list_tools, on_call_tool=call_tool)

async def main():
    async with stdio_server() as (r, w):
        await server.run(r, w, server.create_initialization_options())

anyio.run(main)
"""


LIST_HANGS = _stdio_server(
    "list-hangs",
    """

async def list_tools(ctx, params):
    await anyio.sleep(3600)

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])
""",
)


def test_a_server_whose_tool_list_never_answers_is_unreachable_not_a_traceback(
    cli: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handshake answers, tools/list never does: one line, exit 2 (a timeout of the
    listing is the server being unusable, not a call's timeout that escaped)."""
    from toolloop_cli.tools import mcp_client

    monkeypatch.setattr(mcp_client, "CONNECT_TIMEOUT_S", 5.0)
    script = tmp_path / "server.py"
    script.write_text(LIST_HANGS)
    command = shlex.join([sys.executable, str(script)])
    result = cli("registry", "import-mcp", "--stdio", command, "--name", "slow")
    assert result.exit_code == 2, result.output
    assert "MCP server 'slow': tools/list cancelled after 5 s" in result.stderr


PAGED = _stdio_server(
    "paged",
    """
import sys

MODE = sys.argv[1]
NAMES = [f"tool_{i}" for i in range(7)]
if MODE == "twice":
    NAMES[5] = "tool_1"

async def list_tools(ctx, params):
    start = int(params.cursor) if params is not None and params.cursor else 0
    page = NAMES[start : start + 3]
    tools = [
        types.Tool(name=n, description=f"{n} does one thing",
                   input_schema={"type": "object", "properties": {"x": {"type": "string"}}})
        for n in page
    ]
    following = start + 3
    if MODE == "again":
        following = 3
    nxt = str(following) if following < len(NAMES) else None
    return types.ListToolsResult(tools=tools, next_cursor=nxt)

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="ok")])
""",
)


def _paged_server(tmp_path: Path, mode: str) -> str:
    script = tmp_path / "paged.py"
    script.write_text(PAGED)
    return shlex.join([sys.executable, str(script), mode])


def test_every_page_of_a_paged_tool_list_is_imported_in_server_order(
    cli: Invoke, tmp_path: Path
) -> None:
    """A server that pages its tools/list (three tools a page, seven tools): the skeleton names
    all seven, not the first page's three."""
    out = tmp_path / "paged.yaml"
    result = cli("registry", "import-mcp", "--stdio", _paged_server(tmp_path, "ok"), "-o", str(out))
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(out.read_text())
    assert list(doc["tools"]) == [f"tool_{i}" for i in range(7)]
    assert load_registry(out).tools["tool_6"].description == "tool_6 does one thing"


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("twice", "tools/list announces 'tool_1' twice"),
        ("again", "tools/list gives cursor '3' again"),
    ],
)
def test_a_tool_list_that_names_a_tool_twice_or_never_ends_is_refused_on_one_line(
    cli: Invoke, tmp_path: Path, mode: str, reason: str
) -> None:
    """Two schemas under one name (which would a call be checked against?) and a cursor given
    again (a listing that would never end) make the server unusable: exit 2, one line."""
    result = cli("registry", "import-mcp", "--stdio", _paged_server(tmp_path, mode), "--name", "p")
    assert result.exit_code == 2, result.output
    assert f"MCP server 'p': {reason}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


SILENT = """
import sys
import time
from pathlib import Path

Path(sys.argv[1]).write_text(str(__import__("os").getpid()))
time.sleep(3600)
"""


def _running(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\\tZ" not in status.split("State:", 1)[1].split("\\n", 1)[0]


def test_a_server_that_never_answers_the_handshake_is_stopped_when_the_command_ends(
    cli: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handshake is cancelled at its timeout, which stops the server process: before, the
    command waited 10 s more and then left the server running after it exited."""
    from toolloop_cli.tools import mcp_client

    monkeypatch.setattr(mcp_client, "CONNECT_TIMEOUT_S", 3.0)
    script, pid_file = tmp_path / "silent.py", tmp_path / "pid"
    script.write_text(SILENT)
    command = shlex.join([sys.executable, str(script), str(pid_file)])
    result = cli("registry", "import-mcp", "--stdio", command, "--name", "silent")
    assert result.exit_code == 2, result.output
    assert "did not answer the handshake within 3 s" in result.stderr
    assert not _running(int(pid_file.read_text()))


ODD_NAMES = _stdio_server(
    "odd",
    """

NAMES = ["get.order", "Get Order", "a/b", "get_order", "x" * 200, "tab\\there", "bad_schema"]

async def list_tools(ctx, params):
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    bad = {"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}
    return types.ListToolsResult(
        tools=[
            types.Tool(name=n, description=f"{n}.",
                       input_schema=bad if n == "bad_schema" else schema)
            for n in NAMES
        ]
    )

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"ran {params.name}")])
""",
)


def test_tools_with_names_outside_mcps_advice_are_imported_callable_and_none_replaces_another(
    cli: Invoke, tmp_path: Path
) -> None:
    """MCP advises ``[A-Za-z0-9_.-]`` for tool names; servers also use spaces and slashes.
    Each becomes a registry key of its own (``get.order`` and ``get_order`` both), the
    skeleton loads, and a call reaches the tool by its announced name. A name no handler can
    name (over 128 characters, a control character), or whose schema a registry refuses, is
    left out with the reason, so the skeleton loads as written."""
    script = tmp_path / "odd.py"
    script.write_text(ODD_NAMES)
    out = tmp_path / "odd.yaml"
    command = shlex.join([sys.executable, str(script)])
    result = cli("registry", "import-mcp", "--stdio", command, "--name", "odd", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stderr.count("left out ") == 3
    assert "left out 'tab\\there': no handler can name it" in result.stderr
    assert "left out 'bad_schema': its inputSchema is refused at .properties.n.minimum:" in (
        result.stderr
    )
    doc = yaml.safe_load(out.read_text())
    handlers = {key: tool["handler"] for key, tool in doc["tools"].items()}
    assert handlers == {
        "get_order": "mcp:odd/get.order",
        "Get_Order": "mcp:odd/Get Order",
        "a_b": "mcp:odd/a/b",
        "get_order_2": "mcp:odd/get_order",
    }
    assert load_registry(out, import_handlers=False).name == "odd"
    as_json = cli("registry", "import-mcp", "--stdio", command, "--name", "odd", "--json")
    left_out = json.loads(as_json.stdout)["left_out"]
    assert [t["tool"] for t in left_out] == ["x" * 200, "tab\there", "bad_schema"]
    doc["tools"]["Get_Order"].update(risk="read", approval="never")
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    store = open_store(tmp_path / "store.db")
    script_turns = [answer("resp_1", call("Get_Order", {}, "call_1")), final("done")]
    done, _ = run_script(store, script_turns, registry=out)
    assert done.operation.state.value == "COMPLETED"
    (ran,) = store.calls(done.operation.operation_id)
    assert ran.model_result is not None
    assert "ran Get Order" in json.dumps(ran.model_result)


NO_JSON_FORM = _stdio_server(
    "numbers",
    """
import sys

BIG = {"inf": float("inf"), "bigint": 2**60}

async def list_tools(ctx, params):
    plain = {"type": "object", "properties": {}}
    huge = {"type": "object", "properties": {"x": {"type": "number", "maximum": BIG[sys.argv[1]]}}}
    tools = [types.Tool(name="huge", description="huge.", input_schema=huge)]
    if sys.argv[2] == "both":
        tools.append(types.Tool(name="plain", description="plain.", input_schema=plain))
    return types.ListToolsResult(tools=tools)

async def call_tool(ctx, params):
    return types.CallToolResult(content=[types.TextContent(type="text", text="ran")])
""",
)


@pytest.mark.parametrize("number", ["inf", "bigint"])
def test_a_schema_without_a_canonical_json_form_leaves_its_tool_out_not_the_import(
    cli: Invoke, tmp_path: Path, number: str
) -> None:
    """``maximum: 1e400`` (or 2**60) has no canonical JSON form, so no hash to pin: the whole
    import stopped with "value has no canonical JSON form" naming no tool. The tool is left
    out with its reason; a server with no other tool names it in its one line."""
    script = tmp_path / "no_json_form.py"  # not numbers.py: the stdlib module of that name
    script.write_text(NO_JSON_FORM)
    both = shlex.join([sys.executable, str(script), number, "both"])
    result = cli("registry", "import-mcp", "--stdio", both, "--name", "n", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["tools"] == ["plain"]
    ((left,),) = [[(t["tool"], t["reason"]) for t in out["left_out"]]]
    assert left[0] == "huge" and "properties.x.maximum" in left[1]  # inf arrives as null
    alone = shlex.join([sys.executable, str(script), number, "alone"])
    refused = cli("registry", "import-mcp", "--stdio", alone, "--name", "n")
    assert refused.exit_code == 2
    assert "announces no tool toolloop can call: 'huge': its inputSchema " in refused.stderr


#: a server written by hand (the SDK would not send it): its tools/list answer is JSON nested
#: deeper than the SDK's parser reads, or holds a lone surrogate escape
UNREADABLE_LIST = r"""
import json, sys
mode = sys.argv[1]
for line in sys.stdin:
    msg = json.loads(line)
    if "id" not in msg:
        continue
    if msg["method"] == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "raw", "version": "1"}}
        out = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result})
    elif msg["method"] != "tools/list":
        error = {"code": -32601, "message": "method not found"}
        out = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": error})
    else:
        schema = "[" * 300 + "]" * 300 if mode == "deep" else '"\\ud800"'
        out = ('{"jsonrpc": "2.0", "id": %s, "result": {"tools": [{"name": "t", '
               '"inputSchema": {"type": "object", "x": %s}}]}}' % (json.dumps(msg["id"]), schema))
    sys.stdout.write(out + "\n")
    sys.stdout.flush()
"""


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        ("deep", "Invalid JSON: recursion limit exceeded"),
        ("surrogate", "Invalid JSON: unexpected end of hex escape"),
    ],
)
def test_a_tool_list_answer_the_client_cannot_read_is_named_as_the_cause(
    cli: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, why: str
) -> None:
    """The SDK drops a message it cannot parse, so the listing waits for its timeout; the one
    line then says what the server sent instead of only that the listing was cancelled."""
    from toolloop_cli.tools import mcp_client

    monkeypatch.setattr(mcp_client, "CONNECT_TIMEOUT_S", 5.0)
    script = tmp_path / "raw.py"
    script.write_text(UNREADABLE_LIST)
    command = shlex.join([sys.executable, str(script), mode])
    result = cli("registry", "import-mcp", "--stdio", command, "--name", "raw")
    assert result.exit_code == 2, result.output
    line = "MCP server 'raw': tools/list cancelled after 5 s; meanwhile it sent a message"
    assert line in result.stderr
    assert why in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
