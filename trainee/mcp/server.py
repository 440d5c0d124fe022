"""trainee as a Model Context Protocol server, over any Backend.

Tools: every method the daemon serves, with the JSON schema and description
its ``tools_list`` gives (the daemon answering decides, not this process). A
method's error comes back as a tool error (``isError``) carrying the daemon's
message, and its code and data in ``structuredContent.error``.

Resources: session reports and round logs,

    trainee://<project_root>/sessions/<session>/report          markdown
    trainee://<project_root>/sessions/<session>/rounds/<n>/log  text

listed for the daemon's bound project and every project a call named in this
server's life, readable for any project (the resource templates). Subscribing
to one watches its session's events on the daemon and sends
``notifications/resources/updated`` when a round of that session finishes (a
log: when its round starts or finishes) and when the session finishes; on
2026-07-28 connections the same updates travel on ``subscriptions/listen``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import anyio
import mcp_types as types
from anyio.abc import TaskGroup, TaskStatus
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError

import trainee
from trainee import events as ev
from trainee.errors import InvalidParams, TraineeError
from trainee.mcp.backend import GAP, Backend

__all__ = [
    "LOG_TEMPLATE",
    "REPORT_TEMPLATE",
    "ResourceRef",
    "TraineeMcp",
    "log_uri",
    "parse_uri",
    "report_uri",
]

log = logging.getLogger("trainee.mcp")

SCHEME = "trainee://"
REPORT_TEMPLATE = "trainee://{+project_root}/sessions/{session}/report"
LOG_TEMPLATE = "trainee://{+project_root}/sessions/{session}/rounds/{round}/log"
WATCHED_TYPES = (ev.RoundStartedEvent, ev.RoundFinishedEvent, ev.SessionFinishedEvent)
"""The events that change a resource (:meth:`ResourceRef.concerns`)."""
WATCHED = tuple(ev.kind_of(t) for t in WATCHED_TYPES)
LOG_READ_BYTES = 1 << 20
"""A log resource is the last MiB of the log; ``logs_tail`` reads any part."""

INSTRUCTIONS = """\
trainee runs the outer loop of training for a project: run, watch, measure, decide, repeat.
Pass project_root as an absolute path (or relative to where `trainee mcp` runs).
A typical session: project_get (or project_init + project_prepare), project_doctor,
loop_dry_run, loop_start, then loop_get until the session is no longer running, then
read the session's report resource (trainee://<project_root>/sessions/<session>/report)
or call session_report. Subscribe to the report to be told when rounds finish."""

_URI = re.compile(
    r"^trainee://(?P<root>/.*)/sessions/(?P<session>[^/]+)/"
    r"(?:report|rounds/(?P<round>[0-9]+)/log)$"
)

Send = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class ResourceRef:
    """A parsed resource URI: a session's report (``round`` None) or a round's log."""

    uri: str
    project_root: str
    session: str
    round: int | None = None

    def concerns(self, event: ev.Event | None) -> bool:
        """Whether ``event`` (None: the watch was cut off, events were lost) may have
        changed this resource."""
        if event is None:
            return True
        if not self.of_project(event):
            return False
        if isinstance(event, ev.SessionFinishedEvent):
            return True
        if self.round is None:
            return isinstance(event, ev.RoundFinishedEvent)
        return (
            isinstance(event, ev.RoundStartedEvent | ev.RoundFinishedEvent)
            and event.data.round == self.round
        )

    def ends_with(self, event: ev.Event | None) -> bool:
        """Whether nothing changes this resource after ``event``."""
        return isinstance(event, ev.SessionFinishedEvent) and self.of_project(event)

    def of_project(self, event: ev.Event) -> bool:
        project = ev.project_of(event)
        return project is not None and (
            project == self.project_root
            or os.path.realpath(project) == os.path.realpath(self.project_root)
        )


def report_uri(project_root: str, session: str) -> str:
    return f"{SCHEME}{quote(project_root)}/sessions/{quote(session, safe='')}/report"


def log_uri(project_root: str, session: str, round: int) -> str:
    return f"{SCHEME}{quote(project_root)}/sessions/{quote(session, safe='')}/rounds/{round}/log"


def parse_uri(uri: str) -> ResourceRef:
    """The resource ``uri`` names; InvalidParams when it is not one of trainee's."""
    match = _URI.match(uri)
    if match is None:
        raise InvalidParams(
            f"not a trainee resource: {uri!r} (expected {REPORT_TEMPLATE} or {LOG_TEMPLATE})",
            {"field": "uri", "reason": "unknown resource"},
        )
    number = match["round"]
    return ResourceRef(
        uri=uri,
        project_root=unquote(match["root"]),
        session=unquote(match["session"]),
        round=int(number) if number is not None else None,
    )


@asynccontextmanager
async def _lifespan(_server: Server[TaskGroup]) -> AsyncIterator[TaskGroup]:
    """The task group subscriptions run in, for as long as the server serves."""
    async with anyio.create_task_group() as tg:
        yield tg
        tg.cancel_scope.cancel()


Context = ServerRequestContext[TaskGroup, Any]


class TraineeMcp:
    """trainee's MCP server over ``backend``; ``server`` is the SDK's lowlevel Server.

    ``base_dir`` (the stdio server's working directory) resolves a relative
    ``project_root`` or ``cwd`` in tool arguments; without it they pass as given.
    """

    def __init__(self, backend: Backend, *, base_dir: Path | None = None) -> None:
        self.backend = backend
        self.base_dir = base_dir
        self.projects: set[str] = set()
        self._subscriptions: dict[tuple[str, str], anyio.CancelScope] = {}
        self.server: Server[TaskGroup] = Server(
            "trainee",
            version=trainee.__version__,
            title="trainee",
            instructions=INSTRUCTIONS,
            lifespan=_lifespan,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_list_resource_templates=self._list_templates,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen,
        )

    async def serve_stdio(self) -> None:
        """Serve one client on this process's stdin and stdout until it hangs up."""
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    # -- tools -----------------------------------------------------------------

    async def _list_tools(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        schemas = await self._call("tools_list", {})
        tools = []
        for entry in schemas:
            function = entry.get("function", entry)
            tools.append(
                types.Tool(
                    name=function["name"],
                    description=function.get("description"),
                    input_schema=function.get("parameters") or {"type": "object", "properties": {}},
                )
            )
        return types.ListToolsResult(tools=tools)

    async def _call_tool(
        self, ctx: Context, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        args = dict(params.arguments or {})
        self._resolve_paths(args)
        try:
            result = await self.backend.call(params.name, args)
        except TraineeError as exc:
            return _tool_error(exc)
        self._remember(args.get("project_root"))
        if isinstance(result, dict):
            self._remember(result.get("project_root"))
        return types.CallToolResult(
            content=[types.TextContent(text=json.dumps(result, ensure_ascii=False))],
            structured_content=result if isinstance(result, dict) else None,
        )

    def _resolve_paths(self, args: dict[str, Any]) -> None:
        if self.base_dir is None:
            return
        for key in ("project_root", "cwd"):
            value = args.get(key)
            if isinstance(value, str) and value and not os.path.isabs(value):
                expanded = os.path.expanduser(value)
                args[key] = os.path.normpath(os.path.join(self.base_dir, expanded))

    def _remember(self, project_root: Any) -> None:
        if isinstance(project_root, str) and os.path.isabs(project_root):
            self.projects.add(project_root)

    # -- resources ---------------------------------------------------------------

    async def _list_resources(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        roots = set(self.projects)
        hello = await self._call("daemon_hello", {})
        if hello.get("project_root"):
            roots.add(str(hello["project_root"]))
        resources: list[types.Resource] = []
        seen: set[str] = set()
        for given in sorted(roots):
            try:
                listing = await self.backend.call(
                    "runs_list", {"project_root": given, "limit": 10000}
                )
            except TraineeError:
                continue  # no session there yet, or the folder is gone
            root = str(listing["project_root"])
            if root in seen:
                continue
            seen.add(root)
            for s in listing["sessions"]:
                resources.append(
                    types.Resource(
                        uri=report_uri(root, s["id"]),
                        name=f"{s['id']} report",
                        title=f"{Path(root).name} {s['id']} report",
                        description=f"{root}: {s['id']} ({s.get('status')}, policy {s.get('policy')})",
                        mime_type="text/markdown",
                    )
                )
            for r in listing["rounds"]:
                resources.append(
                    types.Resource(
                        uri=log_uri(root, r["session_id"], r["index"]),
                        name=f"{r['session_id']} round {r['index']} log",
                        title=f"{Path(root).name} {r['session_id']} round {r['index']} log",
                        description=f"{root}: {r['session_id']} round {r['index']} ({r.get('status')})",
                        mime_type="text/plain",
                    )
                )
        return types.ListResourcesResult(resources=resources)

    async def _list_templates(
        self, ctx: Context, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=REPORT_TEMPLATE,
                    name="session report",
                    description="A session's report (markdown), written afresh on each read.",
                    mime_type="text/markdown",
                ),
                types.ResourceTemplate(
                    uri_template=LOG_TEMPLATE,
                    name="round log",
                    description="A round's captured output (its last MiB; logs_tail reads any part).",
                    mime_type="text/plain",
                ),
            ]
        )

    async def _read_resource(
        self, ctx: Context, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        ref = _parse(params.uri)
        where = {"session": ref.session, "project_root": ref.project_root}
        if ref.round is None:
            report = await self._call("session_report", where)
            text, mime = str(report["markdown"]), "text/markdown"
        else:
            tail = await self._call(
                "logs_tail",
                {**where, "round": ref.round, "offset": -LOG_READ_BYTES, "length": LOG_READ_BYTES},
            )
            text, mime = str(tail["data"]), "text/plain"
            if tail["offset"] > 0:
                text = (
                    f"[the first {tail['offset']} bytes of {tail['path']} are left out; "
                    f"logs_tail reads them]\n{text}"
                )
        self._remember(ref.project_root)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=params.uri, mime_type=mime, text=text)]
        )

    # -- subscriptions -----------------------------------------------------------

    async def _subscribe(
        self, ctx: Context, params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        ref = _parse(params.uri)
        key = (_connection_key(ctx), params.uri)
        if key not in self._subscriptions:
            session = ctx.session

            async def send(uri: str) -> None:
                await session.send_resource_updated(uri)

            scope = self._subscriptions[key] = anyio.CancelScope()
            try:
                await self._start(ctx.lifespan_context, ref, send, scope)
            except BaseException:
                if self._subscriptions.get(key) is scope:
                    del self._subscriptions[key]
                raise
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: Context, params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        scope = self._subscriptions.pop((_connection_key(ctx), params.uri), None)
        if scope is not None:
            scope.cancel()
        return types.EmptyResult()

    async def _listen(
        self, ctx: Context, params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """``subscriptions/listen`` (2026-07-28): watch the named resources while the stream lasts."""
        refs = [_parse(uri) for uri in params.notifications.resource_subscriptions or ()]
        bus = InMemorySubscriptionBus()

        async def send(uri: str) -> None:
            await bus.publish(ResourceUpdated(uri=uri))

        async with anyio.create_task_group() as tg:
            for ref in refs:
                await self._start(tg, ref, send, anyio.CancelScope())
            try:
                result = await ListenHandler(bus)(ctx, params)
            finally:
                tg.cancel_scope.cancel()
        return result

    async def _start(
        self, tg: TaskGroup, ref: ResourceRef, send: Send, scope: anyio.CancelScope
    ) -> None:
        """Start a subscription in ``tg`` (``scope`` cancels it), returning once its watch is live.

        A subscription that cannot start fails the request that asked for it.
        """
        try:
            await tg.start(self._serve_subscription, ref, send, scope)
        except TraineeError as exc:
            raise _mcp_error(exc) from None

    async def _serve_subscription(
        self,
        ref: ResourceRef,
        send: Send,
        scope: anyio.CancelScope,
        *,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Send an update for each event that concerns ``ref`` until the session ends."""
        with scope:
            started = False
            try:
                while True:  # a watch the daemon cut off (it fell behind) is renewed
                    async with self.backend.watch(ref.session, WATCHED) as events:
                        if not started:
                            task_status.started()
                            started = True
                        async for raw in events:
                            event = _typed(raw)
                            if event is _UNREADABLE:
                                continue
                            if ref.concerns(event):
                                await send(ref.uri)
                            if ref.ends_with(event):
                                return
            except Exception as exc:
                if not started:
                    raise  # the subscribe request fails with it
                # The daemon went away or the client did: this subscription ends, the
                # server (and every other subscription) goes on.
                log.info("subscription to %s ended: %s", ref.uri, exc)
            finally:
                for key, value in list(self._subscriptions.items()):
                    if value is scope:
                        del self._subscriptions[key]

    # -- helpers -----------------------------------------------------------------

    async def _call(self, method: str, params: dict[str, Any]) -> Any:
        """A backend call whose error becomes the MCP error of the request."""
        try:
            return await self.backend.call(method, params)
        except TraineeError as exc:
            raise _mcp_error(exc) from None


_UNREADABLE = ev.NoteEvent(id=0, ts=0.0, kind="note.unreadable")


def _typed(raw: dict[str, Any]) -> ev.Event | None:
    """A watched event as its Struct; None for the end of a watch the daemon cut off
    (GAP), _UNREADABLE (logged) for one that is not an event of this version."""
    if raw.get("kind") == GAP["kind"]:
        return None
    try:
        return ev.decode_event(raw)
    except ev.InvalidEvent as exc:
        log.warning("an event of the watch is not readable: %s", exc)
        return _UNREADABLE


def _parse(uri: str) -> ResourceRef:
    try:
        return parse_uri(uri)
    except TraineeError as exc:
        raise _mcp_error(exc) from None


def _connection_key(ctx: Context) -> str:
    """Which client connection a request came on: its Mcp-Session-Id over HTTP, "" on stdio."""
    headers = getattr(ctx.request, "headers", None)
    return str(headers.get("mcp-session-id", "")) if headers is not None else ""


def _mcp_error(exc: TraineeError) -> MCPError:
    wire = exc.to_wire()
    return MCPError(int(wire["code"]), str(wire["message"]), wire.get("data"))


def _tool_error(exc: TraineeError) -> types.CallToolResult:
    """The method's error as a tool error: its message first, then the whole error object."""
    wire = exc.to_wire()
    content: list[types.ContentBlock] = [types.TextContent(text=exc.message)]
    if exc.data is not None:
        content.append(types.TextContent(text=json.dumps({"error": wire}, ensure_ascii=False)))
    return types.CallToolResult(content=content, structured_content={"error": wire}, is_error=True)
