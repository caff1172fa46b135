"""Tools declared after the first request: tool search, deferred loading, agent handoffs.

A replay declares at each request what its recorded request declared, exactly as recorded
(``defer_loading``, server tools and all), and looks a call up among the tools of the request
its answer came to: a tool loaded later is found once it is declared, and a tool a handoff
took away is no longer found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recordings import (
    ANTHROPIC,
    OPENAI,
    an_message,
    an_result,
    an_text,
    an_use,
    calls,
    exchange,
    oa_call,
    oa_output,
    oa_response,
    oa_text,
    replay,
    write,
)
from support.cli import Invoke

OBJECT = {"type": "object", "properties": {"query": {"type": "string"}}}
PAIR = {
    "type": "object",
    "properties": {"base": {"type": "string"}, "quote": {"type": "string"}},
    "required": ["base", "quote"],
}


def tool(name: str, schema: dict[str, Any] = OBJECT, **extra: Any) -> dict[str, Any]:
    return {"name": name, "description": f"The {name} tool", "input_schema": schema, **extra}


def no_tool_divergence(cli: Invoke, path: Path) -> None:
    """With ``--strict-requests``, no request differs in its tools (results are envelopes
    here where the recording has bare values, so those differ, and only those)."""
    _, out = replay(cli, path, "--strict-requests")
    assert [d for d in out["divergences"] if "tools" in d["path"]] == []


def test_tools_that_grow_after_a_client_side_search_are_declared_and_found(
    cli: Invoke, tmp_path: Path
) -> None:
    user = {"role": "user", "content": "Convert 10 USD to EUR."}
    search = [an_use("toolu_s", "search_tools", {"query": "exchange rate"})]
    rate = [an_use("toolu_r", "get_exchange_rate", {"base": "USD", "quote": "EUR"})]
    before = [tool("get_weather"), tool("search_tools")]
    after = [
        tool("get_weather"),
        {**tool("get_exchange_rate", PAIR), "description": ""},
        tool("search_tools"),
    ]
    one = [
        user,
        {"role": "assistant", "content": search},
        {"role": "user", "content": [an_result("toolu_s", "found get_exchange_rate")]},
    ]
    two = [
        *one,
        {"role": "assistant", "content": rate},
        {"role": "user", "content": [an_result("toolu_r", "0.92")]},
    ]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 1024}
    path = write(
        tmp_path,
        [
            exchange(
                ANTHROPIC,
                {**body, "messages": [user], "tools": before},
                an_message("m1", search, "tool_use"),
            ),
            exchange(
                ANTHROPIC,
                {**body, "messages": one, "tools": after},
                an_message("m2", rate, "tool_use"),
            ),
            exchange(
                ANTHROPIC,
                {**body, "messages": two, "tools": after},
                an_message("m3", [an_text("9.20 EUR.")], "end_turn"),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [
        ("search_tools", "SUCCEEDED", "found get_exchange_rate"),
        ("get_exchange_rate", "SUCCEEDED", 0.92),
    ]
    no_tool_divergence(cli, path)


def test_tools_an_additional_tools_input_item_declares_are_found(
    cli: Invoke, tmp_path: Path
) -> None:
    """OpenAI: a tool loaded mid-conversation in an ``additional_tools`` developer item, while
    ``tools`` (server tool search, a loader, a deferred function) stays the same."""
    tools = [
        {"type": "tool_search"},
        {
            "type": "function",
            "name": "load_capability",
            "description": "Load tools",
            "parameters": OBJECT,
            "strict": False,
        },
        {
            "type": "function",
            "name": "get_weather",
            "defer_loading": True,
            "description": "",
            "parameters": OBJECT,
            "strict": True,
        },
    ]
    policy = {
        "type": "function",
        "name": "lookup_refund_policy",
        "description": "The refund policy",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        "strict": True,
    }
    user = {"role": "user", "content": "What is the refund policy?"}
    load = oa_call("call_l", "load_capability", {"query": "refunds"})
    lookup = oa_call("call_p", "lookup_refund_policy", {})
    one = [
        user,
        load,
        oa_output("call_l", "loaded"),
        {"type": "additional_tools", "role": "developer", "tools": [policy]},
    ]
    two = [*one, lookup, oa_output("call_p", "30 days")]
    body = {"model": "gpt-5.4", "tools": tools}
    path = write(
        tmp_path,
        [
            exchange(OPENAI, {**body, "input": [user]}, oa_response("resp_1", [load])),
            exchange(OPENAI, {**body, "input": one}, oa_response("resp_2", [lookup])),
            exchange(OPENAI, {**body, "input": two}, oa_response("resp_3", [oa_text("30 days.")])),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [
        ("load_capability", "SUCCEEDED", "loaded"),
        ("lookup_refund_policy", "SUCCEEDED", "30 days"),
    ]


def handoff(tmp_path: Path, late_call: str) -> Path:
    """openai-agents: a handoff replaces the tool set with the next agent's."""
    first_tools = [
        {
            "type": "function",
            "name": "transfer_to_composer",
            "description": "Hand off",
            "parameters": {"type": "object", "properties": {}},
            "strict": True,
        }
    ]
    then_tools = [
        {
            "type": "function",
            "name": "compose_music",
            "description": "Compose",
            "parameters": OBJECT,
            "strict": True,
        }
    ]
    user = {"role": "user", "content": "Write a symphony."}
    transfer = oa_call("call_t", "transfer_to_composer", {})
    compose = oa_call("call_c", late_call, {"query": "symphony"})
    one = [user, transfer, oa_output("call_t", '{"assistant": "composer"}')]
    two = [*one, compose, oa_output("call_c", "Symphony No. 1")]
    return write(
        tmp_path,
        [
            exchange(
                OPENAI,
                {"model": "gpt-4o", "input": [user], "tools": first_tools},
                oa_response("resp_1", [transfer]),
            ),
            exchange(
                OPENAI,
                {"model": "gpt-4o", "input": one, "tools": then_tools},
                oa_response("resp_2", [compose]),
            ),
            exchange(
                OPENAI,
                {"model": "gpt-4o", "input": two, "tools": then_tools},
                oa_response("resp_3", [oa_text("Done.")]),
            ),
        ],
    )


def test_a_handoff_that_replaces_the_tools_replays_with_each_turn_s_tools(
    cli: Invoke, tmp_path: Path
) -> None:
    code, out = replay(cli, handoff(tmp_path, "compose_music"))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [
        ("transfer_to_composer", "SUCCEEDED", {"assistant": "composer"}),
        ("compose_music", "SUCCEEDED", "Symphony No. 1"),
    ]


def test_a_tool_the_handoff_took_away_is_unknown_after_it(cli: Invoke, tmp_path: Path) -> None:
    _, out = replay(cli, handoff(tmp_path, "transfer_to_composer"))
    assert [(c["name"], c["state"]) for c in out["calls"]] == [
        ("transfer_to_composer", "SUCCEEDED"),
        ("transfer_to_composer", "INVALID"),
    ]
    assert out["calls"][1]["result"]["error"]["code"] == "unknown_tool"


def test_deferred_tools_and_tool_references_round_trip_as_recorded(
    cli: Invoke, tmp_path: Path
) -> None:
    """Anthropic: ``defer_loading`` tools found by a server-side search (``tool_reference``
    blocks in its result) and by a client-side one (a ``tool_result`` of references)."""
    tools = [
        {"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"},
        tool("find_tools"),
        tool("lookup_exchange_rate", PAIR, defer_loading=True),
    ]
    user = {"role": "user", "content": "How many euros for 10 dollars?"}
    server_search = [
        {
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "tool_search_tool_bm25",
            "input": {"query": "exchange"},
        },
        {
            "type": "tool_search_tool_result",
            "tool_use_id": "srvtoolu_1",
            "content": {
                "type": "tool_search_tool_search_result",
                "tool_references": [
                    {"type": "tool_reference", "tool_name": "lookup_exchange_rate"}
                ],
            },
        },
        an_use("toolu_f", "find_tools", {"query": "rates"}),
    ]
    references = [{"type": "tool_reference", "tool_name": "lookup_exchange_rate"}]
    rate = [an_use("toolu_r", "lookup_exchange_rate", {"base": "USD", "quote": "EUR"})]
    one = [
        user,
        {"role": "assistant", "content": server_search},
        {"role": "user", "content": [an_result("toolu_f", references)]},
    ]
    two = [
        *one,
        {"role": "assistant", "content": rate},
        {"role": "user", "content": [an_result("toolu_r", "9.2")]},
    ]
    body = {"model": "claude-opus-4-5", "max_tokens": 1024, "tools": tools}
    path = write(
        tmp_path,
        [
            exchange(
                ANTHROPIC, {**body, "messages": [user]}, an_message("m1", server_search, "tool_use")
            ),
            exchange(ANTHROPIC, {**body, "messages": one}, an_message("m2", rate, "tool_use")),
            exchange(
                ANTHROPIC,
                {**body, "messages": two},
                an_message("m3", [an_text("9.20 EUR.")], "end_turn"),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [
        ("find_tools", "SUCCEEDED", references),
        ("lookup_exchange_rate", "SUCCEEDED", 9.2),
    ]
    no_tool_divergence(cli, path)
