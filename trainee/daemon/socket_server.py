"""JSON-RPC 2.0 over a Unix stream socket, newline-delimited frames."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.abc import TaskStatus

from trainee.api.context import CallContext, Services
from trainee.rpc.framing import FrameBuffer
from trainee.rpc.protocol import Dispatcher, encode_notification

log = logging.getLogger("trainee.daemon.socket")

READ_SIZE = 256 * 1024


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


class Connection:
    """One client connection: serial request handling plus pushed notifications."""

    def __init__(
        self,
        stream: anyio.abc.SocketStream,
        dispatcher: Dispatcher,
        services: Services,
        tg: anyio.abc.TaskGroup,
        max_frame: int,
    ) -> None:
        self._stream = stream
        self._dispatcher = dispatcher
        self._write_lock = anyio.Lock()
        self._buffer = FrameBuffer(max_frame)
        self.ctx = CallContext(
            services=services, transport="socket", notify=self.notify, start_soon=tg.start_soon
        )

    async def send(self, payload: bytes) -> None:
        async with self._write_lock:
            await self._stream.send(payload + b"\n")

    async def notify(self, method: str, params: Any) -> None:
        await self.send(encode_notification(method, params))

    async def run(self) -> None:
        while True:
            try:
                data = await self._stream.receive(READ_SIZE)
            except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                return
            for frame in self._buffer.feed(data):
                response = await self._dispatcher.handle_frame(frame, self.ctx)
                if response is not None:
                    await self.send(response)


async def serve_socket(
    listener_sock: socket.socket,
    dispatcher: Dispatcher,
    services: Services,
    *,
    max_frame: int = 16 * 2**20,
    on_stop: Callable[[], None] | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Accept connections on an already-listening socket until cancelled."""
    listener = await anyio.abc.SocketListener.from_socket(listener_sock)

    async def handle(stream: anyio.abc.SocketStream) -> None:
        async with stream, anyio.create_task_group() as tg:
            conn = Connection(stream, dispatcher, services, tg, max_frame)
            try:
                await conn.run()
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, ConnectionError):
                pass
            except Exception:
                log.exception("connection failed")
            finally:
                for cancel in list(conn.ctx.watches.values()):
                    cancel()
                tg.cancel_scope.cancel()

    async with listener:
        task_status.started()
        try:
            await listener.serve(handle)
        finally:
            if on_stop is not None:
                on_stop()
