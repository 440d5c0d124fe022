"""The OpenAPI 3.1 document of the daemon, generated from the registry.

Each method is ``POST /api/tools/{name}`` with its params schema as the body and its
result schema under ``result``; each alias of :mod:`trainee.api.routes` is its own
path with the method's params as path and query parameters (or body) and its result
as the answer. The error answers come from the one error table (:mod:`trainee.errors`)
plus the guard's refusals. Only the event stream, which is no method, is described
by hand.
"""

from __future__ import annotations

import re
from typing import Any

import trainee
from trainee.api.registry import Method, Registry
from trainee.api.routes import ALIASES, SSE_PATH, TOKEN_COOKIE, HttpAlias
from trainee.errors import LimitExceeded, error_classes
from trainee.ids import SESSION_PATTERN

__all__ = ["build_openapi", "error_statuses"]

_GUARD = {
    401: "missing or wrong access token",
    403: "a foreign Origin (or an error class answered 403)",
    421: "a foreign Host (DNS rebinding)",
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}
_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "integer", "description": "the JSON-RPC code"},
                "message": {"type": "string"},
                "data": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "description": "the error class"},
                        "details": {},
                    },
                },
            },
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}


def error_statuses() -> dict[int, list[str]]:
    """HTTP status -> the error classes answered with it (from the error table)."""
    out: dict[int, list[str]] = {}
    for cls in error_classes():
        statuses = {cls.http_status}
        if cls is LimitExceeded:
            statuses.add(413)
        for status in statuses:
            out.setdefault(status, []).append(cls.__name__)
    return dict(sorted(out.items()))


def _errors() -> dict[str, Any]:
    described: dict[int, str] = {s: ", ".join(names) for s, names in error_statuses().items()}
    for status, reason in _GUARD.items():
        described[status] = f"{reason}; " + described[status] if status in described else reason
    return {
        str(s): {
            "description": described[s],
            "content": {"application/json": {"schema": _ERROR_REF}},
        }
        for s in sorted(described)
    }


def _tag(name: str) -> str:
    head = name.split("_", 1)[0]
    return {
        "runs": "loop",
        "session": "loop",
        "round": "loop",
        "plan": "loop",
        "tunables": "project",
        "projects": "project",
        "llm": "runtime",
        "prompt": "runtime",
        "journal": "project",
        "openapi": "tools",
    }.get(head, head)


def _ok(schema: dict[str, Any], description: str = "OK", media: str = "application/json") -> Any:
    return {"200": {"description": description, "content": {media: {"schema": schema}}}}


def _tool_operation(method: Method[Any]) -> dict[str, Any]:
    return {
        "post": {
            "operationId": method.name,
            "summary": method.summary,
            "description": method.description or method.summary,
            "tags": [_tag(method.name)],
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": method.params_schema()}},
            },
            "responses": {
                **_ok(
                    {
                        "type": "object",
                        "properties": {"result": method.result_schema()},
                        "required": ["result"],
                    }
                ),
                **_errors(),
            },
        }
    }


def _alias_operations(alias: HttpAlias, method: Method[Any]) -> dict[str, Any]:
    params = method.params_schema()
    props: dict[str, Any] = params.get("properties", {})
    required = set(params.get("required", []))
    in_path = re.findall(r"{(\w+)}", alias.path)
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": props.get(name, {})}
        for name in in_path
    ]
    description = f"The method `{method.name}` (`POST /api/tools/{method.name}`) by its own URL."
    if alias.stream:
        description += (
            " The answer is the file the method names, streamed as it was when opened; "
            "`inline=1` shows it in the browser instead of downloading it."
        )
    op: dict[str, Any] = {
        "summary": method.summary,
        "description": description,
        "tags": [_tag(method.name)],
        "responses": {},
    }
    if alias.body:
        body = {k: v for k, v in props.items() if k not in in_path}
        op["requestBody"] = {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        **params,
                        "properties": body,
                        "required": sorted(required - set(in_path)),
                    }
                }
            },
        }
    else:
        skipped = {"offset", "length"} if alias.stream else set()
        parameters += [
            {
                "name": name,
                "in": "query",
                "required": name in required,
                "description": prop.get("description", ""),
                "schema": prop,
            }
            for name, prop in props.items()
            if name not in in_path and name not in skipped
        ]
    if alias.stream:
        parameters.append(
            {
                "name": "inline",
                "in": "query",
                "required": False,
                "description": "1: Content-Disposition inline",
                "schema": {"type": "string"},
            }
        )
        from trainee.api.files import DOWNLOADS, LOG_MEDIA

        media = sorted({m.split(";")[0] for m in [*DOWNLOADS.values(), LOG_MEDIA]})
        op["responses"]["200"] = {"description": "the file", "content": {m: {} for m in media}}
    else:
        op["responses"].update(_ok(method.result_schema()))
    op["responses"].update(_errors())
    if parameters:
        op["parameters"] = parameters
    return {verb.lower(): {**op, "operationId": _op_id(alias, verb)} for verb in alias.verbs}


def _op_id(alias: HttpAlias, verb: str) -> str:
    return alias.operation if verb == alias.verbs[0] else f"{alias.operation}_{verb.lower()}"


_SSE: dict[str, Any] = {
    "get": {
        "operationId": "session_events",
        "summary": "A session's events as Server-Sent Events",
        "description": "Each event is sent with its id as the SSE `id:` and the event "
        "(id, kind, ts, session, data) as JSON `data:`; each kind's fields are in the "
        "schema `events_schema` returns. Reconnecting with the "
        "`Last-Event-ID` header (or `?since=`) resumes after that id with nothing "
        "lost. A named `ready` event opens the stream (without `since` its id is the "
        "current cursor: only newer events follow); a named `gap` event says events "
        "are no longer available. A comment is sent every 15 s as a heartbeat. Over the "
        "socket, `events_watch` sends the same events as notifications.",
        "tags": ["events"],
        "parameters": [
            {
                "name": "session",
                "in": "path",
                "required": True,
                "schema": {"type": "string", "pattern": SESSION_PATTERN},
            },
            {
                "name": "project_root",
                "in": "query",
                "required": False,
                "schema": {"type": "string"},
            },
            {
                "name": "since",
                "in": "query",
                "required": False,
                "schema": {"type": "integer", "minimum": 0},
            },
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
            },
        ],
        "responses": {},
    }
}


def build_openapi(registry: Registry) -> dict[str, Any]:
    """The whole document: every method, every alias, the event stream and ``/rpc``."""
    paths: dict[str, Any] = {}
    for method in registry:
        paths[f"/api/tools/{method.name}"] = _tool_operation(method)
    for alias in ALIASES:
        if alias.method in registry:
            item = paths.setdefault(alias.path, {})
            item.update(_alias_operations(alias, registry.get(alias.method)))
    sse = {"get": {**_SSE["get"], "responses": {}}}
    sse["get"]["responses"].update(_ok({"type": "string"}, "the event stream", "text/event-stream"))
    sse["get"]["responses"].update(_errors())
    paths[SSE_PATH] = sse
    paths["/rpc"] = {
        "post": {
            "operationId": "json_rpc",
            "summary": "JSON-RPC 2.0 (single or batch) over the same methods",
            "description": "Errors travel in the JSON-RPC answer (its `error.code`), "
            "with HTTP 200; only a body over the size limit is refused with 413.",
            "tags": ["rpc"],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": ["object", "array"]}}},
            },
            "responses": {
                **_ok({"type": ["object", "array"]}),
                "204": {"description": "only notifications were sent"},
                **{k: v for k, v in _errors().items() if k in ("401", "403", "413", "421")},
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "trainee daemon API",
            "version": trainee.__version__,
            "description": "Every method of trainee's registry as an HTTP tool (and by "
            "JSON-RPC), some also by their own URL, and a session's event stream. Every "
            "request needs the access token: `Authorization: Bearer <token>`, "
            "`X-Trainee-Token`, or the cookie the page gets from `trainee webui`.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}, {"tokenHeader": []}, {"cookie": []}],
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "tokenHeader": {"type": "apiKey", "in": "header", "name": "X-Trainee-Token"},
                "cookie": {"type": "apiKey", "in": "cookie", "name": TOKEN_COOKIE},
            },
            "schemas": {"Error": _ERROR_SCHEMA},
        },
        "paths": paths,
    }
