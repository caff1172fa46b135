"""Which provider API a request URI belongs to, from its path alone.

The host is ignored on purpose: base-URL overrides, proxies and local fake servers keep the
provider's path (``http://127.0.0.1:8080/v1/responses`` is still OpenAI Responses). The paths
are the provider table's (``adapters.providers``).
"""

from __future__ import annotations

from toolloop_cli.adapters.providers import API_PATHS, detect_api, detect_poll

__all__ = ["API_PATHS", "detect_api", "detect_poll"]
