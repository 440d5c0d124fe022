"""The real daemon answers a connection's requests as each is done: a long
``round_result(wait=true)`` holds up nothing else on its connection, can be cancelled
with ``$/cancelRequest``, and a client that goes away with requests in flight harms
nothing. The number in flight per connection is bounded."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, copy_example
from tests.support.processes import assert_no_training_left
from tests.support.timing import scaled
from trainee import errors
from trainee.daemon.limits import Limits
from trainee.rpc.client import RpcClient
from trainee.states import RoundStatus, SessionStatus

pytestmark = pytest.mark.e2e


class Raw:
    """One socket connection: raw frames out, replies in as they come."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(scaled(30))
        self.sock.connect(str(path))
        self.buf = b""

    def request(self, rid: Any, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": rid}
        if params is not None:
            message["params"] = params
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def cancel(self, rid: Any) -> None:
        message = {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": rid}}
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def reply(self) -> Any:
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 16)
            assert chunk, "the daemon closed the connection"
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def close(self) -> None:
        self.sock.close()


def _healthy(daemon: Daemon) -> None:
    assert daemon.proc is not None and daemon.proc.poll() is None, daemon.log[-3000:]
    with RpcClient(daemon.socket, timeout=scaled(10)) as rpc:
        assert rpc.call("daemon_hello")["pid"] == daemon.proc.pid
    assert "Traceback" not in daemon.log, daemon.log[-3000:]


def test_a_waiting_round_result_holds_up_nothing_and_can_be_cancelled(
    daemon: Daemon, tmp_path: Path
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    root = str(project)
    with RpcClient(daemon.socket, timeout=scaled(120)) as rpc:
        started = rpc.call(
            "loop_start",
            {"project_root": root, "policy": "external", "security_mode": "unsafe",
             "max_rounds": 3},
        )  # fmt: skip
        session = started["session"]
        baseline = rpc.call(
            "round_result", {"session": session, "round": 1, "project_root": root, "wait": True}
        )
        assert baseline["status"] == RoundStatus.COMPLETED
    # the session now waits for a plan: round 2's result waits as long as it does
    wait = {"session": session, "round": 2, "project_root": root, "wait": True}

    raw = Raw(daemon.socket)
    raw.request(1, "round_result", wait)
    raw.request(2, "daemon_hello")
    raw.request(3, "loop_get", {"session": session, "project_root": root})
    first = [raw.reply(), raw.reply()]
    assert sorted(r["id"] for r in first) == [2, 3], first
    assert all("result" in r for r in first), first
    state = next(r["result"] for r in first if r["id"] == 3)
    assert state["running"] and state["session"]["status"] == SessionStatus.RUNNING

    raw.cancel(1)
    cancelled = raw.reply()
    assert cancelled["id"] == 1, cancelled
    assert cancelled["error"]["code"] == errors.RequestCancelled.code == -32800
    assert "round_result (id 1) was cancelled" in cancelled["error"]["message"]
    raw.request(4, "daemon_hello")  # the connection goes on
    assert raw.reply()["id"] == 4
    raw.close()
    _healthy(daemon)

    # a client that goes away with waits in flight: they end with it, nothing else does
    raw = Raw(daemon.socket)
    for rid in range(5):
        raw.request(rid, "round_result", wait)
    raw.request("seen", "daemon_hello")
    assert raw.reply()["id"] == "seen"
    raw.close()
    _healthy(daemon)
    with RpcClient(daemon.socket, timeout=scaled(60)) as rpc:
        state = rpc.call("loop_get", {"session": session, "project_root": root})
        assert state["running"], "a cancelled wait never touches the session"
        stopped = rpc.call("loop_stop", {"session": session, "project_root": root})
        assert stopped["stopped"]
    assert_no_training_left(project)


def test_one_connection_holds_a_bounded_number_of_requests_in_flight(
    daemon: Daemon, tmp_path: Path
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    root = str(project)
    with RpcClient(daemon.socket, timeout=scaled(120)) as rpc:
        session = rpc.call(
            "loop_start",
            {"project_root": root, "policy": "external", "security_mode": "unsafe",
             "max_rounds": 3},
        )["session"]  # fmt: skip
        rpc.call("round_result", {"session": session, "round": 1, "project_root": root,
                                  "wait": True})  # fmt: skip
    limit = Limits().requests_in_flight
    wait = {"session": session, "round": 2, "project_root": root, "wait": True}
    raw = Raw(daemon.socket)
    for rid in range(limit):
        raw.request(rid, "round_result", wait)
    raw.request("over", "daemon_hello")
    refused = raw.reply()
    assert refused["id"] == "over", refused
    assert refused["error"]["code"] == errors.LimitExceeded.code
    assert refused["error"]["data"]["details"] == {"what": "requests in flight", "limit": limit}
    raw.cancel(0)
    assert raw.reply()["id"] == 0
    raw.request("room", "daemon_hello")  # a place is free again
    assert "result" in raw.reply()
    raw.close()
    _healthy(daemon)
    with RpcClient(daemon.socket, timeout=scaled(60)) as rpc:
        assert rpc.call("loop_stop", {"session": session, "project_root": root})["stopped"]
    assert_no_training_left(project)
