"""Replay: a ``Transport`` that answers each request with the next recorded response.

Only interactions of one provider API are served (a cassette may also hold, say, token or
telemetry calls); they are served in order, whatever the request says. Comparing what was
sent (``.sent``) with what was recorded is the divergence check's job, not the transport's.
"""

from __future__ import annotations

from toolloop_cli.engine.types import HttpRequest, HttpResponse
from toolloop_cli.errors import TranscriptError

from .cassette import Cassette, Interaction

__all__ = ["ReplayTransport", "cassette_api"]


def cassette_api(cassette: Cassette) -> tuple[str, str]:
    """``(provider, api_family)`` of the cassette's first interaction with a known API URI."""
    for interaction in cassette.interactions:
        if interaction.api is not None:
            return interaction.api
    raise TranscriptError(f"transcript {cassette.path}: no interaction with a known provider URI")


class ReplayTransport:
    """Serves a cassette's recorded answers, in order, for one provider API family."""

    name: str = "transcript"

    def __init__(
        self, cassette: Cassette, api: tuple[str, str] | None = None, start: int = 0
    ) -> None:
        self.cassette = cassette
        self.api = api if api is not None else cassette_api(cassette)
        #: every request this transport was asked to send, in order
        self.sent: list[HttpRequest] = []
        #: the interactions served so far, aligned with ``sent`` (for divergence reports)
        self.served: list[Interaction] = []
        self._queue = [item for item in cassette.interactions if item.api == self.api]
        self._all = list(self._queue)
        #: answers already used by an earlier process of the same operation (on resume)
        self._queue = self._queue[start:]
        self._start = start

    def recorded_model(self) -> str | None:
        """The ``model`` of the first recorded request, if its body says (for display)."""
        for interaction in self._all:
            try:
                body = interaction.request.json()
            except TranscriptError:
                continue
            model = body.get("model") if isinstance(body, dict) else None
            if isinstance(model, str):
                return model
        return None

    @property
    def answered(self) -> int:
        """How many recorded answers were served, by this process and earlier ones."""
        return self._start + len(self.served)

    @property
    def remaining(self) -> int:
        """How many recorded answers are left."""
        return len(self._queue) - len(self.served)

    def send(self, request: HttpRequest) -> HttpResponse:
        """The next recorded answer; a ``TranscriptError`` when the recording has none left."""
        self.sent.append(request)
        if self.remaining <= 0:
            raise TranscriptError(
                f"transcript {self.cassette.path} has no recorded response left "
                f"for request {len(self.sent) - 1} (counted from 0)"
            )
        interaction = self._queue[len(self.served)]
        self.served.append(interaction)
        recorded = interaction.response
        headers = {name: ", ".join(values) for name, values in recorded.headers.items()}
        return HttpResponse(status=recorded.status, headers=headers, body=recorded.body)
