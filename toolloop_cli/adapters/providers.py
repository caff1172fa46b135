"""One table of the provider API families: what every other layer knows about a provider.

Each ``ProviderSpec`` says, for one API family, which adapter class speaks it, where it is
reached live (default base URL, the variables that override it and hold the key, the header
the key goes in) and which request paths recognise it in a recording or at a fake server. The
composition root's ``--provider`` table, the live transport's auth headers, the adapters'
default base URLs, cassette detection and ``toolloop serve`` are all derived from here, so
adding a provider is one adapter module and one entry.

Imports nothing heavy: the CLI reads this table before any adapter is imported.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "ADAPTERS",
    "API_PATHS",
    "AUTH_HEADERS",
    "BASE_URL_ENV",
    "BY_NAME",
    "POLL_PATHS",
    "PROVIDERS",
    "ProviderSpec",
    "default_base_url",
    "detect_api",
    "detect_poll",
]


@dataclass(frozen=True)
class ProviderSpec:
    """One provider API family, everything the layers outside its adapter need of it."""

    #: the name given to ``--provider``
    name: str
    #: the provider as an operation stores it (``gemini`` for both Gemini families)
    provider: str
    family: str
    #: (module, class) of the adapter; literal on purpose, never taken from input
    adapter: tuple[str, str]
    base_url: str
    #: the path a client's base URL ends with for this family (OpenAI's SDKs include ``/v1``)
    base_path: str = ""
    key_env: str = ""
    base_env: str = ""
    #: header the key is sent in, and its value with ``{key}`` standing for the key
    auth_header: str = ""
    auth_template: str = "{key}"
    #: request paths (regular expressions matched at the end of the path) of this family's
    #: model requests; the host is ignored, so proxies, gateways and fake servers match
    paths: tuple[str, ...] = ()
    #: paths that poll an answer started in the background; group 1 is the response id
    polls: tuple[str, ...] = ()


PROVIDERS: tuple[ProviderSpec, ...] = (
    ProviderSpec(
        name="openai",
        provider="openai",
        family="responses",
        adapter=("toolloop_cli.adapters.openai_responses", "OpenAIResponsesAdapter"),
        base_url="https://api.openai.com/v1",
        base_path="/v1",
        key_env="OPENAI_API_KEY",
        base_env="OPENAI_BASE_URL",
        auth_header="authorization",
        auth_template="Bearer {key}",
        # with or without /v1 (https://host/responses, a gateway's /proxy/openai/responses)
        paths=(r"(?:^|/)responses$",),
        polls=(r"(?:^|/)responses/(resp_[A-Za-z0-9_-]+)$",),
    ),
    ProviderSpec(
        name="anthropic",
        provider="anthropic",
        family="messages",
        adapter=("toolloop_cli.adapters.anthropic_messages", "AnthropicMessagesAdapter"),
        base_url="https://api.anthropic.com",
        key_env="ANTHROPIC_API_KEY",
        base_env="ANTHROPIC_BASE_URL",
        auth_header="x-api-key",
        # /v1/messages, a gateway's /anthropic/v1/messages; never OpenAI's threads/ID/messages
        paths=(r"^(?!.*/threads/[^/]+/messages$).*(?:^|/)messages$",),
    ),
    ProviderSpec(
        name="gemini",
        provider="gemini",
        family="interactions",
        adapter=("toolloop_cli.adapters.gemini_interactions", "GeminiInteractionsAdapter"),
        base_url="https://generativelanguage.googleapis.com",
        key_env="GEMINI_API_KEY",
        base_env="GEMINI_BASE_URL",
        auth_header="x-goog-api-key",
        paths=(r"(?:^|/)interactions$",),
        # GET …/interactions/{id}; never …/{id}:cancel
        polls=(r"(?:^|/)interactions/([^/:]+)$",),
    ),
    ProviderSpec(
        name="gemini-generate",
        provider="gemini",
        family="generate_content",
        adapter=("toolloop_cli.adapters.gemini_generate", "GeminiGenerateAdapter"),
        base_url="https://generativelanguage.googleapis.com",
        key_env="GEMINI_API_KEY",
        base_env="GEMINI_BASE_URL",
        auth_header="x-goog-api-key",
        # Gemini API and Vertex (.../publishers/google/models/M:generateContent)
        paths=(r"/models/[^/:]+:(?:generateContent|streamGenerateContent)$",),
    ),
    # a scripted model for tests and demos: no key, no network; its transport is handed in
    ProviderSpec(
        name="scripted",
        provider="scripted",
        family="scripted",
        adapter=("toolloop_cli.adapters.scripted", "ScriptedAdapter"),
        base_url="scripted://model",
    ),
)

#: ``--provider`` name → its spec
BY_NAME: Mapping[str, ProviderSpec] = {spec.name: spec for spec in PROVIDERS}
#: (provider, api_family) → (module, class)
ADAPTERS: Mapping[tuple[str, str], tuple[str, str]] = {
    (spec.provider, spec.family): spec.adapter for spec in PROVIDERS
}
#: provider → (header, value template) of its key
AUTH_HEADERS: Mapping[str, tuple[str, str]] = {
    spec.provider: (spec.auth_header, spec.auth_template) for spec in PROVIDERS if spec.auth_header
}
#: provider → (base-URL variable, the path its base URL ends with)
BASE_URL_ENV: Mapping[str, tuple[str, str]] = {
    spec.provider: (spec.base_env, spec.base_path) for spec in PROVIDERS if spec.base_env
}
#: path patterns → (provider, api_family), first match wins
API_PATHS: tuple[tuple[str, tuple[str, str]], ...] = tuple(
    (pattern, (spec.provider, spec.family)) for spec in PROVIDERS for pattern in spec.paths
)
POLL_PATHS: tuple[tuple[str, tuple[str, str]], ...] = tuple(
    (pattern, (spec.provider, spec.family)) for spec in PROVIDERS for pattern in spec.polls
)


def default_base_url(provider: str, family: str) -> str:
    """The live base URL of an API family (what its adapter sends to unless told otherwise)."""
    for spec in PROVIDERS:
        if (spec.provider, spec.family) == (provider, family):
            return spec.base_url
    raise KeyError(f"{provider}/{family}")


def detect_api(uri: str) -> tuple[str, str] | None:
    """``(provider, api_family)`` of a model request URI, or ``None`` for any other endpoint."""
    path = urlsplit(uri).path.rstrip("/")
    for pattern, api in API_PATHS:
        if re.search(pattern, path):  # re caches each pattern compiled
            return api
    return None


def detect_poll(uri: str) -> tuple[tuple[str, str], str] | None:
    """``((provider, api_family), response id)`` of a URI that polls a background answer."""
    path = urlsplit(uri).path.rstrip("/")
    for pattern, api in POLL_PATHS:
        found = re.search(pattern, path)
        if found:
            return api, found.group(1)
    return None
