"""RpcClient against a real Unix socket server that speaks through the real Dispatcher."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trainee import errors
from trainee.rpc.client import RpcClient
from trainee.rpc.framing import FrameBuffer, encode_frame
from trainee.rpc.protocol import Dispatcher, encode_notification

SERVER_MAX_FRAME = 4096


class _Connection(socketserver.BaseRequestHandler):
    """One client connection: frames in, each answered by the Dispatcher in its own loop."""

    server: _Server
    hung_up = False

    def handle(self) -> None:
        buffer = FrameBuffer(SERVER_MAX_FRAME)
        while not self.hung_up:
            data = self.request.recv(65536)
            if not data:
                return
            for frame in buffer.feed(data):
                response = asyncio.run(self.server.dispatcher.handle_frame(frame, self))
                if self.hung_up:
                    return
                if response is not None:
                    self.send(encode_frame(response))

    def setup(self) -> None:
        self.lock = threading.Lock()

    def send(self, data: bytes) -> None:
        with self.lock:
            self.request.sendall(data)

    def later(self, action: Any) -> None:
        """Run ``action`` on another thread once the test sets ``server.release``."""

        def run() -> None:
            if self.server.release.wait(timeout=60):
                action()

        threading.Thread(target=run, daemon=True).start()

    def hang_up(self) -> None:
        self.hung_up = True
        self.request.shutdown(socket.SHUT_RDWR)


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str) -> None:
        self.dispatcher = Dispatcher(self.call)
        self.release = threading.Event()
        self.notified: list[Any] = []
        self.seen_notification = threading.Event()
        super().__init__(path, _Connection)

    async def call(self, method: str, params: Any, conn: _Connection) -> Any:
        match method:
            case "echo":
                return params
            case "add":
                return sum(params)
            case "fail":
                raise errors.ConfigError(
                    "project.yaml: metric.goal must be min or max",
                    file="project.yaml",
                    line=7,
                    field="metric.goal",
                    reason="must be min or max",
                )
            case "boom":
                raise RuntimeError("a secret the client must not see")
            case "push":  # notifications first, then the response
                for n in range(params["count"]):
                    conn.send(encode_frame(encode_notification("event", {"n": n})))
                return "pushed"
            case "hang":  # answers only once the test releases it
                self.release.wait(timeout=60)
                return "late"
            case "hang_up":
                conn.hang_up()
                return None
            case "subscribe":  # events pushed later, with no call in flight

                def push_events() -> None:
                    for n in range(params["count"]):
                        conn.send(encode_frame(encode_notification("event", {"n": n})))

                conn.later(push_events)
                return "subscribed"
            case "hang_up_later":
                conn.later(conn.hang_up)
                return "ok"
            case "garbage":
                conn.send(b"this is not json\n")
                return None
            case "big":
                return "x" * params["size"]
            case "remember":
                self.notified.append(params)
                self.seen_notification.set()
                return None
        raise errors.MethodNotFound(f"Method not found: {method}", {"method": method})


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A short folder for sockets: AF_UNIX paths must stay under 108 bytes."""
    with tempfile.TemporaryDirectory(prefix="trpc-", dir="/tmp") as name:
        yield Path(name)


@pytest.fixture
def server(short_dir: Path) -> Iterator[_Server]:
    srv = _Server(str(short_dir / "d.sock"))
    thread = threading.Thread(target=srv.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


@pytest.fixture
def client(server: _Server) -> Iterator[RpcClient]:
    with RpcClient(str(server.server_address), timeout=10) as c:
        yield c


# -- calls -------------------------------------------------------------------------------


def test_call_returns_results_and_connects_lazily(client: RpcClient) -> None:
    assert not client.connected
    assert client.call("add", [1, 2, 3]) == 6
    assert client.connected
    assert client.call("echo", {"path": "/tmp/é", "n": [1, 2.5, None, True]}) == {
        "path": "/tmp/é",
        "n": [1, 2.5, None, True],
    }
    assert client.call("echo") is None


def test_errors_come_back_as_the_same_class(client: RpcClient) -> None:
    with pytest.raises(errors.ConfigError) as info:
        client.call("fail")
    assert info.value.message == "project.yaml: metric.goal must be min or max"
    assert (info.value.file, info.value.line, info.value.field) == (
        "project.yaml",
        7,
        "metric.goal",
    )
    with pytest.raises(errors.MethodNotFound, match="Method not found: nope"):
        client.call("nope", [])
    with pytest.raises(errors.InternalError) as internal:
        client.call("boom")
    assert "secret" not in str(internal.value)
    assert set(internal.value.data) == {"incident"}
    assert client.call("add", [2, 2]) == 4  # the connection is still good


def test_notifications_arriving_during_a_call_are_queued(client: RpcClient) -> None:
    assert client.call("push", {"count": 3}) == "pushed"
    assert [client.next_notification(timeout=0) for _ in range(3)] == [
        {"method": "event", "params": {"n": n}} for n in range(3)
    ]
    assert client.next_notification(timeout=0.05) is None


def test_next_notification_waits_for_pushed_events(client: RpcClient, server: _Server) -> None:
    assert client.call("subscribe", {"count": 2}) == "subscribed"
    assert client.next_notification(timeout=0.05) is None
    server.release.set()
    assert client.next_notification(timeout=10) == {"method": "event", "params": {"n": 0}}
    assert client.next_notification(timeout=10) == {"method": "event", "params": {"n": 1}}
    assert client.next_notification(timeout=0.05) is None
    assert client.call("add", [5]) == 5


def test_notify_gets_no_response(client: RpcClient, server: _Server) -> None:
    client.notify("remember", {"k": 1})
    assert server.seen_notification.wait(timeout=10)
    assert server.notified == [{"k": 1}]
    client.notify("no_such_method")  # failing notifications are silent
    assert client.call("add", [1]) == 1


def test_batch_returns_results_and_errors_in_order(client: RpcClient) -> None:
    results = client.batch([("add", [1, 2]), ("fail", None), ("echo", {"a": 1}), ("nope", [])])
    assert results[0] == 3
    assert isinstance(results[1], errors.ConfigError)
    assert results[2] == {"a": 1}
    assert isinstance(results[3], errors.MethodNotFound)
    assert client.batch([]) == []


def test_params_that_are_not_json_are_refused_before_sending(client: RpcClient) -> None:
    with pytest.raises(errors.InvalidParams, match="params cannot be sent as JSON"):
        client.call("echo", {"x": float("nan")})
    with pytest.raises(errors.InvalidParams, match="params cannot be sent as JSON"):
        client.call("echo", {"x": object()})
    with pytest.raises(errors.InvalidParams, match="params cannot be sent as JSON"):
        client.call("echo", ["bad\udcff"])  # a surrogate-escaped non-UTF-8 file name
    with pytest.raises(TypeError, match="params of echo must be a dict, a list or None"):
        client.call("echo", "text")  # type: ignore[arg-type]
    assert client.call("echo", (1, 2)) == [1, 2]  # type: ignore[arg-type]


# -- limits and misbehaving peers --------------------------------------------------------


def test_oversized_request_is_answered_and_the_connection_kept(client: RpcClient) -> None:
    with pytest.raises(errors.InvalidRequest, match=f"frame too large \\({SERVER_MAX_FRAME} bytes"):
        client.call("echo", ["x" * SERVER_MAX_FRAME])
    assert client.call("add", [1, 1]) == 2
    with pytest.raises(errors.InvalidRequest, match="frame too large"):
        client.batch([("echo", ["y" * 3000]), ("echo", ["z" * 3000])])
    assert client.call("add", [2, 1]) == 3


def test_oversized_response_is_an_error_and_the_client_reconnects(server: _Server) -> None:
    with RpcClient(str(server.server_address), timeout=10, max_frame=100) as client:
        with pytest.raises(errors.ProtocolError, match="over 100 bytes") as info:
            client.call("big", {"size": 500})
        assert info.value.data == {"reason": "frame_too_large", "max_frame": 100}
        assert not client.connected
        assert client.call("big", {"size": 5}) == "xxxxx"


def test_malformed_frame_from_the_server_is_a_protocol_error(client: RpcClient) -> None:
    with pytest.raises(errors.ProtocolError, match="malformed message from the daemon"):
        client.call("garbage")
    assert client.call("add", [3]) == 3


def test_timeout_raises_and_a_late_response_is_discarded(
    client: RpcClient, server: _Server
) -> None:
    with pytest.raises(
        errors.ProtocolError, match=r"timed out waiting for hang after 0.2s"
    ) as info:
        client.call("hang", timeout=0.2)
    assert info.value.data == {"reason": "timeout", "method": "hang", "timeout": 0.2}
    assert client.connected
    server.release.set()  # the late "late" response now arrives before the next answer
    assert client.call("echo", ["fresh"]) == ["fresh"]


def test_batch_timeout(client: RpcClient, server: _Server) -> None:
    with pytest.raises(errors.ProtocolError, match="timed out waiting for a batch of 2 calls"):
        client.batch([("add", [1]), ("hang", None)], timeout=0.2)
    server.release.set()
    assert client.batch([("add", [4])]) == [4]


def test_server_hanging_up_mid_call(client: RpcClient) -> None:
    with pytest.raises(errors.DaemonNotRunning) as info:
        client.call("hang_up")
    assert info.value.data["reason"] == "closed"
    assert not client.connected
    assert client.call("add", [7]) == 7  # the next call opens a new connection


def test_next_notification_reports_a_closed_connection(client: RpcClient, server: _Server) -> None:
    assert client.call("hang_up_later") == "ok"
    server.release.set()
    with pytest.raises(errors.DaemonNotRunning) as info:
        client.next_notification(timeout=10)
    assert info.value.data["reason"] == "closed"
    assert not client.connected


# -- no daemon ---------------------------------------------------------------------------


def _reason(path: Path) -> dict[str, Any]:
    client = RpcClient(path, timeout=5)
    with pytest.raises(errors.DaemonNotRunning) as info:
        client.call("add", [1])
    assert not client.connected
    data: dict[str, Any] = info.value.data
    assert data["path"] == str(path)
    assert str(path) in info.value.message
    return data


def test_no_socket_file(short_dir: Path) -> None:
    assert _reason(short_dir / "missing.sock")["reason"] == "no_socket"
    assert _reason(short_dir / "no" / "dir.sock")["reason"] == "no_socket"


def test_a_file_that_is_not_a_socket(short_dir: Path) -> None:
    path = short_dir / "plain.sock"
    path.write_text("not a socket")
    assert _reason(path)["reason"] == "not_a_socket"
    assert _reason(short_dir)["reason"] == "not_a_socket"  # a directory


def test_bound_but_not_listening_is_refused(short_dir: Path) -> None:
    path = short_dir / "bound.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        assert _reason(path)["reason"] == "refused"


def test_stale_socket_file_of_a_gone_server_is_refused(short_dir: Path) -> None:
    path = short_dir / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(path))
        sock.listen()
    assert path.exists()  # closing does not remove the file
    data = _reason(path)
    assert data["reason"] == "refused"


def test_default_path_comes_from_trainee_socket(
    short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINEE_SOCKET", str(short_dir / "env.sock"))
    client = RpcClient()
    assert client.path == str(short_dir / "env.sock")
    with pytest.raises(errors.DaemonNotRunning, match="no socket at"):
        client.call("add", [1])


def test_client_import_stays_light() -> None:
    code = (
        "import json, sys, trainee.rpc.client, trainee.rpc.framing\n"
        "heavy = {'msgspec', 'asyncio', 'anyio', 'trainee.rpc.protocol'} & set(sys.modules)\n"
        "print(json.dumps(sorted(heavy)))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert json.loads(out.stdout) == []
