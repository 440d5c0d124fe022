"""JSON-RPC 2.0 over a Unix stream socket, newline-delimited frames.

Every connection is isolated: whatever a client does (disconnect mid-reply, stop
reading, send garbage, flood) ends that client's connection only, never the
accept loop or the daemon. Each request runs in a task of its own, so a long wait
(``round_result`` with ``wait``) never holds up the others on its connection; a
client cancels one with the notification ``$/cancelRequest`` ``{"id": <its id>}``
(it is answered RequestCancelled, -32800), and when the connection ends all its
requests in flight are cancelled. Per connection, what the daemon holds is
bounded: one open frame (``max_request_bytes``, large ones against a daemon-wide
allowance), ``requests_in_flight`` requests running (a batch is one; the next is
answered LimitExceeded at once), ``waiting_reply_bytes`` of replies waiting to be
read (a client that reads nothing for ``send_timeout_sec`` is dropped) and each
watch's queue of events (then a gap). At most
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
import select
import socket
import stat
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.abc import TaskStatus

from trainee.api.context import CallContext, Services
from trainee.daemon.limits import LargeRequests, Limits
from trainee.daemon.peers import peer_of, refusal
from trainee.errors import Forbidden, LimitExceeded, ParseError, TraineeError
from trainee.rpc.framing import FrameBuffer, FrameTooLarge
from trainee.rpc.protocol import (
    CANCEL_METHOD,
    JSONRPC_VERSION,
    Cancellation,
    Dispatcher,
    decode_frame,
    encode_error,
    encode_notification,
    is_request_id,
    request_ids,
)

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


@dataclass(eq=False)
class _Unit:
    """One request unit in flight: a request, a notification or a whole batch."""

    ids: list[Any]
    """The ids of its requests (cancelling any of them cancels the unit)."""
    batch: bool
    charged: int
    """Bytes of the frame charged to the daemon-wide large-request allowance."""
    cancel: Cancellation = field(default_factory=Cancellation)


class Connection:
    """One client connection: each request in a task of its own, pushed notifications.

    Replies are written whole, one at a time, in the order they are ready (the
    client matches them by id). A request in flight can be cancelled with a
    ``$/cancelRequest`` notification naming its id; when the connection ends,
    everything in flight on it is cancelled.
    """

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
        self._tg = tg
        self._write_lock = anyio.Lock()
        self._buffer = FrameBuffer(limits.max_request_bytes)
        self._limits = limits
        self._large = large
        self._charged = 0
        self._units: set[_Unit] = set()
        self._by_id: dict[tuple[type, Any], set[_Unit]] = {}
        self._settled = anyio.Event()
        self._waiting_bytes = 0
        self.ctx = CallContext(
            services=services, transport="socket", notify=self.notify, start_soon=tg.start_soon
        )

    @property
    def in_flight(self) -> int:
        return len(self._units)

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
        self._large.release(self._charged)
        self._charged = 0
        return frames, True

    def release(self) -> None:
        """Give back what this connection holds of the large-request allowance."""
        self._large.release(self._charged)
        self._charged = 0
        for unit in self._units:
            self._release_unit(unit)

    async def run(self) -> None:
        """Read frames until the client is done; each request starts at once."""
        while True:
            try:
                data = await self._stream.receive(READ_SIZE)
            except anyio.EndOfStream:
                await self._drain()
                return
            except (anyio.BrokenResourceError, ConnectionResetError):
                return
            frames, dropped = self._feed(data)
            for frame in frames:
                await self._take(frame)
            if dropped:
                await self.send(encode_error(None, self._busy()))

    async def _take(self, frame: bytes | FrameTooLarge) -> None:
        """Start one frame's request unit (or answer it at once: a fault, a refusal)."""
        if isinstance(frame, FrameTooLarge):
            reply = await self._dispatcher.handle_frame(frame)
            if reply is not None:
                await self.send(reply)
            return
        # a large request is charged from its decoding (which takes a few times its
        # size) to its answer: over the allowance it is refused undecoded
        size = len(frame)
        if not self._large.charge(0, size):
            await self.send(encode_error(None, self._busy()))
            return
        started = False
        try:
            try:
                message = decode_frame(frame)
            except ParseError as exc:
                await self.send(encode_error(None, exc))
                return
            rest = self._apply_cancels(message)
            if rest is _NOTHING:
                return
            if len(self._units) >= self._limits.requests_in_flight:
                reply = self._dispatcher.refuse(rest, self._too_many())
                if reply is not None:
                    await self.send(reply)
                return
            unit = self._register(rest, size)
            started = True
            self._tg.start_soon(self._serve, unit, rest)
        finally:
            if not started:
                self._large.release(size)

    async def _serve(self, unit: _Unit, message: Any) -> None:
        try:
            reply = await self._dispatcher.respond(message, self.ctx, unit.cancel)
            del message
            self._release_unit(unit)  # the request is done with: only its reply is held
            if reply is not None:
                await self._send_reply(unit, reply)
        finally:
            self._unregister(unit)

    async def _send_reply(self, unit: _Unit, reply: bytes) -> None:
        """Write one reply whole; one that would pass the bytes of replies waiting for
        this client to read them is answered LimitExceeded instead."""
        limit = self._limits.waiting_reply_bytes
        if self._waiting_bytes and self._waiting_bytes + len(reply) > limit:
            log.debug("a %d-byte reply refused: %d bytes wait", len(reply), self._waiting_bytes)
            error = LimitExceeded(
                f"reply not sent ({len(reply)} bytes; the call ran): replies of {limit} bytes "
                "in all already wait for this client to read them; read replies as they come",
                {"what": "waiting reply bytes", "limit": limit, "size": len(reply)},
            )
            reply = encode_error(None if unit.batch or not unit.ids else unit.ids[0], error)
        self._waiting_bytes += len(reply)
        try:
            await self.send(reply)
        finally:
            self._waiting_bytes -= len(reply)

    def _apply_cancels(self, message: Any) -> Any:
        """``message`` less its ``$/cancelRequest`` notifications, each applied now
        (``_NOTHING`` when nothing is left to run)."""
        if not isinstance(message, list):
            return _NOTHING if self._cancel(message) else message
        rest = [m for m in message if not self._cancel(m)]
        return _NOTHING if message and not rest else rest

    def _cancel(self, message: Any) -> bool:
        """True when ``message`` is a ``$/cancelRequest`` notification: each unit in
        flight with the id it names is cancelled. An id not in flight (unknown, or its
        request already answered) is no error; a notification gets no answer anyway."""
        if not (
            isinstance(message, dict)
            and message.get("method") == CANCEL_METHOD
            and message.get("jsonrpc") == JSONRPC_VERSION
            and "id" not in message
        ):
            return False
        params = message.get("params")
        target = params.get("id", _NOTHING) if isinstance(params, dict) else _NOTHING
        if not is_request_id(target):
            log.debug("ignored a %s without a valid params.id: %.200r", CANCEL_METHOD, params)
            return True
        for unit in list(self._by_id.get(_key(target), ())):
            unit.cancel.cancel()
        return True

    def _register(self, message: Any, size: int) -> _Unit:
        unit = _Unit(ids=request_ids(message), batch=isinstance(message, list), charged=size)
        if not self._units:
            self._settled = anyio.Event()
        self._units.add(unit)
        for rid in unit.ids:
            self._by_id.setdefault(_key(rid), set()).add(unit)
        return unit

    def _unregister(self, unit: _Unit) -> None:
        self._release_unit(unit)
        self._units.discard(unit)
        for rid in unit.ids:
            held = self._by_id.get(_key(rid))
            if held is not None:
                held.discard(unit)
                if not held:
                    del self._by_id[_key(rid)]
        if not self._units:
            self._settled.set()

    def _release_unit(self, unit: _Unit) -> None:
        self._large.release(unit.charged)
        unit.charged = 0

    async def _drain(self) -> None:
        """The client sends no more: its requests in flight are answered, unless it has
        closed the connection altogether (then they are cancelled with it)."""
        raw = self._stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
        while self._units and raw is not None and not _hung_up(raw):
            with anyio.move_on_after(HANGUP_CHECK_SEC):
                await self._settled.wait()

    def _too_many(self) -> LimitExceeded:
        limit = self._limits.requests_in_flight
        return LimitExceeded(
            f"too many requests in flight on this connection (at most {limit}); wait "
            f"for their replies or cancel some ({CANCEL_METHOD}), then send it again",
            {"what": "requests in flight", "limit": limit},
        )

    def _busy(self) -> LimitExceeded:
        return LimitExceeded(
            "request dropped: the daemon is receiving too many large requests at "
            f"once ({self._large.total} bytes in all); send it again later",
            {"what": "large requests", "limit": self._large.total},
        )


_NOTHING: Any = object()
HANGUP_CHECK_SEC = 1.0
"""While a half-closed client's requests finish: how often to look whether it hung up."""


def _key(rid: Any) -> tuple[type, Any]:
    """A request id as a key: 1 and 1.0 are different ids."""
    return (type(rid), rid)


def _hung_up(sock: socket.socket) -> bool:
    """Whether the peer closed its end altogether, not only its sending half (Linux
    reports POLLHUP on a Unix stream socket only then)."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return any(events & (select.POLLHUP | select.POLLERR) for _, events in poller.poll(0))


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
        self._connections: set[Connection] = set()

    @property
    def in_flight(self) -> int:
        """Requests running (or with their reply being written) on every connection."""
        return sum(conn.in_flight for conn in self._connections)

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
                self._connections.add(conn)
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
                self._connections.discard(conn)
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
