"""What the MCP server talks to: the Backend protocol, and the daemon over its socket.

``trainee mcp`` (stdio) is a client of the daemon like the CLI: each tool call
is one JSON-RPC call on a connection of its own (the daemon is started first
when none answers), and each resource subscription is one ``events_watch``
stream on a connection of its own, closed when the subscription ends. Nothing
here imports the method registry: the daemon answering may be another version.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import anyio
from anyio.abc import SocketStream

from trainee import paths
from trainee.cli import daemon_client
from trainee.errors import DaemonNotRunning, ProtocolError, error_from_wire
from trainee.rpc.framing import DEFAULT_MAX_FRAME, FrameBuffer, FrameTooLarge, encode_frame

__all__ = ["Backend", "DaemonBackend", "EventStream"]

GAP: dict[str, Any] = {"kind": "gap", "data": {}}
"""The last item of a watch the daemon cut off (it fell behind): events were lost."""


class EventStream(Protocol):
    """Live events, each as its wire dict (``id``, ``kind``, ``session``, ``data``).

    It ends with GAP when the watch was cut off; watch again to go on.
    """

    def __aiter__(self) -> AsyncIterator[dict[str, Any]]: ...


class Backend(Protocol):
    """The trainee the MCP server serves: the daemon over its socket, or the daemon itself."""

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        """Call ``method``; its JSON-able result, or the TraineeError it raised."""
        ...

    def watch(self, session: str, kinds: Iterable[str]) -> AbstractAsyncContextManager[EventStream]:
        """Live events of sessions named ``session`` (of any project) of the given kinds.

        Entering returns once the watch is live: no later event is missed.
        """
        ...


class DaemonBackend:
    """The daemon over its Unix socket (``$TRAINEE_SOCKET`` or the default path)."""

    async def call(self, method: str, params: dict[str, Any]) -> Any:
        return await anyio.to_thread.run_sync(_call, method, params, abandon_on_cancel=True)

    @asynccontextmanager
    async def watch(self, session: str, kinds: Iterable[str]) -> AsyncIterator[EventStream]:
        await anyio.to_thread.run_sync(_ensure_daemon)
        path = str(paths.socket_path())
        try:
            stream = await anyio.connect_unix(path)
        except OSError as exc:
            raise DaemonNotRunning(
                f"cannot reach the daemon at {path}: {exc}", {"reason": "unreachable", "path": path}
            ) from None
        async with stream:
            reader = _Reader(stream)
            request = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "events_watch",
                "params": {"session": session, "kinds": list(kinds)},
            }
            await stream.send(encode_frame(json.dumps(request).encode()))
            while True:
                message = await reader.next()
                if isinstance(message, dict) and message.get("id") == 1:
                    if "error" in message:
                        raise error_from_wire(message["error"])
                    break
            yield _Events(reader)


def _call(method: str, params: dict[str, Any]) -> Any:
    with daemon_client.ensure_daemon(timeout=None) as client:
        return client.call(method, params)


def _ensure_daemon() -> None:
    daemon_client.ensure_daemon().close()


class _Reader:
    """Decoded JSON-RPC messages from a socket stream, one at a time."""

    def __init__(self, stream: SocketStream) -> None:
        self._stream = stream
        self._buffer = FrameBuffer(DEFAULT_MAX_FRAME)
        self._frames: deque[bytes | FrameTooLarge] = deque()

    async def next(self) -> Any:
        while not self._frames:
            try:
                data = await self._stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                raise DaemonNotRunning(
                    "the daemon closed the connection", {"reason": "closed"}
                ) from None
            self._frames.extend(self._buffer.feed(data))
        frame = self._frames.popleft()
        if isinstance(frame, FrameTooLarge):
            raise ProtocolError(
                f"the daemon sent a message over {frame.max_frame} bytes",
                {"reason": "frame_too_large"},
            )
        try:
            return json.loads(frame)
        except ValueError as exc:
            raise ProtocolError(
                f"malformed message from the daemon: {exc}", {"reason": "malformed"}
            ) from None


class _Events:
    """The events of ``events`` notifications, ending with GAP if the daemon cut the watch."""

    def __init__(self, reader: _Reader) -> None:
        self._reader = reader
        self._pending: deque[dict[str, Any]] = deque()
        self._cut = False

    def __aiter__(self) -> _Events:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self._pending:
            if self._cut:
                raise StopAsyncIteration
            message = await self._reader.next()
            if not isinstance(message, dict) or message.get("method") != "events":
                continue
            params = message.get("params") or {}
            self._pending.extend(e for e in params.get("events", []) if isinstance(e, dict))
            if params.get("gap"):
                self._pending.append(GAP)
                self._cut = True
        return self._pending.popleft()
