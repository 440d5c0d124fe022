"""MCP over streamable HTTP inside the daemon, at ``/mcp``.

The daemon mounts :attr:`McpEndpoint.route` among its routes, behind its
Guard (Host, Origin, access token), and runs :meth:`McpEndpoint.run` in its
task group. Here the server calls the method registry in-process and watches
the event bus directly: the same server as ``trainee mcp``, another backend.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskStatus
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from starlette.routing import Route

from trainee.api.context import CallContext, Services
from trainee.api.registry import Registry
from trainee.errors import TraineeError
from trainee.mcp.backend import GAP, EventStream
from trainee.mcp.server import TraineeMcp
from trainee.rpc.protocol import as_trainee_error
from trainee.session.bus import Subscription

__all__ = ["PATH", "LocalBackend", "McpEndpoint"]

log = logging.getLogger("trainee.mcp.http")

PATH = "/mcp"


class LocalBackend:
    """The registry and the event bus of this daemon (``transport`` ``mcp``)."""

    def __init__(self, registry: Registry, services: Services) -> None:
        self.registry = registry
        self.services = services

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        ctx = CallContext(services=self.services, transport="mcp")
        try:
            result = await self.registry.call(method, params, ctx)
        except TraineeError:
            raise
        except Exception as exc:
            raise as_trainee_error(exc, logger=log, where=f"MCP call {method}") from None
        return msgspec.to_builtins(result)

    @asynccontextmanager
    async def watch(self, session: str, kinds: Iterable[str]) -> AsyncIterator[EventStream]:
        sub, _, _ = self.services.bus.subscribe(session=session, kinds=kinds)
        events = _BusEvents(sub)
        try:
            yield events
        finally:
            await events.aclose()


class _BusEvents:
    """A bus subscription's events as wire dicts, ending with GAP if the bus dropped it."""

    def __init__(self, sub: Subscription) -> None:
        self._sub = sub
        self._events = sub.__aiter__()
        self._done = False

    def __aiter__(self) -> _BusEvents:
        return self

    async def __anext__(self) -> dict[str, Any]:
        if self._done:
            raise StopAsyncIteration
        try:
            event = await self._events.__anext__()
        except StopAsyncIteration:
            self._done = True
            if self._sub.dropped:
                return dict(GAP)
            raise
        data: dict[str, Any] = msgspec.to_builtins(event)
        return data

    async def aclose(self) -> None:
        self._sub.close()
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()


class McpEndpoint:
    """The ``/mcp`` route and the session manager behind it."""

    def __init__(self, registry: Registry, services: Services) -> None:
        self.mcp = TraineeMcp(LocalBackend(registry, services))
        self.manager = StreamableHTTPSessionManager(app=self.mcp.server)
        self.route = Route(PATH, endpoint=StreamableHTTPASGIApp(self.manager))
        self._closed = anyio.Event()

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve MCP sessions until :meth:`close` (or cancellation) ends them all."""
        async with self.manager.run():
            task_status.started()
            await self._closed.wait()

    def close(self) -> None:
        """End every MCP session now (the daemon is stopping: open streams must not hold it)."""
        self._closed.set()
