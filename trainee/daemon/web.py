"""The web dashboard's HTTP side: pages, live events (SSE), round logs, downloads, OpenAPI.

Pages and their scripts are static files from ``webui/`` (no build step, no
secrets in them); everything they show comes from ``/api`` with the access
cookie. The event stream sends each event with its id as the SSE ``id:``, so
a browser that reconnects with ``Last-Event-ID`` misses nothing: events still
in the bus's window come from there, older ones from the project's store, and
a client that falls behind resumes from its last id the same way.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import msgspec
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

import trainee
from trainee.api.context import CallContext, Services
from trainee.api.project_methods import project_root_of
from trainee.api.registry import Registry
from trainee.daemon.http import TOKEN_COOKIE, error_response, json_response
from trainee.errors import InvalidParams, NotFound, TraineeError
from trainee.ids import (
    ROUND_PATTERN,
    SESSION_PATTERN,
    canonical_session,
    parse_round,
    parse_session,
)
from trainee.launch.layout import ProjectLayout
from trainee.session.bus import EventBus, Subscription
from trainee.session.manager import SessionManager
from trainee.spec.wire import Event
from trainee.store.db import Store

log = logging.getLogger("trainee.daemon.web")

ROUND_LOG_RE = re.compile(r"^round-[0-9]{4,12}\.log$")
DOWNLOADS: dict[str, str] = {
    "report.md": "text/markdown; charset=utf-8",
    "result_ledger.csv": "text/csv; charset=utf-8",
    "result_ledger.jsonl": "application/x-ndjson",
    "research_state.json": "application/json",
    "report_chart.svg": "image/svg+xml",
}
"""The files of a session's artifacts folder that can be downloaded (plus round logs)."""

HEARTBEAT_SEC = 15.0
STORE_PAGE = 1000
BATCH_MAX = 500
SEND_TIMEOUT_SEC = 60.0
MAX_TAIL_LINES = 10_000
MAX_PROMPT_BODY = 1024 * 1024
_DOWNLOAD_CSP = "default-src 'none'; style-src 'unsafe-inline'; sandbox"


def find_webui_dir() -> Path | None:
    """``webui/`` shipped inside the package when installed, else the source tree's."""
    package = Path(trainee.__file__).resolve().parent
    for candidate in (package / "webui", package.parent / "webui"):
        if (candidate / "index.html").is_file():
            return candidate
    return None


def encode_events(events: Iterable[Event]) -> bytes:
    """SSE frames, one per event: ``id: <event id>`` and the event as JSON."""
    out = bytearray()
    for event in events:
        out += b"id: %d\ndata: " % event.id
        out += msgspec.json.encode(event)
        out += b"\n\n"
    return bytes(out)


def control_frame(kind: str, data: dict[str, Any], event_id: int | None = None) -> bytes:
    """A named SSE event (``ready``, ``gap``) the page handles apart from session events."""
    head = b"id: %d\n" % event_id if event_id is not None else b""
    return head + b"event: " + kind.encode() + b"\ndata: " + msgspec.json.encode(data) + b"\n\n"


class WebUI:
    """The dashboard's routes; ``close()`` ends every open event stream (daemon shutdown)."""

    def __init__(
        self, registry: Registry, services: Services, *, webui_dir: Path | None = None
    ) -> None:
        self.registry = registry
        self.services = services
        self.webui_dir = webui_dir or find_webui_dir()
        if self.webui_dir is None:
            log.warning("the web UI files are missing: the dashboard is off, the API is on")
        static: list[BaseRoute] = (
            [Mount("/static", app=_NoCache(StaticFiles(directory=self.webui_dir)), name="static")]
            if self.webui_dir is not None
            else []
        )
        self.closing = False
        self._streams: set[Subscription] = set()
        self._project_cache: dict[str, str] = {}
        self.routes: list[BaseRoute] = [
            Route("/", self.page, methods=["GET"]),
            Route("/llm-test", self.page, methods=["GET"]),
            Route("/favicon.ico", self.favicon, methods=["GET"]),
            *static,
            Route("/api/openapi.json", self.openapi, methods=["GET"]),
            Route("/api/projects", self.projects, methods=["GET"]),
            Route("/api/sessions/{session}/events", self.events, methods=["GET"]),
            Route("/api/sessions/{session}/rounds/{round}/log", self.round_log, methods=["GET"]),
            Route(
                "/api/sessions/{session}/rounds/{round}/metrics",
                self.round_metrics,
                methods=["GET"],
            ),
            Route("/api/sessions/{session}/files/{name}", self.download, methods=["GET"]),
            Route("/api/runtime/system-prompt", self.system_prompt, methods=["GET", "PUT", "POST"]),
        ]

    def close(self) -> None:
        self.closing = True
        for sub in list(self._streams):
            sub.close()

    # -- helpers ---------------------------------------------------------------

    @property
    def bus(self) -> EventBus:
        return self.services.bus

    @property
    def manager(self) -> SessionManager:
        manager = self.services.extra.get("manager")
        assert isinstance(manager, SessionManager), "the daemon has no session manager"
        return manager

    def _ctx(self) -> CallContext:
        return CallContext(services=self.services, transport="http")

    def _root(self, request: Request) -> str:
        return project_root_of(self._ctx(), request.query_params.get("project_root") or None)

    @staticmethod
    def _session(request: Request) -> str:
        """The canonical id (``session-0001``) of the path's session (``1``, ``0001`` too)."""
        return canonical_session(str(request.path_params["session"]))

    @staticmethod
    def _round(request: Request) -> int:
        return parse_round(str(request.path_params["round"]))

    @staticmethod
    def _int_arg(request: Request, name: str, default: int | None) -> int | None:
        raw = request.query_params.get(name)
        if raw is None or raw == "":
            return default
        try:
            return int(raw)
        except ValueError:
            raise InvalidParams(
                f"{name} must be an integer, got {raw!r}", {"field": name, "reason": "not an int"}
            ) from None

    async def _store(self, root: str) -> Store | None:
        """The project's store, or None when it has no database yet (nothing is created)."""
        if not ProjectLayout.for_root(root).database.exists():
            return None
        return await self.manager.store_for(root)

    def _same_project(self, event: Event, root: str) -> bool:
        project = event.data.get("project")
        if not isinstance(project, str):
            return False
        if project == root:
            return True
        real = self._project_cache.get(project)
        if real is None:
            real = os.path.realpath(project)
            if len(self._project_cache) < 1024:
                self._project_cache[project] = real
        return real == root

    # -- pages -------------------------------------------------------------------

    async def page(self, request: Request) -> Response:
        if self.webui_dir is None:
            return Response(
                "The web UI files are not installed; the HTTP API is at /api.\n",
                status_code=404,
                media_type="text/plain; charset=utf-8",
            )
        return FileResponse(
            self.webui_dir / "index.html",
            media_type="text/html; charset=utf-8",
            headers={"Cache-Control": "no-cache"},
        )

    async def favicon(self, request: Request) -> Response:
        if self.webui_dir is None:
            return Response(status_code=404)
        return FileResponse(self.webui_dir / "favicon.svg", media_type="image/svg+xml")

    # -- API routes ----------------------------------------------------------------

    async def openapi(self, request: Request) -> Response:
        return json_response(build_openapi(self.registry))

    async def projects(self, request: Request) -> Response:
        """Projects the daemon knows: the bound one, those it ran sessions in, running ones."""
        manager = self.manager
        running = manager.running_sessions()
        bound = str(self.services.project_root) if self.services.project_root else None
        roots: list[str] = []
        for root in [bound, *manager.known_projects(), *(r.project_root for r in running)]:
            if root and root not in roots:
                roots.append(root)
        projects = [
            {
                "root": root,
                "name": os.path.basename(root.rstrip("/")) or root,
                "bound": root == bound,
                "exists": os.path.isdir(root),
                "configured": os.path.isfile(os.path.join(root, ".trainee", "project.yaml")),
                "running": [r.id for r in running if r.project_root == root],
            }
            for root in roots
        ]
        return json_response({"bound": bound, "projects": projects})

    async def round_log(self, request: Request) -> Response:
        """A round's log from ``offset`` (negative: from the end) or its last ``tail`` lines."""
        try:
            session = self._session(request)
            round_ = self._round(request)
            root = self._root(request)
            tail = self._int_arg(request, "tail", None)
            params: dict[str, Any] = {"session": session, "round": round_, "project_root": root}
            if tail is not None:
                if not 1 <= tail <= MAX_TAIL_LINES:
                    raise InvalidParams(
                        f"tail must be between 1 and {MAX_TAIL_LINES} lines, got {tail}",
                        {"field": "tail"},
                    )
                span = min(16 * 2**20, max(64 * 1024, tail * 512))
                params.update(offset=-span, length=span)
            else:
                for name in ("offset", "length"):
                    value = self._int_arg(request, name, None)
                    if value is not None:
                        params[name] = value
            result = await self.registry.call("logs_tail", params, self._ctx())
        except TraineeError as exc:
            return error_response(exc)
        data = msgspec.to_builtins(result)
        if tail is not None:
            _keep_last_lines(data, tail)
        return json_response(data)

    async def round_metrics(self, request: Request) -> Response:
        """Every metric point of one round as ``[name, value, step, seq]``."""
        try:
            session = self._session(request)
            round_ = self._round(request)
            root = self._root(request)
            store = await self._store(root)
            if store is None:
                raise NotFound(f"no session has run in {root}", {"project_root": root})
            points = await store.points(parse_session(session), round_)
        except TraineeError as exc:
            return error_response(exc)
        return json_response(
            {
                "session": session,
                "round": round_,
                "points": [[p.name, p.value, p.step, p.seq] for p in points],
            }
        )

    async def download(self, request: Request) -> Response:
        """One file of the session's artifacts folder, by a name from a fixed list."""
        try:
            session = self._session(request)
            name = str(request.path_params["name"])
            if name not in DOWNLOADS and not ROUND_LOG_RE.fullmatch(name):
                raise NotFound(
                    f"no downloadable file {name!r}; choose one of {', '.join(DOWNLOADS)} "
                    "or round-NNNN.log",
                    {"field": "name", "reason": "not in the allow-list"},
                )
            root = self._root(request)
            store = await self._store(root)
            if store is None:
                raise NotFound(f"no session has run in {root}", {"project_root": root})
            record = await store.get_session(parse_session(session))
            folder = ProjectLayout.for_root(root, record.env).session(record.index).artifacts
            path = folder / name
            real_folder = os.path.realpath(folder)
            real = os.path.realpath(path)
            if os.path.dirname(real) != real_folder or not os.path.isfile(real):
                raise NotFound(
                    f"{name} of {session} is not there (yet): {path}",
                    {"path": str(path), "hint": "session_report writes report.md and the ledgers"},
                )
        except TraineeError as exc:
            return error_response(exc)
        media = DOWNLOADS.get(name, "text/plain; charset=utf-8")
        return FileResponse(
            real,
            media_type=media,
            filename=f"{session}-{name}",
            content_disposition_type="inline"
            if request.query_params.get("inline")
            else "attachment",
            headers={"Content-Security-Policy": _DOWNLOAD_CSP, "Cache-Control": "no-cache"},
        )

    async def system_prompt(self, request: Request) -> Response:
        """``GET`` the global decision system prompt; ``PUT {"prompt": ...}`` replaces it."""
        try:
            if request.method == "GET":
                result = await self.registry.call("runtime_system_prompt_get", {}, self._ctx())
            else:
                raw = b""
                async for chunk in request.stream():
                    raw += chunk
                    if len(raw) > MAX_PROMPT_BODY:
                        raise InvalidParams(
                            f"request body too large ({MAX_PROMPT_BODY} bytes max)",
                            {"field": "prompt"},
                        )
                try:
                    body = msgspec.json.decode(raw)
                except msgspec.DecodeError as exc:
                    raise InvalidParams(f"request body is not valid JSON: {exc}") from None
                result = await self.registry.call("runtime_system_prompt_update", body, self._ctx())
        except TraineeError as exc:
            return error_response(exc)
        return json_response(result)

    # -- the event stream ----------------------------------------------------------

    async def events(self, request: Request) -> Response:
        """A session's events as SSE; resumes after ``Last-Event-ID`` (or ``?since=``)."""
        try:
            session = self._session(request)
            root = self._root(request)
            header = request.headers.get("last-event-id")
            since = self._int_arg(request, "since", None)
            if header:
                try:
                    since = int(header)
                except ValueError:
                    raise InvalidParams(
                        f"Last-Event-ID must be an event id, got {header!r}",
                        {"field": "Last-Event-ID"},
                    ) from None
            if since is not None and since < 0:
                raise InvalidParams(f"since must be >= 0, got {since}", {"field": "since"})
            store = await self._store(root)
        except TraineeError as exc:
            return error_response(exc)
        return EventSourceResponse(
            self._stream(root, session, since, store),
            ping=HEARTBEAT_SEC,
            send_timeout=SEND_TIMEOUT_SEC,
            headers={"Cache-Control": "no-store"},
        )

    async def _stream(
        self, root: str, session: str, since: int | None, store: Store | None
    ) -> AsyncIterator[bytes]:
        """Backlog (store, then the bus window), then live events; resume after a drop."""
        cursor = since
        first = True
        while not self.closing:
            sub, backlog, gap = self.bus.subscribe(since=cursor, session=session)
            oldest = self.bus.oldest_id
            self._streams.add(sub)
            try:
                if cursor is None:
                    cursor = self.bus.last_id
                    yield control_frame("ready", {"cursor": cursor, "session": session}, cursor)
                else:
                    if first:
                        yield control_frame("ready", {"cursor": cursor, "session": session})
                    if gap:
                        if store is None:
                            yield control_frame("gap", {"after": cursor, "oldest": oldest})
                        else:
                            while page := await _stored_page(store, session, cursor, oldest):
                                yield encode_events(page)
                                cursor = page[-1].id
                    mine = [e for e in backlog if self._same_project(e, root)]
                    for start in range(0, len(mine), BATCH_MAX):
                        part = mine[start : start + BATCH_MAX]
                        yield encode_events(part)
                        cursor = part[-1].id
                first = False
                async for batch in _batches(sub):
                    mine = [e for e in batch if self._same_project(e, root)]
                    if mine:
                        yield encode_events(mine)
                    cursor = batch[-1].id
                if not sub.dropped:
                    return  # closed: the daemon is stopping
                log.debug("%s stream fell behind after id %s; resuming", session, cursor)
            finally:
                self._streams.discard(sub)
                sub.close()


async def _stored_page(store: Store, session: str, cursor: int, below: int) -> list[Event]:
    """The next stored events of ``session`` with ``cursor < id < below`` ([] when done)."""
    try:
        page = await store.events_since(cursor, session=session, limit=STORE_PAGE)
    except TraineeError:
        log.exception("reading stored events of %s failed", session)
        return []
    return [e for e in page if e.id < below]


async def _batches(sub: Subscription) -> AsyncIterator[list[Event]]:
    """Live events in batches: wait for one, then take what is already queued."""
    while True:
        try:
            batch = [await sub.receive()]
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            return
        while len(batch) < BATCH_MAX:
            try:
                batch.append(sub.receive_nowait())
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
        yield batch


def _keep_last_lines(data: dict[str, Any], count: int) -> None:
    """Trim a logs_tail answer to its last ``count`` lines, moving ``offset`` to match."""
    text: str = data["data"]
    at_start = data["offset"] == 0
    lines = text.split("\n")
    ends_with_newline = text.endswith("\n")
    if ends_with_newline:
        lines.pop()
    if not at_start and lines:
        lines = lines[1:]  # the first line read from mid-file may be partial
    kept = lines[-count:]
    new_text = "\n".join(kept) + ("\n" if ends_with_newline and kept else "")
    dropped = text[: len(text) - len(new_text)] if new_text else text
    data["offset"] = data["offset"] + len(dropped.encode("utf-8"))
    data["data"] = new_text


# -- the OpenAPI document ----------------------------------------------------------------

_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "integer"},
                "message": {"type": "string"},
                "data": {"type": "object"},
            },
            "required": ["code", "message"],
        }
    },
    "required": ["error"],
}
_ERROR_REF = {"$ref": "#/components/schemas/Error"}


def _errors(*statuses: int) -> dict[str, Any]:
    reasons = {
        400: "invalid params or body",
        401: "missing or wrong access token",
        403: "foreign Origin",
        404: "not found",
        421: "foreign Host",
        422: "the request was understood but cannot be done (InvalidState, ConfigError, ...)",
        500: "internal error (incident id in the daemon log)",
    }
    return {
        str(s): {
            "description": reasons[s],
            "content": {"application/json": {"schema": _ERROR_REF}},
        }
        for s in statuses
    }


def _ok(schema: dict[str, Any], description: str = "OK", media: str = "application/json") -> Any:
    return {"200": {"description": description, "content": {media: {"schema": schema}}}}


def _param(name: str, where: str, schema: dict[str, Any], description: str, required: bool) -> Any:
    return {
        "name": name,
        "in": where,
        "required": required,
        "description": description,
        "schema": schema,
    }


_SESSION_PARAM = _param(
    "session",
    "path",
    {"type": "string", "pattern": SESSION_PATTERN},
    "session id: session-0001, 0001 or 1",
    True,
)
_ROUND_PARAM = _param(
    "round",
    "path",
    {"type": "string", "pattern": ROUND_PATTERN},
    "round number: 1, 0001 or round-0001",
    True,
)
_ROOT_PARAM = _param(
    "project_root",
    "query",
    {"type": "string"},
    "absolute project folder (default: the project the daemon is bound to)",
    False,
)


def _tag(name: str) -> str:
    head = name.split("_", 1)[0]
    return {"runs": "loop", "session": "loop", "tunables": "project", "llm": "runtime"}.get(
        head, head
    )


def build_openapi(registry: Registry) -> dict[str, Any]:
    """OpenAPI 3.1 for the daemon: one ``POST /api/tools/<name>`` per registry method
    (its params schema is the body, its result schema the ``result``), plus the
    dashboard's stream, log, metrics and download routes."""
    paths: dict[str, Any] = {}
    for method in registry:
        description = method.description or method.summary
        paths[f"/api/tools/{method.name}"] = {
            "post": {
                "operationId": method.name,
                "summary": method.summary,
                "description": description,
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
                    **_errors(400, 401, 403, 404, 422, 500),
                },
            }
        }
    paths["/api/tools"] = {
        "get": {
            "operationId": "tools_schemas",
            "summary": "OpenAI-style function schemas of every method (or ?name=)",
            "tags": ["tools"],
            "parameters": [_param("name", "query", {"type": "string"}, "only this method", False)],
            "responses": {
                **_ok({"type": "array", "items": {"type": "object"}}),
                **_errors(401, 404),
            },
        }
    }
    paths["/rpc"] = {
        "post": {
            "operationId": "json_rpc",
            "summary": "JSON-RPC 2.0 (single or batch) over the same methods",
            "tags": ["rpc"],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": ["object", "array"]}}},
            },
            "responses": {
                **_ok({"type": ["object", "array"]}),
                "204": {"description": "only notifications were sent"},
                **_errors(401, 403),
            },
        }
    }
    paths["/api/sessions/{session}/events"] = {
        "get": {
            "operationId": "session_events",
            "summary": "A session's events as Server-Sent Events",
            "description": "Each event is sent with its id as the SSE `id:` and the event "
            "(id, kind, ts, session, data) as JSON `data:`. Reconnecting with the "
            "`Last-Event-ID` header (or `?since=`) resumes after that id with nothing "
            "lost. A named `ready` event opens the stream (without `since` its id is the "
            "current cursor: only newer events follow); a named `gap` event says events "
            "are no longer available. A comment is sent every 15 s as a heartbeat.",
            "tags": ["loop"],
            "parameters": [
                _SESSION_PARAM,
                _ROOT_PARAM,
                _param("since", "query", {"type": "integer", "minimum": 0}, "resume after", False),
                _param("Last-Event-ID", "header", {"type": "string"}, "resume after (SSE)", False),
            ],
            "responses": {
                **_ok({"type": "string"}, "the event stream", "text/event-stream"),
                **_errors(400, 401),
            },
        }
    }
    paths["/api/sessions/{session}/rounds/{round}/log"] = {
        "get": {
            "operationId": "round_log",
            "summary": "A round's log from a byte offset, or its last lines (as logs_tail)",
            "tags": ["logs"],
            "parameters": [
                _SESSION_PARAM,
                _ROUND_PARAM,
                _ROOT_PARAM,
                _param("offset", "query", {"type": "integer"}, "negative: from the end", False),
                _param("length", "query", {"type": "integer", "minimum": 0}, "bytes", False),
                _param(
                    "tail",
                    "query",
                    {"type": "integer", "minimum": 1, "maximum": MAX_TAIL_LINES},
                    "only the last N lines",
                    False,
                ),
            ],
            "responses": {
                **_ok(registry.get("logs_tail").result_schema()),
                **_errors(400, 401, 404),
            },
        }
    }
    paths["/api/sessions/{session}/rounds/{round}/metrics"] = {
        "get": {
            "operationId": "round_metrics",
            "summary": "Every metric point of a round as [name, value, step, seq]",
            "tags": ["loop"],
            "parameters": [_SESSION_PARAM, _ROUND_PARAM, _ROOT_PARAM],
            "responses": {
                **_ok(
                    {
                        "type": "object",
                        "properties": {
                            "session": {"type": "string"},
                            "round": {"type": "integer"},
                            "points": {"type": "array", "items": {"type": "array"}},
                        },
                    }
                ),
                **_errors(400, 401, 404),
            },
        }
    }
    paths["/api/sessions/{session}/files/{name}"] = {
        "get": {
            "operationId": "session_file",
            "summary": "Download report.md, a ledger, the research state, the chart or a round log",
            "tags": ["loop"],
            "parameters": [
                _SESSION_PARAM,
                _param(
                    "name",
                    "path",
                    {
                        "anyOf": [
                            {"enum": list(DOWNLOADS)},
                            {"type": "string", "pattern": ROUND_LOG_RE.pattern},
                        ]
                    },
                    "file name (a fixed list)",
                    True,
                ),
                _ROOT_PARAM,
            ],
            "responses": {
                "200": {
                    "description": "the file",
                    "content": {m.split(";")[0]: {} for m in DOWNLOADS.values()},
                },
                **_errors(400, 401, 404),
            },
        }
    }
    paths["/api/projects"] = {
        "get": {
            "operationId": "projects_known",
            "summary": "Projects the daemon knows (bound, with sessions, running)",
            "tags": ["project"],
            "responses": {**_ok({"type": "object"}), **_errors(401)},
        }
    }
    prompt_schema = registry.get("runtime_system_prompt_get").result_schema()
    paths["/api/runtime/system-prompt"] = {
        "get": {
            "operationId": "system_prompt_read",
            "summary": "The global decision system prompt",
            "tags": ["runtime"],
            "responses": {**_ok(prompt_schema), **_errors(401)},
        },
        "put": {
            "operationId": "system_prompt_write",
            "summary": "Replace the global decision system prompt (empty: the default)",
            "tags": ["runtime"],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": registry.get("runtime_system_prompt_update").params_schema()
                    }
                },
            },
            "responses": {**_ok(prompt_schema), **_errors(400, 401, 403)},
        },
    }
    paths["/api/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document",
            "tags": ["tools"],
            "responses": {**_ok({"type": "object"}), **_errors(401)},
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "trainee daemon API",
            "version": trainee.__version__,
            "description": "Every method of trainee's registry as an HTTP tool, plus the web "
            "dashboard's streams and downloads. Every request needs the access token: "
            "`Authorization: Bearer <token>`, `X-Trainee-Token`, or the cookie the page "
            "gets from `trainee webui`.",
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


class _NoCache:
    """Static files revalidated on every load (ETag), so a new version shows at once."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Any]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_no_cache(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *[(k, v) for k, v in message.get("headers", []) if k != b"cache-control"],
                    (b"cache-control", b"no-cache"),
                ]
            await send(message)

        await self.app(scope, receive, send_no_cache)


__all__ = [
    "DOWNLOADS",
    "WebUI",
    "build_openapi",
    "control_frame",
    "encode_events",
    "find_webui_dir",
]
