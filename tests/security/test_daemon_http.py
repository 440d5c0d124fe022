"""Red team, clients of the HTTP port (the real uvicorn): idle connections by the
hundred, headers that never end, requests without the token, event streams that stop
reading, bodies too big or too slow. The daemon must stay up within its descriptor
limit, answer the others within a bound, and change nothing."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.from_thread
import httpx
import pytest

from tests.security.attacks import (
    Target,
    http_idle_flood,
    measured,
    publish_notes,
    slowloris,
    tokenless_flood,
)
from tests.security.daemon_harness import FD_LIMIT, assert_unharmed, started_daemon
from tests.support.daemon import Daemon
from tests.support.timing import scaled
from trainee.api.context import Services
from trainee.api.table import registry
from trainee.daemon.http import HttpServer, allowed_hosts_for, bind_tcp, build_app
from trainee.daemon.limits import Limits
from trainee.rpc.protocol import Dispatcher
from trainee.session.bus import EventBus

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def target() -> Iterator[tuple[Daemon, Target]]:
    with started_daemon() as pair:
        yield pair


def test_three_hundred_idle_connections_against_a_limit_of_256(
    target: tuple[Daemon, Target],
) -> None:
    """The bounded version of 20,000 idle TCP connections: more than the open-file
    limit allows. Idle ones are closed to make room; the daemon keeps its reserve."""
    daemon, t = target
    with measured(t) as (probe, sampler):
        result = http_idle_flood(t, connections=300, hold=1.0)
    assert result["closed_by_daemon"] > 0
    assert sampler.peak_fds < FD_LIMIT, sampler.peak_fds
    assert_unharmed(daemon, t, probe)


def test_requests_without_the_token_are_refused_and_their_connection_closed(
    target: tuple[Daemon, Target],
) -> None:
    daemon, t = target
    with measured(t) as (probe, _):
        result = tokenless_flood(t, requests=100)
    assert result["statuses"] == {401: 100}, result
    assert result["kept_open"] == 0, "a refused request must not keep its connection"
    assert_unharmed(daemon, t, probe)


def test_a_body_too_large_is_refused(target: tuple[Daemon, Target]) -> None:
    daemon, t = target
    with httpx.Client(base_url=t.http_url, headers=t.headers(), timeout=scaled(60)) as client:
        response = client.post("/rpc", content=b" " * (5 * 2**20))
        assert response.status_code == 413
        assert "request body too large" in response.json()["error"]["message"]
    assert_unharmed(daemon, t)


@pytest.fixture
def quick_server() -> Iterator[tuple[str, HttpServer]]:
    """The daemon's HTTP app and server in-process, with short header and body deadlines
    (the daemon's are 10 s and 60 s) so the deadline tests stay quick."""
    limits = Limits(http_header_timeout_sec=1.0, http_body_timeout_sec=1.0)
    sock = bind_tcp("127.0.0.1", 0)
    port = sock.getsockname()[1]
    hosts = allowed_hosts_for("127.0.0.1", port)
    services = Services(
        bus=EventBus(), socket_path="-", started_at=time.time(), request_shutdown=lambda: None
    )
    app = build_app(
        registry,
        Dispatcher(registry.call),
        services,
        token=TOKEN,
        allowed_hosts=lambda: hosts,
        limits=limits,
    )
    server = HttpServer(app, sock, limits=limits)
    with anyio.from_thread.start_blocking_portal() as portal:
        future, _ = portal.start_task(server.run)
        try:
            yield f"http://127.0.0.1:{port}", server
        finally:
            server.stop()
            future.result(timeout=10)


TOKEN = "t" * 43


def test_headers_that_never_end_are_cut_off_at_their_deadline(
    quick_server: tuple[str, HttpServer],
) -> None:
    url, server = quick_server
    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1])
    t = Target(Path("-"), url, TOKEN, os.getpid())
    started = time.monotonic()
    result = slowloris(t, connections=10, seconds=scaled(6))
    assert result["still_open"] == 0, result
    assert server.gate.timed_out >= 10
    assert time.monotonic() - started < scaled(6) + 3
    with httpx.Client(base_url=f"http://{host}:{port}", timeout=10) as client:
        ok = client.post("/api/tools/daemon_hello", json={}, headers=t.headers())
    assert ok.status_code == 200


def test_a_body_that_never_arrives_is_answered_408(quick_server: tuple[str, HttpServer]) -> None:
    url, _ = quick_server
    host, port = "127.0.0.1", int(url.rsplit(":", 1)[1])
    with socket.create_connection((host, port), timeout=scaled(30)) as sock:
        sock.sendall(
            f"POST /rpc HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Length: 1000\r\n\r\n{".encode()
        )
        reply = b""
        while chunk := sock.recv(65536):  # the answer may come in parts; the server closes
            reply += chunk
    assert b" 408 " in reply.split(b"\r\n", 1)[0] and b"not received within 1 s" in reply


def test_event_streams_that_stop_reading_and_vanish(target: tuple[Daemon, Target]) -> None:
    daemon, t = target
    host, port = t.address
    streams = []
    for _ in range(20):
        sock = socket.create_connection((host, port), timeout=10)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(
            f"GET /api/sessions/1/events?since=0&project_root=/nonexistent HTTP/1.1\r\n"
            f"Host: {host}:{port}\r\nAuthorization: Bearer {t.token}\r\n\r\n".encode()
        )
        streams.append(sock)
    with measured(t) as (probe, _):
        publish_notes(t, notes=100, note_bytes=50_000, session="1")
        for sock in streams:
            sock.close()
    assert_unharmed(daemon, t, probe)
