"""Results under ids the model never gave, ids reused across turns, repeated identical calls.

A client may answer a call under an id it made up, rewrite the id, or leave it out; a
provider may give every turn's call the same id. The replay pairs each request's new results
with the calls of the answer just before it (by id when the id is one of that answer's
calls, else by position) and compares them per call, so none of this is a divergence, and
each call gets the result that was recorded for it in its own turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recordings import (
    OPENAI,
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
from support.cli import Invoke

from toolloop_cli.replay.split import split_conversations
from toolloop_cli.transcripts import load_cassette

COUNTRY = {"type": "object", "properties": {}, "additionalProperties": False}
CITY = {"type": "object", "properties": {"country": {"type": "string"}}, "required": ["country"]}
GEMINI_TOOLS = [
    {
        "functionDeclarations": [
            {"name": "get_user_country", "description": "", "parametersJsonSchema": COUNTRY},
            {"name": "get_capital", "description": "", "parametersJsonSchema": CITY},
        ]
    }
]


def generate(contents: list[dict[str, Any]], answer: dict[str, Any]) -> dict[str, Any]:
    return exchange(generate_uri(), {"contents": contents, "tools": GEMINI_TOOLS}, answer)


def test_generate_content_results_under_ids_the_client_made_up_pair_by_position(
    cli: Invoke, tmp_path: Path
) -> None:
    """pydantic-ai's shape: the model sends no ids; the client echoes the calls under
    ``pyd_ai_<hex>`` ids it invented, answers under them, and re-encodes the thought
    signature in base64url."""
    user = {"role": "user", "parts": [{"text": "What is the capital of my country?"}]}
    first = gg_call("get_user_country", {})
    first["thoughtSignature"] = "Co+Y/we=="
    answers = [
        gg_response("r1", [first]),
        gg_response(
            "r2",
            [
                gg_call("get_capital", {"country": "Mexico"}),
                gg_call("get_capital", {"country": "Peru"}),
            ],
        ),
        gg_response("r3", [{"text": "Mexico City, and Lima."}]),
    ]
    echo1 = {
        "role": "model",
        "parts": [
            {
                "functionCall": {"id": "pyd_ai_0e72", "name": "get_user_country", "args": {}},
                "thoughtSignature": "Co-Y_we",
            }
        ],
    }
    reply1 = {
        "role": "user",
        "parts": [
            {
                "functionResponse": {
                    "id": "pyd_ai_0e72",
                    "name": "get_user_country",
                    "response": {"return_value": "Mexico"},
                }
            }
        ],
    }
    echo2 = {
        "role": "model",
        "parts": [
            {"functionCall": {"id": f"pyd_ai_{n}", "name": "get_capital", "args": {"country": c}}}
            for n, c in (("a1", "Mexico"), ("b2", "Peru"))
        ],
    }
    reply2 = {
        "role": "user",
        "parts": [
            {"functionResponse": {"id": f"pyd_ai_{n}", "name": "get_capital", "response": r}}
            for n, r in (("a1", {"return_value": "Mexico City"}), ("b2", {"return_value": "Lima"}))
        ],
    }
    path = write(
        tmp_path,
        [
            generate([user], answers[0]),
            generate([user, echo1, reply1], answers[1]),
            generate([user, echo1, reply1, echo2, reply2], answers[2]),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [
        ("get_user_country", "SUCCEEDED", {"return_value": "Mexico"}),
        ("get_capital", "SUCCEEDED", {"return_value": "Mexico City"}),
        ("get_capital", "SUCCEEDED", {"return_value": "Lima"}),
    ]


def test_a_provider_id_answered_without_an_id_pairs_by_position(
    cli: Invoke, tmp_path: Path
) -> None:
    user = {"role": "user", "parts": [{"text": "Where am I?"}]}
    call = gg_call("get_user_country", {}, call_id="whZntcQw")
    model = {"role": "model", "parts": [call]}
    reply = {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_user_country", "response": {"country": "Chile"}}}
        ],
    }
    path = write(
        tmp_path,
        [
            generate([user], gg_response("r1", [call])),
            generate([user, model, reply], gg_response("r2", [{"text": "Chile."}])),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [("get_user_country", "SUCCEEDED", {"country": "Chile"})]


TOOLS = [
    {"type": "function", "name": name, "description": None, "parameters": COUNTRY, "strict": True}
    for name in ("first_tool", "second_tool")
]


def responses(inputs: list[dict[str, Any]], answer: dict[str, Any]) -> dict[str, Any]:
    return exchange(OPENAI, {"model": "gpt-5", "input": inputs, "tools": TOOLS}, answer)


def test_responses_results_under_ids_the_client_rewrote_pair_with_the_calls(
    cli: Invoke, tmp_path: Path
) -> None:
    """The client sends ``call_id: "<response id>:call_0"`` back for the model's ``call_0``."""
    user = {"role": "user", "content": "Call first_tool."}
    made = oa_call("call_0", "first_tool", {}, item_id="fc_ccdc")
    echoed = {**made, "call_id": "resp_43am:call_0"}
    del echoed["status"]
    path = write(
        tmp_path,
        [
            responses([user], oa_response("resp_43am", [made])),
            responses(
                [user, echoed, oa_output("resp_43am:call_0", "first result")],
                oa_response("resp_2", [oa_text("Done.")]),
            ),
        ],
    )
    code, out = replay(cli, path)
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [("first_tool", "SUCCEEDED", "first result")]


def reused_ids(tmp_path: Path) -> Path:
    """A provider that names every turn's call ``call_0``; the client sends it back as is."""
    user = {"role": "user", "content": "Call first_tool, then second_tool."}
    first = oa_call("call_0", "first_tool", {}, item_id="fc_1")
    second = oa_call("call_0", "second_tool", {}, item_id="fc_2")
    one = [user, first, oa_output("call_0", "first result")]
    two = [*one, second, oa_output("call_0", "second result")]
    return write(
        tmp_path,
        [
            responses([user], oa_response("resp_a", [first])),
            responses(one, oa_response("resp_b", [second])),
            responses(two, oa_response("resp_c", [oa_text("Both done.")])),
        ],
    )


def test_recorded_results_are_kept_per_turn_never_by_id_over_the_conversation(
    tmp_path: Path,
) -> None:
    from toolloop_cli.replay.deps import recorded_table

    (conversation,) = split_conversations(load_cassette(reused_ids(tmp_path))).conversations
    table = recorded_table(conversation)
    assert [{k: r.value for k, r in turn.items()} for turn in table] == [
        {"call_0": "first result"},
        {"call_0": "second result"},
        {},
    ]


def test_a_call_id_reused_in_a_later_turn_replays_with_its_own_recorded_result(
    cli: Invoke, tmp_path: Path
) -> None:
    """A call is its response id and call id: the recording's second ``call_0`` is another
    call, run and answered with the result recorded in its own turn."""
    code, out = replay(cli, reused_ids(tmp_path))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [
        ("first_tool", "SUCCEEDED", "first result"),
        ("second_tool", "SUCCEEDED", "second result"),
    ]
    assert [(c["response_id"], c["call_id"]) for c in out["calls"]] == [
        ("resp_a", "call_0"),
        ("resp_b", "call_0"),
    ]


def test_a_repeated_identical_call_gets_its_own_recorded_result(
    cli: Invoke, tmp_path: Path
) -> None:
    """llm-gemini's pelican: the same call with the same arguments in two turns, answered
    differently each time. Another tool's recording ran it twice, so the replay does too."""
    tools = [{"functionDeclarations": [{"name": "pelican_name", "description": "A name"}]}]
    user = {"role": "user", "parts": [{"text": "Two pelican names, one at a time."}]}
    call = gg_call("pelican_name", {})
    history = [user]
    interactions = []
    for turn, name in enumerate(("Charles", "Sammy")):
        body = {"contents": list(history), "tools": tools}
        interactions.append(exchange(generate_uri(), body, gg_response(f"r{turn}", [call])))
        reply = {"functionResponse": {"name": "pelican_name", "response": {"output": name}}}
        history += [{"role": "model", "parts": [call]}, {"role": "user", "parts": [reply]}]
    final = gg_response("r2", [{"text": "Charles and Sammy."}])
    interactions.append(exchange(generate_uri(), {"contents": history, "tools": tools}, final))
    code, out = replay(cli, write(tmp_path, interactions))
    assert (code, out["state"], out["divergences"]) == (0, "COMPLETED", [])
    assert calls(out) == [
        ("pelican_name", "SUCCEEDED", {"output": "Charles"}),
        ("pelican_name", "SUCCEEDED", {"output": "Sammy"}),
    ]


def test_a_made_up_id_the_engine_qualified_with_its_turn_finds_its_recorded_result() -> None:
    """The engine may make an id the adapter made up unique by its turn (``<id>_t<turn>``)."""
    from toolloop_cli.engine.types import CallContext, RecordedResult
    from toolloop_cli.replay.recorded_tools import DeclaredTools, RecordedToolbox

    class Served:
        answered = 1

    recorded = {"gcall_ab12_0": RecordedResult(None, {"country": "Chile"}, None, "where")}
    toolbox = RecordedToolbox(
        DeclaredTools([[]], lambda spec, args: []), [recorded], cursor=Served()
    )

    def run(call_id: str) -> Any:
        context = CallContext("op", call_id, "idk", "t", "s", 0.0)
        return toolbox.execute("where", {}, context)

    assert (run("gcall_ab12_0_t0").status, run("gcall_ab12_0_t0").value) == (
        "ok",
        {"country": "Chile"},
    )
    assert run("gcall_ab12_0").value == {"country": "Chile"}
    assert run("gcall_ab12_1_t0").status == "failed"  # another call: no result recorded
