"""The benchmark workload through peer frameworks, in ``bench/.peers-venv`` (``make bench-peers``).

    bench/.peers-venv/bin/python bench/peers.py langgraph|pydantic-ai|openai-agents --turns 200

Each peer gets the same script as toolloop: T turns of C calls to a trivial ``read_item``, then
the final text, from a scripted model (no network), with the framework's own durable store on
disk where it has one:

- LangGraph: a ``StateGraph`` of a scripted model node and a ``ToolNode``, checkpointed by its
  ``SqliteSaver`` to a file (a checkpoint per super-step);
- OpenAI Agents SDK: a scripted ``Model`` and a ``function_tool``, the history kept in an
  ``SQLiteSession`` file; tracing off (nothing leaves the process);
- pydantic-ai: a ``FunctionModel`` and a plain tool. It has no store of its own (durable runs
  go through Temporal or DBOS), so it runs in memory: a figure without any disk write.

Prints one JSON line like ``measure.py``. Imports happen before the clock starts.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import workload  # noqa: E402


def read_item(key: str) -> dict[str, Any]:
    """Read one item by its key."""
    return {"key": key, "value": len(key)}


class Script:
    """Which turn comes next: the model side of the workload, with no look at the history."""

    def __init__(self, turns: int, calls: int) -> None:
        self.turns, self.calls, self.turn = turns, calls, 0

    def next(self) -> list[tuple[str, str]] | None:
        """``[(call_id, key), …]`` for a tool turn, None for the final text."""
        turn = self.turn
        self.turn += 1
        if turn >= self.turns:
            return None
        return [(workload.call_id(turn, n), workload.key(turn, n)) for n in range(self.calls)]


def langgraph(turns: int, calls: int, folder: Path) -> tuple[Callable[[], str], Path]:
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    script = Script(turns, calls)

    def model(state: MessagesState) -> dict[str, Any]:
        planned = script.next()
        if planned is None:
            return {"messages": [AIMessage(content=workload.FINAL_TEXT)]}
        tool_calls = [{"name": workload.TOOL, "args": {"key": k}, "id": c} for c, k in planned]
        return {"messages": [AIMessage(content="", tool_calls=tool_calls)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([tool(read_item)]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    path = folder / "langgraph.db"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    app = graph.compile(checkpointer=SqliteSaver(conn))
    config: Any = {"configurable": {"thread_id": "bench"}, "recursion_limit": 2 * turns + 10}

    def run() -> str:
        state = app.invoke({"messages": [HumanMessage(workload.TASK)]}, config)
        conn.close()
        return str(state["messages"][-1].content)

    return run, path


def openai_agents(turns: int, calls: int, folder: Path) -> tuple[Callable[[], str], Path]:
    from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)
    script = Script(turns, calls)

    class ScriptedModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            planned = script.next()
            output: list[Any]
            if planned is None:
                text = ResponseOutputText(
                    annotations=[], text=workload.FINAL_TEXT, type="output_text"
                )
                output = [
                    ResponseOutputMessage(
                        id="msg_final",
                        content=[text],
                        role="assistant",
                        status="completed",
                        type="message",
                    )
                ]
            else:
                output = [
                    ResponseFunctionToolCall(
                        id=f"fc_{c}",
                        call_id=c,
                        name=workload.TOOL,
                        arguments=json.dumps({"key": k}),
                        type="function_call",
                        status="completed",
                    )
                    for c, k in planned
                ]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the benchmark does not stream")

    agent = Agent(name="bench", model=ScriptedModel(), tools=[function_tool(read_item)])
    path = folder / "agents.db"
    session = SQLiteSession("bench", str(path))

    def run() -> str:
        result = Runner.run_sync(agent, workload.TASK, max_turns=turns + 5, session=session)
        return str(result.final_output)

    return run, path


def pydantic_ai(turns: int, calls: int, folder: Path) -> tuple[Callable[[], str], Path]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.usage import UsageLimits

    script = Script(turns, calls)

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        planned = script.next()
        if planned is None:
            return ModelResponse(parts=[TextPart(workload.FINAL_TEXT)])
        parts = [ToolCallPart(workload.TOOL, {"key": k}, tool_call_id=c) for c, k in planned]
        return ModelResponse(parts=parts)

    agent = Agent(FunctionModel(model))
    agent.tool_plain(read_item)
    limits = UsageLimits(request_limit=turns + 5, tool_calls_limit=turns * calls + 5)

    def run() -> str:
        return str(agent.run_sync(workload.TASK, usage_limits=limits).output)

    return run, folder / "none.db"


PEERS = {"langgraph": langgraph, "openai-agents": openai_agents, "pydantic-ai": pydantic_ai}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toolloop-peers-") as tmp:
        folder = Path(tmp)
        run, store = PEERS[args.peer](args.turns, args.calls, folder)
        started = time.perf_counter()
        text = run()
        seconds = time.perf_counter() - started
        size = sum(p.stat().st_size for p in folder.iterdir() if p.name.startswith(store.name))
    state = "COMPLETED" if text == workload.FINAL_TEXT else f"unexpected final text {text!r}"
    print(
        json.dumps(
            {
                "seconds": seconds,
                "calls": args.turns * args.calls,
                "store_bytes": size,
                "state": state,
                "variant": args.peer,
            }
        )
    )


if __name__ == "__main__":
    main()
