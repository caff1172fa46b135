"""Gemini generateContent adapter (``:generateContent``, ``:streamGenerateContent?alt=sse``).

Continuation: stateless. The conversation is the ``contents`` list: the task as a ``user``
content, each answer's candidate content exactly as received (``thoughtSignature`` parts and
all: Gemini rejects a replayed call without its signature), then one ``user`` content with a
``functionResponse`` part per call, in order, ``response`` being the envelope object.

Call ids: Gemini usually sends ``functionCall`` parts without an ``id``. A missing id is
synthesised from the answer's ``responseId``, the call's position among the answer's calls and
its name and arguments (``gcall_<sha256 prefix>_<n>``): the same answer always gives the same
ids, streamed or not (the engine adds the turn when an earlier turn holds one). A
synthesised id is never sent back (the ``functionResponse`` then pairs by name and order, as
the API expects); a provider id is.

``finishReason``: ``STOP`` → TOOL_PROPOSALS when the content has calls, else FINAL_TEXT;
``MAX_TOKENS`` → TRUNCATED; ``SAFETY`` and the other blocking reasons → REFUSAL;
``UNEXPECTED_TOOL_CALL`` with ``functionCall`` parts (the model called a function it may not
call) → TOOL_PROPOSALS whose calls can never run: each is answered with an error envelope
(``unknown_tool`` when undeclared, else refused), so the model is told, as a client answers
it; ``MALFORMED_FUNCTION_CALL``, ``TOO_MANY_TOOL_CALLS`` and an unexpected call without parts
→ API_FAILURE (not retryable: there is no call to run and the model said why); ``OTHER`` and
anything unknown → API_FAILURE; no ``finishReason`` at all → TRUNCATED.

A ``functionCall`` streamed in pieces (``partialArgs``, ``willContinue``: Vertex AI's
``streamFunctionCallArguments``, which toolloop never sets) is refused as malformed rather than
run with the pieces' empty ``args``.

``streamGenerateContent`` without ``alt=sse`` answers with a JSON array of the chunks a
stream sends; it is assembled like the stream. A prompt blocked before any
candidate (``promptFeedback.blockReason``) → REFUSAL.

A client that asks for enums as numbers (``$alt=json;enum-encoding=int``, Vertex AI's REST
transport) gets ``finishReason`` and ``blockReason`` as integers. The finish reasons every
revision of both APIs numbers alike (1 ``STOP`` to 5 ``OTHER``) are read by name; any other
number is an unknown reason (API_FAILURE, as an unknown name is); a prompt blocked for any
numbered reason is still blocked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NoReturn

from toolloop_cli.engine.types import (
    ApiError,
    HttpRequest,
    HttpResponse,
    JSONObject,
    ModelSettings,
    ModelTurn,
    ProposedCall,
    ResultForModel,
    ToolSpec,
    TurnOutcome,
)
from toolloop_cli.errors import MalformedProviderPayload

from ._answer import parse_answer, usage_from
from ._declare import declarations
from ._errors import GEMINI
from ._gemini_readers import GenerateReader
from ._gemini_stream import (
    SYNTHETIC_PREFIX,
    GenerateStream,
    is_synthetic_call_id,
    synthetic_call_id,
)
from ._json import parse_arguments
from ._stream import EventSink, FragmentCapExceeded, dumps_arguments, no_events
from .providers import default_base_url

__all__ = ["DEFAULT_BASE_URL", "SYNTHETIC_PREFIX", "GeminiGenerateAdapter", "synthetic_call_id"]

DEFAULT_BASE_URL = default_base_url("gemini", "generate_content")

_PROVIDER = "gemini"
_REFUSALS = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "LANGUAGE",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "MODEL_ARMOR",  # Vertex AI: the answer was blocked by a Model Armor template
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
#: ``finishReason`` numbers that name the same reason in every revision of both APIs
_FINISH_NUMBERS = {1: "STOP", 2: "MAX_TOKENS", 3: "SAFETY", 4: "RECITATION", 5: "OTHER"}
_CALL_FAILURES = frozenset(
    {"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"}
)


def _malformed(reason: str) -> NoReturn:
    raise MalformedProviderPayload(f"gemini generateContent: {reason}", provider=_PROVIDER)


class GeminiGenerateAdapter(GenerateReader):
    """The ``ModelAdapter`` for Gemini's generateContent API; holds no conversation state."""

    provider: str = "gemini"
    api_family: str = "generate_content"
    revision: str = "gemini-generate/1"

    def __init__(self, base_url: str = DEFAULT_BASE_URL) -> None:
        self.base_url = base_url.rstrip("/")

    def start(self, task: str, settings: ModelSettings) -> list[JSONObject]:
        return [{"role": "user", "parts": [{"text": task}]}]

    def build_request(
        self,
        conversation: Sequence[JSONObject],
        tools: Sequence[ToolSpec],
        settings: ModelSettings,
    ) -> HttpRequest:
        model = settings.model.removeprefix("models/")
        method = "streamGenerateContent?alt=sse" if settings.stream else "generateContent"
        body: JSONObject = {"contents": list(conversation)}
        functions: list[JSONObject] = []
        entries: list[JSONObject] = []
        for t, own in declarations(tools, self.provider):
            if own is None:
                functions.append(
                    {
                        "name": t.name,
                        "description": t.description,
                        "parametersJsonSchema": t.parameters,
                    }
                )
            elif isinstance(own.get("name"), str):  # a recorded function declaration
                functions.append(own)
            else:  # a whole tool entry as recorded ({"googleSearch": {}})
                entries.append(own)
        if functions or entries:
            body["tools"] = ([{"functionDeclarations": functions}] if functions else []) + entries
        if settings.instructions is not None:
            body["systemInstruction"] = {"parts": [{"text": settings.instructions}]}
        if settings.max_output_tokens is not None:
            body["generationConfig"] = {"maxOutputTokens": settings.max_output_tokens}
        return HttpRequest(
            url=f"{self.base_url}/v1beta/models/{model}:{method}",
            headers={"content-type": "application/json"},
            body=body,
        )

    def result_items(self, results: Sequence[ResultForModel]) -> list[JSONObject]:
        """One ``user`` content: a ``functionResponse`` part per call, in order."""
        if not results:
            return []
        parts: list[JSONObject] = []
        for r in results:
            response: JSONObject = {"name": r.name, "response": r.content}
            if not is_synthetic_call_id(r.call_id):
                response["id"] = r.call_id
            parts.append({"functionResponse": response})
        return [{"role": "user", "parts": parts}]

    def parse_response(
        self, response: HttpResponse, on_event: EventSink | None = None
    ) -> ModelTurn:
        """Classify one answer into a ``ModelTurn``; see the module docstring for the rules."""
        return parse_answer(
            response,
            provider=_PROVIDER,
            table=GEMINI,
            stream=lambda: GenerateStream(parse_generate, on_event or no_events),
            parse=lambda data: _parse_body(data, on_event or no_events),
            request_id_header=None,
        )


def _parse_body(data: Any, on_event: EventSink) -> ModelTurn:
    """A JSON answer: one GenerateContentResponse, or ``streamGenerateContent`` without
    ``alt=sse``, which answers with a JSON array of the chunks a stream would send."""
    if not isinstance(data, list):
        return parse_generate(data)
    stream = GenerateStream(parse_generate, on_event)
    try:
        for chunk in data:
            if not isinstance(chunk, dict):
                _malformed("a chunk of the streamed answer is not an object")
            turn = stream.handle(None, chunk)
            if turn is not None:
                return turn
    except FragmentCapExceeded as exc:
        return stream.cut("fragment_cap", f"the chunks grew past the {exc.cap}-byte cap")
    return stream.cut("stream_incomplete", "the chunks ended before one with a finishReason")


def parse_generate(data: Any) -> ModelTurn:
    """A GenerateContentResponse (JSON, or assembled from a stream) → ``ModelTurn``."""
    if not isinstance(data, dict):
        _malformed("answer is not a JSON object")
    response_id = data.get("responseId")
    response_id = response_id if isinstance(response_id, str) and response_id else None
    model = data.get("modelVersion")
    common: dict[str, Any] = {
        "response_id": response_id,
        "model": model if isinstance(model, str) else None,
        "usage": usage_from(
            data.get("usageMetadata"),
            "promptTokenCount",
            "candidatesTokenCount",
            "totalTokenCount",
            _PROVIDER,
        ),
    }
    candidates = data.get("candidates")
    feedback = data.get("promptFeedback")
    blocked = feedback.get("blockReason") if isinstance(feedback, dict) else None
    if type(blocked) is int:
        blocked = f"block reason {blocked}"
    if not candidates and isinstance(blocked, str):
        return ModelTurn(
            outcome=TurnOutcome.REFUSAL,
            finish_reason=f"prompt_blocked:{blocked}",
            detail=f"the prompt was blocked ({blocked}); nothing was generated",
            **common,
        )
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        _malformed("answer has no candidates")
    candidate = candidates[0]
    content = candidate.get("content", {"role": "model", "parts": []})
    if not isinstance(content, dict) or not isinstance(content.get("parts", []), list):
        _malformed("candidate 'content' has no list of parts")
    texts, calls = _scan(content.get("parts", []), response_id)
    finish = candidate.get("finishReason")
    if type(finish) is int:  # an enum as its number
        finish = _FINISH_NUMBERS.get(finish, f"finish reason {finish}")
    if finish is not None and not isinstance(finish, str):
        _malformed("candidate 'finishReason' is not a string")
    text = "".join(texts) if texts else None
    items = ({"role": "model", **content},)
    return _classify(finish, text, calls, items, candidate.get("finishMessage"), common)


def _classify(
    finish: str | None,
    text: str | None,
    calls: list[ProposedCall],
    items: tuple[JSONObject, ...],
    message: Any,
    common: dict[str, Any],
) -> ModelTurn:
    said = message if isinstance(message, str) else ""
    match finish:
        case "STOP" if calls:
            return ModelTurn(
                outcome=TurnOutcome.TOOL_PROPOSALS,
                finish_reason=finish,
                text=text,
                calls=tuple(calls),
                output_items=items,
                **common,
            )
        case "STOP":
            return ModelTurn(
                outcome=TurnOutcome.FINAL_TEXT,
                finish_reason=finish,
                text=text or "",
                output_items=items,
                **common,
            )
        case "UNEXPECTED_TOOL_CALL" if calls:
            # the model called a function it may not call here: the calls are proposed, so
            # the model is told (unknown tool, or refused), and none of them can run
            refused = f"the provider refused this call ({said[:300] or finish})"
            held = [
                c.model_copy(update={"arguments": None, "argument_error": refused}) for c in calls
            ]
            return ModelTurn(
                outcome=TurnOutcome.TOOL_PROPOSALS,
                finish_reason=finish,
                text=text,
                calls=tuple(held),
                output_items=items,
                detail=f"the model ended with an unexpected tool call; none will run: {said[:300]}",
                **common,
            )
        case None | "MAX_TOKENS":
            detail = (
                "the answer hit maxOutputTokens" if finish else "the answer has no finishReason"
            )
            if calls:
                detail += f"; call {', '.join(c.call_id for c in calls)} is never executed"
            return ModelTurn(
                outcome=TurnOutcome.TRUNCATED,
                finish_reason=finish or "none",
                text=text,
                detail=detail + "; no call will run",
                **common,
            )
        case str() if finish in _REFUSALS:
            detail = f"the answer was blocked ({finish})" + (f": {said[:300]}" if said else "")
            return ModelTurn(
                outcome=TurnOutcome.REFUSAL,
                finish_reason=finish,
                text=text,
                detail=detail,
                **common,
            )
        case _:
            what = "a malformed or unexpected function call" if finish in _CALL_FAILURES else finish
            error = ApiError(code=finish, message=said[:500], retryable=False)
            return ModelTurn(
                outcome=TurnOutcome.API_FAILURE,
                finish_reason=finish,
                error=error,
                detail=f"the model ended with {what}; nothing will run",
                **common,
            )


def _scan(parts: list[Any], response_id: str | None) -> tuple[list[str], list[ProposedCall]]:
    texts: list[str] = []
    calls: list[ProposedCall] = []
    for index, part in enumerate(parts):
        if not isinstance(part, dict):
            _malformed(f"parts[{index}] is not an object")
        if "functionCall" in part:
            calls.append(_function_call(index, part["functionCall"], len(calls), response_id))
        elif isinstance(part.get("text"), str) and not part.get("thought"):
            texts.append(part["text"])
    ids = [c.call_id for c in calls]
    if len(set(ids)) != len(ids):
        _malformed("two functionCall parts share an id")
    return texts, calls


def _function_call(index: int, call: Any, ordinal: int, response_id: str | None) -> ProposedCall:
    if not isinstance(call, dict):
        _malformed(f"parts[{index}] functionCall is not an object")
    if "partialArgs" in call or "willContinue" in call:  # never asked for by toolloop
        _malformed(
            f"parts[{index}] functionCall streams its arguments in pieces (partialArgs, "
            "willContinue: Vertex AI's streamFunctionCallArguments), which toolloop does not "
            "put together; no call runs"
        )
    name, args, given_id = call.get("name"), call.get("args", {}), call.get("id")
    if not isinstance(name, str) or not name:
        _malformed(f"parts[{index}] functionCall has no string 'name'")
    if not isinstance(args, dict):
        _malformed(f"parts[{index}] functionCall 'args' is not an object")
    if given_id is not None and (not isinstance(given_id, str) or not given_id):
        _malformed(f"parts[{index}] functionCall 'id' is not a string")
    call_id = given_id or synthetic_call_id(response_id, ordinal, call)
    raw = dumps_arguments(args)
    arguments, error = parse_arguments(raw)
    return ProposedCall(
        call_id=call_id,
        name=name,
        raw_arguments=raw,
        arguments=arguments,
        argument_error=error,
        id_synthesised=given_id is None,
    )
