"""HTTP routes that are registry methods by another URL (plain GETs, the spec's URLs).

Every method is ``POST /api/tools/{name}`` and JSON-RPC on ``/rpc``; a few also have a
URL of their own, for a browser link (a download), a ``curl`` or the spec
(``/api/runtime/system-prompt``). Such a route is only an alias: its path
parameters and query string (or JSON body) are the method's params, checked by the
registry like any call, and its answer is the method's result (or, for a
download, the file the result names). Nothing here is a second implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ALIASES", "SSE_PATH", "TOKEN_COOKIE", "HttpAlias"]

TOKEN_COOKIE = "trainee_token"
"""The cookie the web page holds the access token in (HttpOnly, SameSite=Strict)."""


@dataclass(frozen=True)
class HttpAlias:
    """``verbs`` on ``path`` call ``method``. Path parameters (``{session}``) and the query
    string are its params (``body``: the JSON body is); ``stream``: the answer is the file
    at the result's ``path``, streamed (``inline=1`` shows it in the browser)."""

    path: str
    method: str
    operation: str
    """The OpenAPI operationId (unique)."""
    verbs: tuple[str, ...] = ("GET",)
    body: bool = False
    stream: bool = False


ALIASES: tuple[HttpAlias, ...] = (
    HttpAlias("/api/tools", "tools_list", "tools"),
    HttpAlias("/api/openapi.json", "openapi_get", "openapi"),
    HttpAlias("/api/projects", "projects_list", "projects"),
    HttpAlias("/api/sessions/{session}/rounds/{round}/log", "logs_tail", "round_log"),
    HttpAlias("/api/sessions/{session}/rounds/{round}/metrics", "round_metrics", "round_points"),
    HttpAlias("/api/sessions/{session}/files/{name}", "session_file", "download", stream=True),
    HttpAlias("/api/runtime/system-prompt", "runtime_system_prompt_get", "system_prompt_read"),
    HttpAlias(
        "/api/runtime/system-prompt",
        "runtime_system_prompt_update",
        "system_prompt_write",
        verbs=("PUT", "POST"),
        body=True,
    ),
)

SSE_PATH = "/api/sessions/{session}/events"
"""A session's events as Server-Sent Events: the one API route that is no method (a
stream; over the socket ``events_watch`` sends the same events as notifications)."""
