"""Request shapes other clients record: spellings, cache markers, history, continuations.

Each recording is what a real client sends (pydantic-ai, mirascope, openinference, the
providers' SDKs): Gemini's snake_case fields, a prompt-cache marker that moves, an image
beside text in a result, a first request that already holds earlier calls and results, a new
user turn after a final answer, an agent called as a tool, an empty user text, the OpenAI
``conversation`` parameter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from recordings import (
    ANTHROPIC,
    OPENAI,
    an_message,
    an_result,
    an_text,
    an_use,
    calls,
    exchange,
    generate_uri,
    gg_call,
    gg_response,
    oa_call,
    oa_output,
    oa_response,
    oa_text,
    replay,
    write,
)
from support.cli import Invoke, json_out

FILE = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def test_gemini_snake_case_request_fields_are_read(cli: Invoke, tmp_path: Path) -> None:
    """Vertex and older pydantic-ai: ``tools`` as one object with ``function_declarations``,
    ``parameters_json_schema``, ``function_call``/``function_response``, ``inline_data``,
    ``system_instruction`` and ``generation_config``. The declared schema is enforced."""
    tools = {
        "function_declarations": [
            {"name": "get_file", "description": "Read a file", "parameters_json_schema": FILE}
        ]
    }
    user = {
        "role": "user",
        "parts": [
            {"text": "Read notes.txt."},
            {"inline_data": {"mime_type": "image/png", "data": "iVBORw0KGgo="}},
        ],
    }
    good = gg_call("get_file", {"path": "notes.txt"})
    good["thoughtSignature"] = "CqwL+/=="
    bad = gg_call("get_file", {"name": "notes.txt"})  # violates the declared schema
    echo1 = {
        "role": "model",
        "parts": [
            {
                "function_call": {"name": "get_file", "args": {"path": "notes.txt"}},
                "thought_signature": "CqwL-_",
            }
        ],
    }
    reply1 = {
        "role": "user",
        "parts": [{"function_response": {"name": "get_file", "response": {"text": "hi"}}}],
    }
    echo2 = {
        "role": "model",
        "parts": [{"function_call": {"name": "get_file", "args": {"name": "notes.txt"}}}],
    }

    def body(contents: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "contents": contents,
            "tools": tools,
            "system_instruction": {"parts": [{"text": "Be brief."}]},
            "generation_config": {"max_output_tokens": 256},
        }

    invalid = {
        "ok": False,
        "error": {
            "code": "invalid_arguments",
            "message": "arguments do not match the schema: $: 'path' is a required property",
        },
    }
    reply2 = {
        "role": "user",
        "parts": [{"function_response": {"name": "get_file", "response": invalid}}],
    }
    path = write(
        tmp_path,
        [
            exchange(generate_uri(), body([user]), gg_response("r1", [good])),
            exchange(generate_uri(), body([user, echo1, reply1]), gg_response("r2", [bad])),
            exchange(
                generate_uri(),
                body([user, echo1, reply1, echo2, reply2]),
                gg_response("r3", [{"text": "It says hi."}]),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert [(c["name"], c["state"]) for c in out["calls"]] == [
        ("get_file", "SUCCEEDED"),
        ("get_file", "INVALID"),
    ]
    assert calls(out)[0][2] == {"text": "hi"}


def test_gemini_contents_and_parts_given_as_one_object_are_read(
    cli: Invoke, tmp_path: Path
) -> None:
    """The API answers ``"contents": {"role": "user", "parts": {"text": …}}`` as it answers
    lists (sublayer's recordings): the task is that text, not "no conversation to start
    from"; so is a one-object ``systemInstruction.parts``."""
    body = {
        "contents": {"role": "user", "parts": {"text": "What is the meaning of life?"}},
        "systemInstruction": {"parts": {"text": "Be brief."}},
    }
    path = write(tmp_path, [exchange(generate_uri(), body, gg_response("r1", [{"text": "42"}]))])
    code, out = replay(cli, path)
    assert (code, out["state"], out["final_text"]) == (0, "COMPLETED", "42")
    assert out["task"] == "What is the meaning of life?"


@pytest.mark.parametrize(
    ("uri", "body", "said"),
    [
        (
            OPENAI,
            {"model": "gpt-4.1", "prompt": {"id": "pmpt_abc", "version": "4"}},
            "(it names a stored prompt, pmpt_abc, whose text only the provider holds)",
        ),
        (
            ANTHROPIC,
            {"model": "claude-sonnet-4-0", "max_tokens": 8, "messages": ["Invalid content"]},
            "('messages' holds no message objects)",
        ),
    ],
    ids=["stored-prompt", "not-messages"],
)
def test_a_first_request_without_a_conversation_says_what_it_holds_instead(
    cli: Invoke, tmp_path: Path, uri: str, body: dict[str, Any], said: str
) -> None:
    answer = (
        oa_response("r1", [oa_text("hi")])
        if uri == OPENAI
        else an_message("m1", [an_text("hi")], "end_turn")
    )
    path = write(tmp_path, [exchange(uri, body, answer)])
    result = cli("replay", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().endswith(f"carries no conversation to start from {said}")


TOOLS = [
    {
        "name": "unlock",
        "description": "Try a passphrase",
        "input_schema": {"type": "object", "properties": {"passphrase": {"type": "string"}}},
        "cache_control": {"type": "ephemeral"},
    }
]


def messages(items: list[dict[str, Any]], answer: dict[str, Any], **extra: Any) -> dict[str, Any]:
    body = {"model": "claude-sonnet-4-0", "max_tokens": 1024, "messages": items, "tools": TOOLS}
    return exchange(ANTHROPIC, {**body, **extra}, answer)


def test_a_cache_marker_moved_to_the_newest_result_keeps_one_conversation(
    cli: Invoke, tmp_path: Path
) -> None:
    """mirascope moves ``cache_control`` to the newest tool result, leaving ``null`` behind."""
    user = {"role": "user", "content": [{"type": "text", "text": "Unlock the cake."}]}
    use1 = [an_use("toolu_1", "unlock", {"passphrase": "pass"})]
    use2 = [an_use("toolu_2", "unlock", {"passphrase": "cake"})]

    def result(tool_use_id: str, text: str, marked: bool) -> dict[str, Any]:
        cache = {"type": "ephemeral"} if marked else None
        return {**an_result(tool_use_id, text, is_error=False), "cache_control": cache}

    turn1 = [user, {"role": "assistant", "content": use1}]
    second = [
        *turn1,
        {"role": "user", "content": [result("toolu_1", "Incorrect passphrase", True)]},
    ]
    third = [
        *turn1,
        {"role": "user", "content": [result("toolu_1", "Incorrect passphrase", False)]},
        {"role": "assistant", "content": use2},
        {"role": "user", "content": [result("toolu_2", "The cake is a lie.", True)]},
    ]
    path = write(
        tmp_path,
        [
            messages([user], an_message("msg_1", use1, "tool_use")),
            messages(second, an_message("msg_2", use2, "tool_use")),
            messages(third, an_message("msg_3", [an_text("Unlocked.")], "end_turn")),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert len(out["operations"]) == 1
    assert calls(out) == [
        ("unlock", "SUCCEEDED", "Incorrect passphrase"),
        ("unlock", "SUCCEEDED", "The cake is a lie."),
    ]


def test_an_image_beside_text_in_a_result_is_part_of_the_compared_result(
    cli: Invoke, tmp_path: Path
) -> None:
    user = {"role": "user", "content": "Show me the image."}
    use = [an_use("toolu_1", "unlock", {"passphrase": "x"})]
    content = [
        {"type": "text", "text": "Here is the image:"},
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/jpeg", "data": "/9j/4AAQ"},
        },
        {"type": "text", "text": '{"marker":"test_42"}'},
    ]
    second: list[dict[str, Any]] = [
        user,
        {"role": "assistant", "content": use},
        {"role": "user", "content": [an_result("toolu_1", content)]},
    ]
    path = write(
        tmp_path,
        [
            messages([user], an_message("msg_1", use, "tool_use")),
            messages(second, an_message("msg_2", [an_text("A JPEG.")], "end_turn")),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [("unlock", "SUCCEEDED", content)]


WEATHER_TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather in a city",
        "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}},
    }
]
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "What is the weather in San Francisco, CA?"},
    {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "<thinking>I should look it up.</thinking>"},
            an_use("toolu_01DY", "get_weather", {"location": "San Francisco, CA"}),
        ],
    },
    {
        "role": "user",
        "content": [an_result("toolu_01DY", [{"type": "text", "text": "The weather is 73f"}])],
    },
]


def test_a_first_request_that_already_holds_calls_and_results_starts_from_them(
    cli: Invoke, tmp_path: Path
) -> None:
    """dd-trace's shape: the conversation arrives with an earlier call and its result. Those
    are history: sent again as recorded, never executed."""
    body = {"model": "claude-3", "max_tokens": 500, "messages": HISTORY, "tools": WEATHER_TOOLS}
    answer = an_message("msg_1", [an_text("It is 73 °F in San Francisco.")], "end_turn")
    code, out = replay(
        cli, write(tmp_path, [exchange(ANTHROPIC, body, answer)]), "--strict-requests"
    )
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert out["calls"] == []  # the history's call is not this run's
    assert out["task"] == "What is the weather in San Francisco, CA?"


def test_a_new_user_turn_after_a_final_answer_is_a_new_operation(
    cli: Invoke, tmp_path: Path
) -> None:
    body = {"model": "claude-3", "max_tokens": 500, "tools": WEATHER_TOOLS}
    first = [HISTORY[0]]
    use = HISTORY[1]["content"]
    final = [an_text("It is 73 °F.")]
    followup = [
        *HISTORY,
        {"role": "assistant", "content": final},
        {"role": "user", "content": [{"type": "text", "text": "And in Oakland?"}]},
    ]
    oakland = [an_use("toolu_02", "get_weather", {"location": "Oakland, CA"})]
    last = [
        *followup,
        {"role": "assistant", "content": oakland},
        {"role": "user", "content": [an_result("toolu_02", "The weather is 70f")]},
    ]
    interactions = [
        exchange(ANTHROPIC, {**body, "messages": first}, an_message("m1", use, "tool_use")),
        exchange(ANTHROPIC, {**body, "messages": HISTORY}, an_message("m2", final, "end_turn")),
        exchange(ANTHROPIC, {**body, "messages": followup}, an_message("m3", oakland, "tool_use")),
        exchange(
            ANTHROPIC, {**body, "messages": last}, an_message("m4", [an_text("70 °F.")], "end_turn")
        ),
    ]
    code, out = replay(cli, write(tmp_path, interactions))
    assert (code, out["divergences"]) == (0, [])
    assert [(op["interactions"], op["state"]) for op in out["operations"]] == [
        ([0, 1], "COMPLETED"),
        ([2, 3], "COMPLETED"),
    ]
    assert calls(out) == [("get_weather", "SUCCEEDED", "The weather is 73f")]
    second = json_out(cli("show", out["operations"][1]["operation_id"], "--json"))
    assert second["task"] == "And in Oakland?"
    assert calls(second) == [("get_weather", "SUCCEEDED", "The weather is 70f")]


def test_an_agent_called_as_a_tool_is_its_own_conversation_between_call_and_result(
    cli: Invoke, tmp_path: Path
) -> None:
    """google-adk: the outer model calls Sub_Agent; the sub-agent's own request (the same
    user text, no tools) comes next; then the outer conversation goes on with the result."""
    tools = [
        {
            "functionDeclarations": [
                {
                    "name": "Sub_Agent",
                    "description": "Ask the weather agent",
                    "parameters": {"type": "OBJECT", "properties": {"request": {"type": "STRING"}}},
                }
            ]
        }
    ]
    user = {"role": "user", "parts": [{"text": "What is the weather in Tokyo?"}]}
    call = gg_call("Sub_Agent", {"request": "weather in Tokyo"}, call_id="ewfqe3jj")
    reply = {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "id": "ewfqe3jj",
                    "name": "Sub_Agent",
                    "response": {"result": "Sunny, 22 °C."},
                }
            }
        ],
    }
    path = write(
        tmp_path,
        [
            exchange(
                generate_uri(), {"contents": [user], "tools": tools}, gg_response("r1", [call])
            ),
            exchange(
                generate_uri(), {"contents": [user]}, gg_response("r2", [{"text": "Sunny, 22 °C."}])
            ),
            exchange(
                generate_uri(),
                {"contents": [user, {"role": "model", "parts": [call]}, reply], "tools": tools},
                gg_response("r3", [{"text": "It is sunny in Tokyo."}]),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["divergences"]) == (0, [])
    assert [op["interactions"] for op in out["operations"]] == [[0, 2], [1]]
    assert calls(out) == [("Sub_Agent", "SUCCEEDED", {"result": "Sunny, 22 °C."})]


def test_an_empty_user_text_with_the_prompt_in_the_instructions_replays(
    cli: Invoke, tmp_path: Path
) -> None:
    tools = [{"functionDeclarations": [{"name": "generate_topic", "description": "A topic"}]}]
    user = {"role": "user", "parts": [{"text": ""}]}
    body = {
        "contents": [user],
        "systemInstruction": {"role": "user", "parts": [{"text": "Tell a joke about a topic."}]},
        "tools": tools,
        "toolConfig": {
            "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["generate_topic"]}
        },
    }
    call = gg_call("generate_topic", {})
    reply = {
        "role": "user",
        "parts": [{"functionResponse": {"name": "generate_topic", "response": {"topic": "owls"}}}],
    }
    second = {**body, "contents": [user, {"role": "model", "parts": [call]}, reply]}
    path = write(
        tmp_path,
        [
            exchange(generate_uri(), body, gg_response("r1", [call])),
            exchange(generate_uri(), second, gg_response("r2", [{"text": "Owls give a hoot."}])),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"], out["task"]) == (0, "COMPLETED", [], "")
    assert calls(out) == [("generate_topic", "SUCCEEDED", {"topic": "owls"})]


def test_the_openai_conversation_parameter_continues_the_conversation(
    cli: Invoke, tmp_path: Path
) -> None:
    tools = [
        {
            "type": "function",
            "name": "get_code",
            "description": None,
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        }
    ]
    created = {"id": "conv_0100", "object": "conversation", "created_at": 1767225600}
    call = oa_call("call_0100", "get_code", {})
    first = {
        "model": "gpt-5",
        "conversation": "conv_0100",
        "input": [{"role": "user", "content": "Get the code."}],
        "tools": tools,
    }
    second = {
        "model": "gpt-5",
        "conversation": "conv_0100",
        "input": [oa_output("call_0100", "TOOL-5222")],
        "tools": tools,
    }
    path = write(
        tmp_path,
        [
            exchange("https://api.openai.com/v1/conversations", {}, created),
            exchange(OPENAI, first, oa_response("resp_1", [call])),
            exchange(OPENAI, second, oa_response("resp_2", [oa_text("The code is TOOL-5222.")])),
            exchange(
                "https://api.openai.com/v1/conversations/conv_0100",
                None,
                {"deleted": True},
                method="DELETE",
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert [s["index"] for s in out["skipped"]] == [0, 3]
    assert calls(out) == [("get_code", "SUCCEEDED", "TOOL-5222")]


def test_an_unexpected_tool_call_is_answered_and_the_run_goes_on(
    cli: Invoke, tmp_path: Path
) -> None:
    """Gemini's ``UNEXPECTED_TOOL_CALL``: the model called an undeclared function. It is a
    call like any other that cannot run: INVALID unknown_tool, the model is told, and the
    loop goes on as the recording's client let it. (That client's own refusal text differs
    from toolloop's, so the result is a divergence, and only that.)"""
    tools = [
        {
            "functionDeclarations": [
                {"name": "get_file", "description": "Read", "parametersJsonSchema": FILE}
            ]
        }
    ]
    user = {"role": "user", "parts": [{"text": "Use get_file on the first file."}]}
    call = gg_call("list_files", {})
    refused = gg_response(
        "r1",
        [call],
        finish="UNEXPECTED_TOOL_CALL",
        finishMessage="Unexpected tool call: Model tried to call an undeclared function",
    )
    answer = {"error": "Unknown tool name: 'list_files'. Available tools: 'get_file'"}
    reply = {
        "role": "user",
        "parts": [{"functionResponse": {"name": "list_files", "response": answer}}],
    }
    second = [user, {"role": "model", "parts": [call]}, reply]
    path = write(
        tmp_path,
        [
            exchange(generate_uri(), {"contents": [user], "tools": tools}, refused),
            exchange(
                generate_uri(),
                {"contents": second, "tools": tools},
                gg_response("r2", [{"text": "Sorry."}]),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (out["state"], [(c["name"], c["state"]) for c in out["calls"]]) == (
        "COMPLETED",
        [("list_files", "INVALID")],
    )
    assert out["calls"][0]["result"]["error"]["code"] == "unknown_tool"
    assert {(d["kind"], d["turn"]) for d in out["divergences"]} == {("result", 1)}
    assert code == 17


def test_a_recording_that_ends_on_a_call_nobody_answered_stops_there(
    cli: Invoke, tmp_path: Path
) -> None:
    """pydantic-ai's ``final_result`` output tool: the client reads the call's arguments and
    stops. The replay stops there too: nothing runs, no request is made up."""
    tools = [{"name": "final_result", "description": "The answer", "input_schema": FILE}]
    user = {"role": "user", "content": "Which file?"}
    use = [an_use("toolu_9", "final_result", {"path": "a.txt"})]
    body = {"model": "claude-3", "max_tokens": 500, "messages": [user], "tools": tools}
    code, out = replay(
        cli, write(tmp_path, [exchange(ANTHROPIC, body, an_message("m1", use, "tool_use"))])
    )
    assert (code, out["state"], out["divergences"]) == (12, "INCOMPLETE", [])
    assert [(c["name"], c["state"], c["arguments"]) for c in out["calls"]] == [
        ("final_result", "NOT_EXECUTED", {"path": "a.txt"})
    ]
    assert out["reason"] == (
        "the recording ends here: nobody answered the last answer's call(s): "
        "toolu_9 (final_result); nothing was run"
    )
    assert len(out["turns"]) == 1
    assert json.dumps(out["calls"][0]["result"]).count("not_executed") == 1


def test_a_history_toolloop_would_not_send_is_one_clear_line_and_nothing_written(
    cli: Invoke, tmp_path: Path, store_path: Path
) -> None:
    """A first request whose history has a tool_use not answered first thing in the next
    message (text before the tool_result): toolloop refuses to send such a conversation, so
    the cassette cannot be replayed; nothing is written."""
    history = [
        HISTORY[0],
        {"role": "assistant", "content": [an_use("toolu_a", "get_weather", {"location": "Oslo"})]},
        {"role": "user", "content": [an_text("Here:"), an_result("toolu_a", "cold")]},
    ]
    body = {"model": "claude-3", "max_tokens": 500, "messages": history, "tools": WEATHER_TOOLS}
    path = write(
        tmp_path, [exchange(ANTHROPIC, body, an_message("m", [an_text("Cold.")], "end_turn"))]
    )
    result = cli("replay", str(path))
    assert result.exit_code == 2
    (line,) = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert "conversation 0:" in line and "history toolloop would not send" in line
    assert "messages[2] must open with one tool_result for each tool_use of messages[1]" in line
    assert not store_path.exists()  # checked before the store is opened: none is created


def test_a_result_the_recording_s_client_dropped_is_an_error_for_the_model_not_a_stop(
    cli: Invoke, tmp_path: Path
) -> None:
    """The client answered only one of two calls (it rewrote the history): the other is
    answered with an error saying the recording holds no result, and the run goes on."""
    user = {"role": "user", "content": "Weather in Oslo and Rome?"}
    uses = [
        an_use("toolu_o", "get_weather", {"location": "Oslo"}),
        an_use("toolu_r", "get_weather", {"location": "Rome"}),
    ]
    second = [
        user,
        {"role": "assistant", "content": uses},
        {"role": "user", "content": [an_result("toolu_o", "cold")]},
    ]
    body = {"model": "claude-3", "max_tokens": 500, "tools": WEATHER_TOOLS}
    path = write(
        tmp_path,
        [
            exchange(ANTHROPIC, {**body, "messages": [user]}, an_message("m1", uses, "tool_use")),
            exchange(
                ANTHROPIC,
                {**body, "messages": second},
                an_message("m2", [an_text("Cold.")], "end_turn"),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert out["state"] == "COMPLETED"
    assert [(c["call_id"], c["state"]) for c in out["calls"]] == [
        ("toolu_o", "SUCCEEDED"),
        ("toolu_r", "FAILED"),
    ]
    assert out["calls"][1]["result"]["error"] == {
        "code": "tool_error",
        "message": "the recording has no result for this call",
    }
    assert [(d["kind"], d["call_id"]) for d in out["divergences"]] == [("extra_result", "toolu_r")]
    assert code == 17


def test_a_tool_call_the_client_read_itself_and_wrote_back_as_text_ends_its_conversation(
    cli: Invoke, tmp_path: Path
) -> None:
    """A client that asks for structured output through a tool reads the call itself, writes
    it into the history as text and asks again: that call was never answered, so the first
    conversation ends at it, and the next request starts one of its own from that history
    (neither diverges: the replay sends no result the recording does not have)."""
    user = {"role": "user", "content": "Choose a lucky number between 1 and 10"}
    tool = {"name": "formatted_output", "input_schema": {"type": "object"}}
    body = {"model": "claude-3", "max_tokens": 500, "tools": [tool]}
    first = an_message("m1", [an_use("toolu_1", "formatted_output", {"output": 7})], "tool_use")
    again = [
        user,
        {"role": "assistant", "content": '{"output": 7}'},
        {"role": "user", "content": "Ok, now choose a different lucky number"},
    ]
    second = an_message("m2", [an_use("toolu_2", "formatted_output", {"output": 3})], "tool_use")
    path = write(
        tmp_path,
        [
            exchange(ANTHROPIC, {**body, "messages": [user]}, first),
            exchange(ANTHROPIC, {**body, "messages": again}, second),
        ],
    )
    code, out = replay(cli, path)
    assert [(op["interactions"], op["state"]) for op in out["operations"]] == [
        ([0], "INCOMPLETE"),
        ([1], "INCOMPLETE"),
    ]
    assert out["divergences"] == []
    assert [(c["call_id"], c["state"]) for c in out["calls"]] == [("toolu_1", "NOT_EXECUTED")]
    assert "nobody answered the last answer's call(s): toolu_1" in out["reason"]
    assert code == 12


def test_calls_answered_by_a_request_that_rewrote_the_history_say_which_request_did(
    cli: Invoke, tmp_path: Path
) -> None:
    """llm.rb sends the first user turn's blocks in another order and echoes the answer
    without its text, then answers the call by its id: that request cannot go on from the
    first answer, so it is a conversation of its own, and the first one's reason says that
    interaction 1 answered its call (it said "nobody answered")."""
    tool = {"name": "system", "input_schema": {"type": "object"}}
    body = {"model": "claude-3", "max_tokens": 500, "tools": [tool]}
    question = {"type": "text", "text": "What is the date?"}
    persona = {"type": "text", "text": "You are a bot that can run UNIX commands"}
    use = an_use("toolu_01Sq", "system", {"command": "date"})
    first = an_message("m1", [an_text("Let me check."), use], "tool_use")
    rewritten = [
        {"role": "user", "content": [persona, question]},
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [an_result("toolu_01Sq", '{"success": "2025-08-24"}')]},
    ]
    asked = [{"role": "user", "content": [question, persona]}]
    final = an_message("m2", [an_text("It is 2025-08-24.")], "end_turn")
    path = write(
        tmp_path,
        [
            exchange(ANTHROPIC, {**body, "messages": asked}, first),
            exchange(ANTHROPIC, {**body, "messages": rewritten}, final),
        ],
    )
    code, out = replay(cli, path)
    assert [(op["interactions"], op["state"]) for op in out["operations"]] == [
        ([0], "INCOMPLETE"),
        ([1], "COMPLETED"),
    ]
    assert out["reason"] == (
        "the recording ends here: interaction 1 answers the last answer's call(s) "
        "toolu_01Sq (system), but rewrote the conversation before them, so it is replayed as "
        "a conversation of its own; nothing was run"
    )
    assert code == 12
