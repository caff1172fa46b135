"""OpenAI Responses items that ask the client for an action no registry tool takes.

``computer_call``, ``shell_call``, ``local_shell_call``, ``apply_patch_call`` and
``mcp_approval_request`` wait for the client (an action's output, an approval). toolloop
runs only the registry's tools, so such an answer is a failure that is not retried, named by
its item, whether it also holds a message (a model commenting before it acts) or a function
call (which does not run either: the next request would lack the item's output).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.providers import parse

from toolloop_cli.engine.types import HttpResponse, TurnOutcome
from toolloop_cli.errors import MalformedProviderPayload

MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "I'll check the files first.", "annotations": []}],
}
FUNCTION_CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "lookup_order",
    "arguments": '{"order_id": "ord_1"}',
    "status": "completed",
}
ITEMS: dict[str, dict[str, Any]] = {
    "shell_call": {
        "type": "shell_call",
        "id": "sh_1",
        "call_id": "call_sh",
        "action": {"commands": ["ls"], "timeout_ms": 1000, "max_output_length": 4096},
        "status": "completed",
    },
    "local_shell_call": {
        "type": "local_shell_call",
        "id": "ls_1",
        "call_id": "call_ls",
        "action": {"type": "exec", "command": ["ls"], "env": {}},
        "status": "completed",
    },
    "computer_call": {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "call_cu",
        "action": {"type": "screenshot"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    "apply_patch_call": {
        "type": "apply_patch_call",
        "id": "ap_1",
        "call_id": "call_ap",
        "operation": {"type": "update_file", "path": "a.py", "diff": "@@\n-a\n+b\n"},
        "status": "completed",
    },
    "mcp_approval_request": {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "server_label": "deepwiki",
        "name": "ask_question",
        "arguments": '{"question": "?"}',
    },
}


def answer(*output: dict[str, Any]) -> HttpResponse:
    body = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "gpt-5",
        "output": list(output),
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    }
    return HttpResponse(200, {"content-type": "application/json"}, body=json.dumps(body).encode())


@pytest.mark.parametrize("kind", sorted(ITEMS))
@pytest.mark.parametrize("beside", ["nothing", "a message", "a function call"])
def test_an_item_asking_the_client_to_act_fails_the_turn_without_running_anything(
    kind: str, beside: str
) -> None:
    besides: dict[str, list[dict[str, Any]]] = {
        "nothing": [],
        "a message": [MESSAGE],
        "a function call": [FUNCTION_CALL],
    }
    others = besides[beside]
    turn = parse("openai", answer(*others, ITEMS[kind]))
    assert turn.outcome is TurnOutcome.API_FAILURE
    assert turn.error is not None and not turn.error.retryable
    assert turn.error.code == "unsupported_item"
    assert f"asks the client for {kind}" in (turn.detail or "")
    assert not turn.calls


def test_hosted_tools_the_server_ran_are_carried_forward_beside_a_final_message() -> None:
    web_search = {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "paris"},
    }
    turn = parse("openai", answer(web_search, MESSAGE))
    assert (turn.outcome, turn.text) == (TurnOutcome.FINAL_TEXT, "I'll check the files first.")
    assert turn.output_items[0] == web_search


@pytest.mark.parametrize(
    "item",
    [
        {
            "type": "image_generation_call",
            "id": "ig_1",
            "status": "completed",
            "result": "iVBORw0KGgo=",
        },
        {
            "type": "mcp_call",
            "id": "mcp_1",
            "server_label": "deepwiki",
            "name": "ask_question",
            "arguments": "{}",
            "output": "Paris",
        },
    ],
)
def test_an_answer_made_only_by_the_servers_tools_is_final_with_no_text(
    item: dict[str, Any],
) -> None:
    """Was a malformed answer (FAILED): "completed response has neither output_text nor call
    items", though the server had done what was asked (made the image) and asked nothing of
    the client."""
    turn = parse("openai", answer(item))
    assert (turn.outcome, turn.text, turn.calls) == (TurnOutcome.FINAL_TEXT, "", ())
    assert f"only what the server's tools made ({item['type']})" in (turn.detail or "")
    assert turn.output_items[0] == item


def test_an_answer_of_reasoning_alone_is_still_malformed() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    with pytest.raises(MalformedProviderPayload, match="neither output_text nor call items"):
        parse("openai", answer(reasoning))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("incomplete_details", {"reason": "max_output_tokens"}),
        ("error", {"code": "server_error", "message": "The model failed"}),
    ],
)
def test_a_completed_answer_that_also_says_it_is_cut_or_failed_runs_nothing(
    key: str, value: dict[str, Any]
) -> None:
    """The function call ran: only ``status`` was read."""
    body = json.loads(answer(FUNCTION_CALL).body)
    body[key] = value
    response = HttpResponse(200, {"content-type": "application/json"}, json.dumps(body).encode())
    with pytest.raises(MalformedProviderPayload, match=f"non-null '{key}' contradicts itself"):
        parse("openai", response)
