"""Requests in flight on one socket connection: each runs in a task of its own, can be
cancelled by id, is bounded in number and dies with its connection. The real socket
server and Dispatcher, real sockets; the methods are a test's own."""

from __future__ import annotations

import json
import os
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest

from tests.support.timing import scaled, wait_for
from trainee import errors
from trainee.api.context import Services
from trainee.daemon.limits import Limits
from trainee.daemon.socket_server import SocketServer, bind_unix_socket
from trainee.rpc.client import RpcClient
from trainee.rpc.protocol import Dispatcher
from trainee.session.bus import EventBus

IN_FLIGHT = 4
LARGE = 1000
"""Requests over this many bytes are charged to the large-request allowance."""


@dataclass
class Methods:
    """``wait`` waits until its ``key`` is released (or it is cancelled); ``echo`` answers."""

    started: dict[str, threading.Event] = field(default_factory=dict)
    releases: dict[str, anyio.Event] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def started_event(self, key: str) -> threading.Event:
        with self.lock:
            return self.started.setdefault(key, threading.Event())

    async def call(self, method: str, params: Any, ctx: Any) -> Any:
        if method == "echo":
            return params
        if method == "big":
            return "x" * int(params["size"])
        if method == "wait":
            key = str(params["key"])
            release = self.releases.setdefault(key, anyio.Event())
            self.started_event(key).set()
            try:
                await release.wait()
            except anyio.get_cancelled_exc_class():
                with self.lock:
                    self.cancelled.append(key)
                raise
            return key
        raise errors.MethodNotFound(f"Method not found: {method}", {"method": method})


@dataclass
class Served:
    path: Path
    server: SocketServer
    methods: Methods
    portal: anyio.from_thread.BlockingPortal

    def release(self, key: str) -> None:
        self.portal.call(self.methods.releases.setdefault(key, anyio.Event()).set)

    def started(self, key: str) -> None:
        assert self.methods.started_event(key).wait(scaled(10)), f"wait {key} never started"


@pytest.fixture
def served() -> Iterator[Served]:
    limits = Limits(
        requests_in_flight=IN_FLIGHT, large_request_bytes=LARGE, large_requests_total_bytes=50_000
    )
    with serving(limits) as served:
        yield served


@contextmanager
def serving(limits: Limits) -> Iterator[Served]:
    folder = Path(tempfile.mkdtemp(prefix="tr-req-", dir="/tmp"))
    path = folder / "rpc.sock"
    methods = Methods()
    services = Services(
        bus=EventBus(), socket_path=str(path), started_at=time.time(), request_shutdown=lambda: None
    )
    server = SocketServer(bind_unix_socket(path), Dispatcher(methods.call), services, limits=limits)
    with anyio.from_thread.start_blocking_portal() as portal:
        future, _ = portal.start_task(server.serve)
        try:
            yield Served(path, server, methods, portal)
        finally:
            future.cancel()


def until(what: str, check: Callable[[], bool]) -> None:
    wait_for(check, what, timeout=10, interval=0.01)


class Raw:
    """One connection sending raw frames and reading replies by id."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(scaled(10))
        self.sock.connect(str(path))
        self.buf = b""

    def send(self, message: Any) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def request(self, rid: Any, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": rid}
        if params is not None:
            message["params"] = params
        self.send(message)

    def cancel(self, rid: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": rid}})

    def reply(self) -> Any:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, "the server closed the connection"
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        self.sock.close()


def test_a_long_request_does_not_hold_up_the_next_and_can_be_cancelled(served: Served) -> None:
    raw = Raw(served.path)
    raw.request(1, "wait", {"key": "a"})
    served.started("a")
    raw.request(2, "echo", ["fast"])
    assert raw.reply() == {"jsonrpc": "2.0", "result": ["fast"], "id": 2}

    raw.cancel(99)  # an id not in flight: nothing happens, no reply
    raw.cancel(1)
    cancelled = raw.reply()
    assert cancelled["id"] == 1
    assert cancelled["error"]["code"] == errors.RequestCancelled.code == -32800
    assert cancelled["error"]["data"]["type"] == "RequestCancelled"
    assert "wait (id 1) was cancelled by the client" in cancelled["error"]["message"]
    assert served.methods.cancelled == ["a"]

    raw.cancel(1)  # already answered: a no-op too
    raw.request(3, "echo", ["still here"])
    assert raw.reply()["result"] == ["still here"]
    raw.close()


def test_a_request_done_before_its_cancel_keeps_its_answer(served: Served) -> None:
    raw = Raw(served.path)
    raw.request("x", "wait", {"key": "b"})
    served.started("b")
    served.release("b")
    assert raw.reply() == {"jsonrpc": "2.0", "result": "b", "id": "x"}
    raw.cancel("x")
    raw.request("y", "echo", [1])
    assert raw.reply()["id"] == "y"
    raw.close()


def test_requests_in_flight_are_bounded_and_the_connection_goes_on(served: Served) -> None:
    raw = Raw(served.path)
    for i in range(IN_FLIGHT):
        raw.request(i, "wait", {"key": f"n{i}"})
    for i in range(IN_FLIGHT):
        served.started(f"n{i}")
    raw.request("over", "echo", [1])
    refused = raw.reply()
    assert refused["id"] == "over" and refused["error"]["code"] == errors.LimitExceeded.code
    assert refused["error"]["data"]["details"] == {"what": "requests in flight", "limit": 4}
    assert f"at most {IN_FLIGHT}" in refused["error"]["message"]
    raw.send([{"jsonrpc": "2.0", "method": "echo", "id": "b1"}])  # a batch: refused whole
    batch = raw.reply()
    assert batch["id"] is None and batch["error"]["code"] == errors.LimitExceeded.code

    served.release("n0")
    assert raw.reply() == {"jsonrpc": "2.0", "result": "n0", "id": 0}
    raw.request("room", "echo", ["again"])
    assert raw.reply()["result"] == ["again"]
    raw.close()
    until("the other waits are cancelled", lambda: len(served.methods.cancelled) == 3)


def test_a_batch_is_one_unit_its_cancel_answers_what_is_left(served: Served) -> None:
    raw = Raw(served.path)
    raw.send(
        [
            {"jsonrpc": "2.0", "method": "echo", "params": ["first"], "id": 1},
            {"jsonrpc": "2.0", "method": "wait", "params": {"key": "c"}, "id": 2},
            {"jsonrpc": "2.0", "method": "echo", "params": ["third"], "id": 3},
            {"jsonrpc": "2.0", "method": "echo", "params": ["note"]},
        ]
    )
    served.started("c")
    # a cancel sent inside a batch is applied too, and answered by nobody
    raw.send([{"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 3}}])
    answers = {a["id"]: a for a in raw.reply()}
    assert answers[1]["result"] == ["first"]
    assert answers[2]["error"]["code"] == -32800
    assert answers[3]["error"]["code"] == -32800
    assert "was not run: its batch was cancelled" in answers[3]["error"]["message"]
    assert len(answers) == 3
    raw.close()


def test_a_disconnect_cancels_what_is_in_flight_and_gives_back_the_allowance(
    served: Served,
) -> None:
    raw = Raw(served.path)
    big = "z" * (3 * LARGE)
    raw.request(1, "wait", {"key": "d", "pad": big})
    raw.request(2, "wait", {"key": "e"})
    served.started("d")
    served.started("e")
    assert served.server.large.held > 0  # the large request is charged while it runs
    assert served.server.in_flight == 2
    raw.close()
    until("both waits are cancelled", lambda: sorted(served.methods.cancelled) == ["d", "e"])
    until("the allowance is given back", lambda: served.server.large.held == 0)
    until("the connection is gone", lambda: served.server.open == 0)

    raw = Raw(served.path)  # and the server goes on
    raw.request(1, "echo", ["ok"])
    assert raw.reply()["result"] == ["ok"]
    raw.close()


def test_a_cancelled_large_request_gives_back_its_charge(served: Served) -> None:
    raw = Raw(served.path)
    raw.request(1, "wait", {"key": "f", "pad": "z" * (3 * LARGE)})
    served.started("f")
    assert served.server.large.held > 0
    raw.cancel(1)
    assert raw.reply()["error"]["code"] == -32800
    until("the allowance is given back", lambda: served.server.large.held == 0)
    raw.close()


def test_a_half_closed_client_still_gets_its_answers(served: Served) -> None:
    raw = Raw(served.path)
    raw.request(1, "wait", {"key": "g"})
    raw.request(2, "echo", ["h"])
    raw.sock.shutdown(socket.SHUT_WR)
    assert raw.reply()["id"] == 2
    served.started("g")
    served.release("g")
    assert raw.reply() == {"jsonrpc": "2.0", "result": "g", "id": 1}
    assert raw.sock.recv(10) == b""  # then the server closes
    raw.close()


def test_the_client_cancels_a_call_interrupted_by_ctrl_c(served: Served) -> None:
    main = threading.get_ident()

    def interrupt() -> None:
        served.started("i")
        signal.pthread_kill(main, signal.SIGINT)

    with RpcClient(served.path, timeout=scaled(30)) as client:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            client.call("wait", {"key": "i"})
        # the connection is still open: only the cancel can have ended the wait
        until("the wait is cancelled", lambda: served.methods.cancelled == ["i"])
        assert client.call("echo", ["after"]) == ["after"]  # the cancelled reply is dropped


def test_the_client_cancels_a_call_that_timed_out(served: Served) -> None:
    with RpcClient(served.path, timeout=scaled(30)) as client:
        with pytest.raises(errors.ProtocolError, match="timed out"):
            client.call("wait", {"key": "j"}, timeout=0.2)
        # the connection is still open: only the cancel can end the wait (it may have
        # come before the wait started: then it never ran)
        until("nothing is in flight", lambda: served.server.in_flight == 0)
        assert client.connected
        assert client.call("echo", [os.getpid()]) == [os.getpid()]


def test_replies_waiting_to_be_read_are_bounded() -> None:
    limits = Limits(waiting_reply_bytes=5 * 2**20, send_timeout_sec=scaled(60))
    with serving(limits) as served:
        raw = Raw(served.path)
        raw.request("a", "big", {"size": 4 * 2**20})  # more than the socket holds: it waits
        until("the first reply waits", lambda: served.server.in_flight == 1)
        raw.request("b", "big", {"size": 2 * 2**20})  # 6 MiB would wait: refused
        until("the second is answered", lambda: served.server.in_flight == 2)
        raw.sock.settimeout(scaled(30))
        first, second = raw.reply(), raw.reply()
        assert first["id"] == "a" and len(first["result"]) == 4 * 2**20
        assert second["id"] == "b" and second["error"]["code"] == errors.LimitExceeded.code
        details = second["error"]["data"]["details"]
        assert details["what"] == "waiting reply bytes" and details["limit"] == 5 * 2**20
        assert "the call ran" in second["error"]["message"]
        raw.request("c", "big", {"size": 2 * 2**20})  # read as they come: no refusal
        assert len(raw.reply()["result"]) == 2 * 2**20
        raw.close()
