"""Which provider API a request URI belongs to, from its path alone.

The host is ignored on purpose: base-URL overrides, proxies and local fake servers keep the
provider's path (``http://127.0.0.1:8080/v1/responses`` is still OpenAI Responses).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

__all__ = ["API_PATHS", "detect_api"]

#: Path patterns (matched at the end of the path) → (provider, api_family), first match wins.
API_PATHS: tuple[tuple[re.Pattern[str], tuple[str, str]], ...] = (
    (re.compile(r"/v1/responses$"), ("openai", "responses")),
    (re.compile(r"/v1/messages$"), ("anthropic", "messages")),
    (re.compile(r"/v1(?:beta)?/interactions$"), ("gemini", "interactions")),
    (
        re.compile(r"/models/[^/:]+:(?:generateContent|streamGenerateContent)$"),
        ("gemini", "generate_content"),
    ),
)


def detect_api(uri: str) -> tuple[str, str] | None:
    """``(provider, api_family)`` for a request URI, or ``None`` when it is no known endpoint."""
    path = urlsplit(uri).path.rstrip("/")
    for pattern, api in API_PATHS:
        if pattern.search(path):
            return api
    return None
