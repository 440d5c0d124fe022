"""The JSON-RPC 2.0 compliance table over the real Unix socket server and real uvicorn /rpc."""

from __future__ import annotations

import functools
import json
import socket
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.from_thread
import httpx
import pytest

from tests.unit.rpc.cases import CASES, Case, check_response, demo_call, oversized_case
from trainee.api.context import Services
from trainee.api.registry import Registry
from trainee.daemon.http import HttpServer, allowed_hosts_for, bind_tcp, build_app
from trainee.daemon.limits import Limits
from trainee.daemon.socket_server import bind_unix_socket, serve_socket
from trainee.rpc.protocol import Dispatcher
from trainee.session.bus import EventBus

MAX_FRAME = 1024 * 1024
SENTINEL = b'{"jsonrpc": "2.0", "method": "echo", "params": ["sentinel"], "id": "sentinel"}'


def _services(sock: str) -> Services:
    return Services(
        bus=EventBus(), socket_path=sock, started_at=time.time(), request_shutdown=lambda: None
    )


@pytest.fixture(scope="module")
def socket_server() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="tr-rpc-", dir="/tmp"))
    path = folder / "rpc.sock"
    listener = bind_unix_socket(path)
    dispatcher = Dispatcher(demo_call)
    with anyio.from_thread.start_blocking_portal() as portal:
        future, _ = portal.start_task(
            functools.partial(serve_socket, limits=Limits(max_request_bytes=MAX_FRAME)),
            listener,
            dispatcher,
            _services(str(path)),
        )
        try:
            yield path
        finally:
            future.cancel()


class LineReader:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def line(self) -> bytes:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, "server closed the connection"
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line


def _exchange(path: Path, request: bytes) -> bytes | None:
    """Send one frame; return its response, or None when the server sent nothing for it.

    A sentinel request follows every frame, then the client's sending half is shut:
    the server answers every request it got (in the order they are done, matched by
    id) and then closes, so whatever came besides the sentinel's answer is the frame's.
    """
    sentinel = {"jsonrpc": "2.0", "result": ["sentinel"], "id": "sentinel"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(path))
        s.sendall(request + b"\n" + SENTINEL + b"\n")
        s.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    lines = data.split(b"\n")
    assert lines[-1] == b"", "every reply is a whole line"
    others = [line for line in lines[:-1] if json.loads(line) != sentinel]
    assert len(others) == len(lines) - 2, "connection still usable after the frame"
    assert len(others) <= 1, others
    return others[0] if others else None


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_over_the_unix_socket(socket_server: Path, case: Case) -> None:
    check_response(case, _exchange(socket_server, case.request))


def test_oversized_frame_over_the_unix_socket(socket_server: Path) -> None:
    case = oversized_case(MAX_FRAME)
    check_response(case, _exchange(socket_server, case.request))


def test_many_frames_in_one_write_and_split_frames(socket_server: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(socket_server))
        frames = b"".join(
            b'{"jsonrpc":"2.0","method":"subtract","params":[%d,1],"id":%d}\n' % (i, i)
            for i in range(50)
        )
        half = len(frames) // 2 + 7
        s.sendall(frames[:half])
        s.sendall(frames[half:])
        reader = LineReader(s)
        answers = [json.loads(reader.line()) for _ in range(50)]
    answers.sort(key=lambda a: a["id"])  # replies come as requests are done
    assert answers == [{"jsonrpc": "2.0", "result": i - 1, "id": i} for i in range(50)]


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    sock = bind_tcp("127.0.0.1", 0)
    port = sock.getsockname()[1]
    hosts = allowed_hosts_for("127.0.0.1", port)
    app = build_app(
        Registry(),
        Dispatcher(demo_call),
        _services("-"),
        token="t" * 40,
        allowed_hosts=lambda: hosts,
    )
    server = HttpServer(app, sock)
    with anyio.from_thread.start_blocking_portal() as portal:
        future, _ = portal.start_task(server.run)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.stop()
            future.result(timeout=10)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_over_http_rpc(http_server: str, case: Case) -> None:
    r = httpx.post(
        http_server + "/rpc", content=case.request, headers={"Authorization": "Bearer " + "t" * 40}
    )
    if r.status_code == 204:
        check_response(case, None)
    else:
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/json"
        check_response(case, r.content)
