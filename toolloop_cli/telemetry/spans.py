"""Span data for one operation, built from its store records; no OpenTelemetry import here.

Follows the OpenTelemetry GenAI semantic conventions v1.41.0 (gen-ai-agent-spans.md and
gen-ai-spans.md): per segment an ``invoke_agent {registry}`` span (INTERNAL), under it one
``chat {model}`` span per model request (CLIENT; ``generate_content`` for Gemini
generateContent) and one ``execute_tool {tool}`` span per settled call (INTERNAL). Approvals
are span events. Ids are derived from the operation id, so every export of an operation is
the same trace with the same span ids. Content (task, texts, arguments, results) appears only
with ``content=True``, the conventions' opt-in.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from toolloop_cli.engine.records import ApprovalRecord, CallRecord, OperationRecord, TurnRecord
from toolloop_cli.engine.sources import LiveSource
from toolloop_cli.engine.states import ApprovalStatus, OpState
from toolloop_cli.engine.types import TurnOutcome

from . import content as msgs
from .model import Attributes, Event, History, Link, Span, span_id, trace_id
from .segments import CallSlice, Placement, Segment, nanos, place

__all__ = ["build_spans"]

#: gen_ai.provider.name well-known values for toolloop's providers (others pass through).
PROVIDER_NAMES = {"openai": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini"}
#: Call states whose span is an error (the call did not do what the model asked).
FAILED_CALLS = frozenset(
    {"INVALID", "DENIED", "EXPIRED", "FAILED", "TIMED_OUT", "UNKNOWN_OUTCOME", "NOT_EXECUTED"}
)


def build_spans(history: History, *, since: int = 0, content: bool = False) -> list[Span]:
    """The spans of every closed segment from index ``since`` on, parents first."""
    placement = place(history.transitions, history.turns, history.calls)
    builder = _Builder(history, placement, content)
    spans: list[Span] = []
    for seg in placement.segments[since:]:
        spans.extend(builder.segment(seg))
    return spans


class _Builder:
    def __init__(self, history: History, placement: Placement, content: bool) -> None:
        self.h = history
        self.p = placement
        self.content = content
        self.op: OperationRecord = history.operation
        self.trace = trace_id(self.op.operation_id)
        self.calls_by_turn: dict[int, list[CallRecord]] = {}
        self.histories: dict[int, str] | None = None  # content only: built on first use
        self.answered_before: dict[int, int] = {}
        last: int | None = None
        for turn in sorted(history.turns, key=lambda t: t.idx):
            if last is not None:
                self.answered_before[turn.idx] = last
            if turn.idx in placement.turns:
                last = nanos(turn.created_at)
        for call in sorted(history.calls, key=lambda c: (c.turn_idx, c.seq)):
            self.calls_by_turn.setdefault(call.turn_idx, []).append(call)

    def seg_id(self, seg: Segment) -> int:
        return span_id(self.op.operation_id, "segment", str(seg.index))

    # -- the operation (one span per segment) ---------------------------------------------------

    def segment(self, seg: Segment) -> list[Span]:
        turns = [t for t in self.h.turns if self.p.turns.get(t.idx, (-1, 0))[0] == seg.index]
        children = [self.chat(seg, t) for t in turns]
        children += [self.tool(seg, s) for s in self.p.calls.get(seg.index, [])]
        t = self.h.transitions
        attrs: Attributes = {
            "gen_ai.operation.name": "invoke_agent",
            **self.common(),
            "gen_ai.agent.name": self.op.registry_name,
            "gen_ai.agent.version": self.op.registry_revision,
            "gen_ai.request.model": self.op.model,
            "gen_ai.usage.input_tokens": sum(x.usage.input_tokens for x in turns),
            "gen_ai.usage.output_tokens": sum(x.usage.output_tokens for x in turns),
            "toolloop.operation.id": self.op.operation_id,
            "toolloop.tenant": self.op.tenant,
            "toolloop.subject": self.op.subject,
            "toolloop.registry.name": self.op.registry_name,
            "toolloop.registry.revision": self.op.registry_revision,
            "toolloop.registry.sha256": self.op.registry_sha256,
            "toolloop.policy.revision": self.op.policy_revision,
            "toolloop.api_family": self.op.api_family,
            "toolloop.transport": self.op.transport,
            "toolloop.adapter.revision": self.op.adapter_revision,
            "toolloop.segment": seg.index,
            "toolloop.operation.state": seg.state,
            "toolloop.paused": seg.state == OpState.WAITING_APPROVAL.value,
        }
        if seg.reason:
            attrs["toolloop.operation.reason"] = seg.reason
        links: tuple[Link, ...] = ()
        if seg.index > 0:
            before = self.p.segments[seg.index - 1]
            attrs["toolloop.resumed_from"] = before.state
            links = (Link(self.trace, self.seg_id(before), {"toolloop.link": "resumes"}),)
        status, description = "UNSET", None
        if seg.state == OpState.COMPLETED.value:
            status = "OK"
        elif seg.state != OpState.WAITING_APPROVAL.value:
            status, description = "ERROR", f"{seg.state}: {seg.reason}" if seg.reason else seg.state
            attrs["error.type"] = seg.state
        if self.content:
            self.segment_content(seg, attrs)
        span = Span(
            name=f"invoke_agent {self.op.registry_name}",
            trace_id=self.trace,
            span_id=self.seg_id(seg),
            parent_id=None,
            kind="INTERNAL",
            start_ns=nanos(t[seg.first]["at"]),
            end_ns=nanos(t[seg.last]["at"]),
            attributes=attrs,
            status=status,
            description=description,
            events=tuple(self.segment_events(seg)),
            links=links,
        )
        return [span, *children]

    def segment_content(self, seg: Segment, attrs: Attributes) -> None:
        if seg.index == 0:
            task = [{"role": "user", "parts": [{"type": "text", "content": self.op.task}]}]
            attrs["gen_ai.input.messages"] = msgs.as_json(task)
        if seg.state == OpState.COMPLETED.value and self.op.final_text is not None:
            final = [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": self.op.final_text}],
                    "finish_reason": "stop",
                }
            ]
            attrs["gen_ai.output.messages"] = msgs.as_json(final)

    def segment_events(self, seg: Segment) -> list[Event]:
        """Approvals requested in this segment, and refused decisions since the last one."""
        events: list[Event] = []
        for apr in self.h.approvals:
            at = self.request_index(apr)
            if at is not None and seg.first <= at <= seg.last:
                events.append(
                    Event(
                        "toolloop.approval.requested",
                        nanos(apr.requested_at),
                        {
                            **self.approval_attrs(apr),
                            "toolloop.approval.requested_by": apr.requested_by,
                            "toolloop.approval.expires_at": apr.expires_at,
                        },
                    )
                )
        previous = self.p.segments[seg.index - 1].last if seg.index > 0 else -1
        for i in range(previous + 1, seg.last + 1):
            t = self.h.transitions[i]
            if t["kind"] == "approval_refused":
                attrs: Attributes = {"toolloop.approval.status": t["target"]}
                if t["call_id"]:
                    attrs["gen_ai.tool.call.id"] = t["call_id"]
                if t["reason"]:
                    attrs["toolloop.approval.refusal"] = t["reason"]
                events.append(Event("toolloop.approval.refused", nanos(t["at"]), attrs))
        return sorted(events, key=lambda e: e.time_ns)

    def request_index(self, apr: ApprovalRecord) -> int | None:
        """The transition where the approval's call started waiting for it."""
        for i, call in self.p.call_of.items():
            t = self.h.transitions[i]
            if (call.response_id, call.call_id) == (apr.response_id, apr.call_id) and t[
                "target"
            ] == "WAITING_APPROVAL":
                return i
        return None

    def approval_attrs(self, apr: ApprovalRecord) -> Attributes:
        return {
            "toolloop.approval.id": apr.approval_id,
            "gen_ai.tool.name": apr.tool,
            "gen_ai.tool.call.id": apr.call_id,
            "toolloop.policy.revision": apr.policy_revision,
        }

    def common(self) -> Attributes:
        attrs: Attributes = {
            "gen_ai.provider.name": PROVIDER_NAMES.get(self.op.provider, self.op.provider),
            "gen_ai.conversation.id": self.op.operation_id,
        }
        return attrs

    # -- model requests -------------------------------------------------------------------------

    def chat(self, seg: Segment, turn: TurnRecord) -> Span:
        operation = "generate_content" if self.op.api_family == "generate_content" else "chat"
        settings = self.op.settings
        attrs: Attributes = {
            "gen_ai.operation.name": operation,
            **self.common(),
            "gen_ai.request.model": self.op.model,
            "gen_ai.usage.input_tokens": turn.usage.input_tokens,
            "gen_ai.usage.output_tokens": turn.usage.output_tokens,
            "toolloop.operation.id": self.op.operation_id,
            "toolloop.turn.index": turn.idx,
            "toolloop.turn.outcome": turn.outcome.value,
            "toolloop.request.sha256": turn.request_sha256,
            "toolloop.response.sha256": turn.response_sha256,
        }
        if turn.response_id:
            attrs["gen_ai.response.id"] = turn.response_id
        if turn.idx in self.h.response_models:
            attrs["gen_ai.response.model"] = self.h.response_models[turn.idx]
        if turn.finish_reason:
            attrs["gen_ai.response.finish_reasons"] = (turn.finish_reason,)
        if isinstance(settings.get("max_output_tokens"), int):
            attrs["gen_ai.request.max_tokens"] = settings["max_output_tokens"]
        if settings.get("stream") is True:
            attrs["gen_ai.request.stream"] = True
        attrs.update(self.server())
        status, description = "UNSET", None
        if turn.outcome is TurnOutcome.API_FAILURE:
            error = turn.error
            kind = (
                error and (error.code or error.type or (error.status and str(error.status)))
            ) or "_OTHER"
            attrs["error.type"] = kind
            status, description = "ERROR", f"API_FAILURE: {kind}"
        if self.content:
            self.chat_content(turn, attrs)
            if turn.detail:
                attrs["toolloop.turn.detail"] = turn.detail
        _, begun = self.p.turns[turn.idx]
        start = nanos(self.h.transitions[begun]["at"])
        if turn.idx in self.answered_before:  # never before the previous answer arrived
            start = max(start, self.answered_before[turn.idx])
        return Span(
            name=f"{operation} {self.op.model}",
            trace_id=self.trace,
            span_id=span_id(self.op.operation_id, "turn", str(turn.idx)),
            parent_id=self.seg_id(seg),
            kind="CLIENT",
            start_ns=start,
            end_ns=max(start, nanos(turn.created_at)),
            attributes=attrs,
            status=status,
            description=description,
        )

    def chat_content(self, turn: TurnRecord, attrs: Attributes) -> None:
        if self.histories is None:
            self.histories = msgs.input_messages(self.op.task, self.h.turns, self.calls_by_turn)
        attrs["gen_ai.input.messages"] = self.histories[turn.idx]
        answer = msgs.output_messages(turn, self.calls_by_turn.get(turn.idx, []))
        if answer:
            attrs["gen_ai.output.messages"] = msgs.as_json(answer)
        instructions = self.op.settings.get("instructions")
        if isinstance(instructions, str) and instructions:
            attrs["gen_ai.system_instructions"] = msgs.as_json(
                [{"type": "text", "content": instructions}]
            )

    def server(self) -> Attributes:
        if not isinstance(self.op.source, LiveSource):
            return {}
        base = self.op.source.base_url
        parts = urlsplit(base)
        if not parts.hostname or parts.scheme not in ("http", "https"):
            return {}
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return {"server.address": parts.hostname, "server.port": port}

    # -- tool calls -----------------------------------------------------------------------------

    def tool(self, seg: Segment, part: CallSlice) -> Span:
        call = part.call
        current = call.state.value == part.state  # later records may have moved the call on
        attrs: Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.call_id,
            "gen_ai.tool.type": "function",
            "toolloop.operation.id": self.op.operation_id,
            "toolloop.call.state": part.state,
            "toolloop.call.turn": call.turn_idx,
            "toolloop.call.response_id": call.response_id,
        }
        optional = {
            "toolloop.call.idempotency_key": call.idempotency_key,
            "toolloop.call.arguments_sha256": call.arguments_sha256,
            "toolloop.call.approval_id": call.approval_id,
            "toolloop.call.result_sha256": call.result_sha256 if current else None,
            "toolloop.call.binding_sha256": call.call_binding_sha256 if current else None,
        }
        attrs.update({k: v for k, v in optional.items() if v is not None})
        if part.attempt:
            attrs["toolloop.call.attempt"] = part.attempt
        status, description = "UNSET", None
        if part.state in FAILED_CALLS:
            code, message = _error_of(call) if current else (None, None)
            kind = code or part.state.lower()
            attrs["error.type"] = kind
            status, description = "ERROR", f"{part.state}: {kind}"
            if self.content and message:
                description += f": {message}"
        if self.content:
            attrs["gen_ai.tool.call.arguments"] = msgs.as_json(msgs.call_arguments(call))
            result = msgs.call_result(call) if current else None
            if result is not None:
                attrs["gen_ai.tool.call.result"] = msgs.as_json(result)
        t = self.h.transitions
        start, end = nanos(t[part.transitions[0]]["at"]), nanos(t[part.transitions[-1]]["at"])
        events = self.call_events(seg, part) if part.attempt == 0 else []
        ident = [call.response_id, call.call_id] + ([str(part.attempt)] if part.attempt else [])
        return Span(
            name=f"execute_tool {call.name}",
            trace_id=self.trace,
            span_id=span_id(self.op.operation_id, "call", *ident),
            parent_id=self.seg_id(seg),
            kind="INTERNAL",
            start_ns=start,
            end_ns=max(start, end),
            attributes=attrs,
            status=status,
            description=description,
            events=tuple(events),
        )

    def call_events(self, seg: Segment, part: CallSlice) -> list[Event]:
        """The human decision on the call's approval (made while no segment ran, usually)."""
        call = part.call
        closed = nanos(self.h.transitions[seg.last]["at"])
        for apr in self.h.approvals:
            if (apr.response_id, apr.call_id) != (call.response_id, call.call_id):
                continue
            decided = apr.decided_at
            if apr.status is ApprovalStatus.PENDING or decided is None or nanos(decided) > closed:
                continue
            attrs = {**self.approval_attrs(apr), "toolloop.approval.status": apr.status.value}
            if apr.decided_by:
                attrs["toolloop.approval.decided_by"] = apr.decided_by
            if self.content and apr.reason:
                attrs["toolloop.approval.reason"] = apr.reason
            name = f"toolloop.approval.{apr.status.lower()}"
            return [Event(name, nanos(decided), attrs)]
        return []


def _error_of(call: CallRecord) -> tuple[str | None, str | None]:
    envelope = call.model_result
    error = envelope.get("error") if isinstance(envelope, dict) else None
    if not isinstance(error, dict):
        return None, None
    code, message = error.get("code"), error.get("message")
    return (code if isinstance(code, str) else None, message if isinstance(message, str) else None)
