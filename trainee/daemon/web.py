"""The web dashboard's HTTP side: its pages and a session's live events (SSE).

Pages and their scripts are static files from ``webui/`` (no build step, no
secrets in them); everything they show comes from registry methods (``POST
/api/tools/{name}``, :mod:`trainee.daemon.http`) with the access cookie. The
event stream, the one API route that is no method, sends each event with its id
as the SSE ``id:``, so a browser that reconnects with ``Last-Event-ID`` misses
nothing: events still in the bus's window come from there, older ones from the
project's store, and a client that falls behind resumes from its last id the
same way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path
from typing import Any

import msgspec
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import Receive, Scope, Send

import trainee
from trainee import events as ev
from trainee.api import resolve
from trainee.api.context import CallContext, Services
from trainee.api.routes import SSE_PATH
from trainee.daemon.http import query_params
from trainee.errors import InvalidParams, TraineeError
from trainee.ids import canonical_session
from trainee.session.bus import EventBus, Subscription, chunks
from trainee.spec.wire import Event
from trainee.store.db import Store

log = logging.getLogger("trainee.daemon.web")

_STREAM_QUERY = {"project_root": {"type": "string"}, "since": {"type": "integer"}}
"""The event stream's query: what ``query_params`` converts (other names are ignored)."""

HEARTBEAT_SEC = 15.0
STORE_PAGE = 1000
SEND_TIMEOUT_SEC = 60.0


def find_webui_dir() -> Path | None:
    """``webui/`` shipped inside the package when installed, else the source tree's."""
    package = Path(trainee.__file__).resolve().parent
    for candidate in (package / "webui", package.parent / "webui"):
        if (candidate / "index.html").is_file():
            return candidate
    return None


def encode_events(events: Iterable[ev.Event | Event]) -> bytes:
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

    def __init__(self, services: Services, *, webui_dir: Path | None = None) -> None:
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
            Route(SSE_PATH, self.events, methods=["GET"]),
        ]

    def close(self) -> None:
        self.closing = True
        for sub in list(self._streams):
            sub.close()

    # -- helpers ---------------------------------------------------------------

    @property
    def bus(self) -> EventBus:
        return self.services.bus

    def _ctx(self) -> CallContext:
        return CallContext(services=self.services, transport="http")

    def _same_project(self, event: ev.Event, root: str) -> bool:
        project = ev.project_of(event)
        if project is None:
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

    # -- the event stream ----------------------------------------------------------

    async def events(self, request: Request) -> Response:
        """A session's events as SSE; resumes after ``Last-Event-ID`` (or ``?since=``)."""
        session = canonical_session(str(request.path_params["session"]))
        ctx = self._ctx()
        query = query_params(request, _STREAM_QUERY, frozenset())
        root = resolve.project_root(ctx, query.get("project_root"))
        header = request.headers.get("last-event-id")
        since = query.get("since")
        if header:
            try:
                since = int(header)
            except ValueError:
                raise InvalidParams(
                    f"Last-Event-ID must be an event id, got {header[:40]!r}",
                    {"field": "Last-Event-ID"},
                ) from None
        if since is not None and since < 0:
            raise InvalidParams(f"since must be >= 0, got {since}", {"field": "since"})
        store = await resolve.project_store(ctx, root, required=False)
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
                    for part in chunks(mine):
                        yield encode_events(part)
                        cursor = part[-1].id
                first = False
                async for batch in sub.batches():
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


__all__ = ["WebUI", "control_frame", "encode_events", "find_webui_dir"]
