"""JSON-RPC 2.0 over a Unix stream socket, newline-delimited frames.

Every connection is isolated: whatever a client does (disconnect mid-reply, stop
reading, send garbage, flood) ends that client's connection only, never the
accept loop or the daemon. Per connection, what the daemon holds is bounded: one
open frame (``max_request_bytes``, large ones against a daemon-wide allowance),
one reply in flight (a client that reads nothing for ``send_timeout_sec`` is
dropped) and each watch's queue of events (then a gap). At most
``socket_connections`` clients at once (and never more than the file-descriptor
budget allows): the next one gets one error frame and is closed. A peer that
belongs to another user or descends from a round's monitor is refused (see
:mod:`trainee.daemon.peers`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import stat
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.abc import TaskStatus

from trainee.api.context import CallContext, Services
from trainee.daemon.limits import LargeRequests, Limits
from trainee.daemon.peers import peer_of, refusal
from trainee.errors import Forbidden, LimitExceeded, TraineeError
from trainee.rpc.framing import FrameBuffer, FrameTooLarge
from trainee.rpc.protocol import Dispatcher, encode_error, encode_notification

log = logging.getLogger("trainee.daemon.socket")

READ_SIZE = 256 * 1024
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
CLIENT_FAULTS: tuple[type[BaseException], ...] = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    ConnectionError,
    TimeoutError,
)
"""What a client causes by going away or not reading: the end of that client, no more."""


def prepare_socket_dir(path: Path) -> None:
    """Create the socket's folder 0700 (and refuse one others can write to)."""
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = folder.stat()
    if st.st_uid != os.getuid():
        raise PermissionError(f"socket folder {folder} belongs to another user")
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(folder, 0o700)


def bind_unix_socket(path: Path) -> socket.socket:
    """Bind and listen on ``path`` with mode 0600 (the caller holds the daemon lock)."""
    prepare_socket_dir(path)
    with contextlib.suppress(FileNotFoundError):
        if path.is_socket() or path.exists():
            path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    sock.listen(128)
    return sock


def only_client_faults(exc: BaseException) -> bool:
    """Whether ``exc`` (or every exception of a group) is a client's doing."""
    if isinstance(exc, BaseExceptionGroup):
        return all(only_client_faults(e) for e in exc.exceptions)
    return isinstance(exc, CLIENT_FAULTS)


class Connection:
    """One client connection: serial request handling plus pushed notifications."""

    def __init__(
        self,
        stream: anyio.abc.SocketStream,
        dispatcher: Dispatcher,
        services: Services,
        tg: anyio.abc.TaskGroup,
        limits: Limits,
        large: LargeRequests,
    ) -> None:
        self._stream = stream
        self._dispatcher = dispatcher
        self._write_lock = anyio.Lock()
        self._buffer = FrameBuffer(limits.max_request_bytes)
        self._limits = limits
        self._large = large
        self._charged = 0
        self.ctx = CallContext(
            services=services, transport="socket", notify=self.notify, start_soon=tg.start_soon
        )

    async def send(self, payload: bytes) -> None:
        """Send one frame; a client that takes more than ``send_timeout_sec`` to make
        room for it (it reads nothing) raises TimeoutError: its connection ends."""
        async with self._write_lock:
            with anyio.fail_after(self._limits.send_timeout_sec):
                await self._stream.send(payload + b"\n")

    async def notify(self, method: str, params: Any) -> None:
        await self.send(encode_notification(method, params))

    def _feed(self, data: bytes) -> tuple[list[bytes | FrameTooLarge], bool]:
        """The frames ``data`` completes; True when the open frame had to be dropped
        because large requests arriving at once used up the daemon-wide allowance."""
        frames = self._buffer.feed(data)
        pending = self._buffer.pending
        if self._large.charge(self._charged, pending):
            self._charged = pending
            return frames, False
        self._buffer.abandon()
        self.release()
        return frames, True

    def release(self) -> None:
        self._large.release(self._charged)
        self._charged = 0

    async def run(self) -> None:
        while True:
            try:
                data = await self._stream.receive(READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                return
            frames, dropped = self._feed(data)
            for frame in frames:
                # a large request is charged while it is handled too (decoding it takes
                # a few times its size): over the allowance it is refused undecoded
                size = len(frame) if isinstance(frame, bytes) else 0
                if not self._large.charge(0, size):
                    await self.send(encode_error(None, self._busy()))
                    continue
                try:
                    response = await self._dispatcher.handle_frame(frame, self.ctx)
                finally:
                    self._large.release(size)
                if response is not None:
                    await self.send(response)
            if dropped:
                await self.send(encode_error(None, self._busy()))

    def _busy(self) -> LimitExceeded:
        return LimitExceeded(
            "request dropped: the daemon is receiving too many large requests at "
            f"once ({self._large.total} bytes in all); send it again later",
            {"what": "large requests", "limit": self._large.total},
        )


class SocketServer:
    """Accepts connections on an already-listening Unix socket until cancelled."""

    def __init__(
        self,
        listener_sock: socket.socket,
        dispatcher: Dispatcher,
        services: Services,
        *,
        limits: Limits | None = None,
        max_connections: int | None = None,
        large: LargeRequests | None = None,
        monitors: Callable[[], Collection[int]] = frozenset,
        on_stop: Callable[[], None] | None = None,
    ) -> None:
        self.limits = limits or Limits()
        self.max_connections = max_connections or self.limits.socket_connections
        self.large = large or LargeRequests(self.limits)
        self._sock = listener_sock
        self._dispatcher = dispatcher
        self._services = services
        self._monitors = monitors
        self._on_stop = on_stop
        self.open = 0
        self.refused = 0

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.abc.SocketListener.from_socket(self._sock)
        async with listener, anyio.create_task_group() as tg:
            task_status.started()
            try:
                while True:
                    try:
                        stream = await listener.accept()
                    except OSError as exc:
                        if exc.errno in _OUT_OF_RESOURCES:
                            # Out of file descriptors or memory: existing work goes on; the
                            # clients waiting in the backlog are taken when some are free.
                            log.warning("cannot accept a socket connection now: %s", exc)
                            await anyio.sleep(0.1)
                        continue
                    tg.start_soon(self._handle, stream)
            finally:
                if self._on_stop is not None:
                    self._on_stop()

    async def _refuse(self, stream: anyio.abc.SocketStream, error: TraineeError) -> None:
        self.refused += 1
        with contextlib.suppress(Exception), anyio.move_on_after(1):
            await stream.send(encode_error(None, error) + b"\n")
        with contextlib.suppress(Exception):
            await stream.aclose()

    async def _handle(self, stream: anyio.abc.SocketStream) -> None:
        if self.open >= self.max_connections:
            log.warning("refused a socket connection: %d open (the limit)", self.open)
            await self._refuse(
                stream,
                LimitExceeded(
                    f"too many connections to the daemon ({self.max_connections} open); "
                    "close some and try again",
                    {"limit": self.max_connections, "what": "socket connections"},
                ),
            )
            return
        raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        why = refusal(peer_of(raw), self._monitors) if raw is not None else None
        if why is not None:
            log.warning("%s", why)
            await self._refuse(stream, Forbidden(why, {"reason": "peer"}))
            return
        self.open += 1
        conn: Connection | None = None
        try:
            async with stream, anyio.create_task_group() as tg:
                conn = Connection(
                    stream, self._dispatcher, self._services, tg, self.limits, self.large
                )
                try:
                    await conn.run()
                finally:
                    for cancel in list(conn.ctx.watches.values()):
                        cancel()
                    tg.cancel_scope.cancel()
        except Exception as exc:
            if only_client_faults(exc):
                log.debug("a socket client went away: %r", exc)
            else:
                log.exception("a socket connection failed (the daemon goes on)")
        finally:
            self.open -= 1
            if conn is not None:
                conn.release()


async def serve_socket(
    listener_sock: socket.socket,
    dispatcher: Dispatcher,
    services: Services,
    *,
    limits: Limits | None = None,
    on_stop: Callable[[], None] | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Accept connections on an already-listening socket until cancelled."""
    server = SocketServer(listener_sock, dispatcher, services, limits=limits, on_stop=on_stop)
    await server.serve(task_status=task_status)
