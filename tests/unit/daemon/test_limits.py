"""The daemon's limits: budgets, the large-request allowance, the log's rate limit,
the dispatcher's batch and reply bounds, the socket peer check."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from typing import Any

import anyio
import pytest

from trainee.daemon.limits import FdBudget, LargeRequests, Limits
from trainee.daemon.logs import RateLimit
from trainee.daemon.peers import peer_of, refusal
from trainee.errors import ConfigError
from trainee.rpc.protocol import Dispatcher


def test_budgets_leave_a_reserve_and_never_pass_the_configured_caps() -> None:
    small = FdBudget.for_limit(256, Limits())
    assert small.reserve == 64 and small.socket + small.http == 256 - 64
    assert small.socket == 48 and small.http == 144
    big = FdBudget.for_limit(1 << 20, Limits())
    assert (big.socket, big.http) == (256, 512)


def test_environment_overrides_are_checked_and_named() -> None:
    limits = Limits.from_env({"TRAINEE_FD_LIMIT": "300", "TRAINEE_MAX_HTTP_CONNECTIONS": "9"})
    assert limits.fd_limit == 300 and limits.http_connections == 9
    for bad in ("-1", "1e3", "\uff13\uff10\uff10", "12", " ", "9" * 20):
        with pytest.raises(ConfigError, match="TRAINEE_FD_LIMIT"):
            Limits.from_env({"TRAINEE_FD_LIMIT": bad})


def test_large_requests_share_one_allowance() -> None:
    large = LargeRequests(Limits(large_request_bytes=100, large_requests_total_bytes=1000))
    assert large.charge(0, 100) and large.held == 0  # small requests are free
    assert large.charge(0, 700) and large.held == 600
    assert not large.charge(0, 600)  # a second one would pass the total: refused
    assert large.held == 600
    large.release(700)
    assert large.held == 0 and large.charge(0, 1100)


def _record(msg: str, name: str = "trainee.x") -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, None, None)


def test_the_log_keeps_a_burst_then_counts_what_it_held_back() -> None:
    now = [0.0]
    limit = RateLimit(burst=3, interval=10, clock=lambda: now[0])
    kept = [limit.filter(_record("refused %s")) for _ in range(50)]
    assert kept.count(True) == 3
    assert limit.filter(_record("another message"))  # other kinds are not held back
    now[0] += 10
    record = _record("refused %s")
    assert limit.filter(record) and "[47 similar message(s) suppressed]" in str(record.msg)


def test_the_log_caps_everything_together() -> None:
    limit = RateLimit(burst=1000, max_per_minute=100, clock=lambda: 0.0)
    assert sum(limit.filter(_record(f"kind {i}")) for i in range(1000)) == 100


async def _echo(method: str, params: Any, ctx: Any) -> Any:
    if method == "big":
        return "x" * 5000
    return params


def _run(dispatcher: Dispatcher, frame: bytes) -> Any:
    async def go() -> bytes | None:
        return await dispatcher.handle_frame(frame)

    response = anyio.run(go)
    assert response is not None
    return json.loads(response)


def test_a_batch_longer_than_the_limit_is_refused_whole() -> None:
    dispatcher = Dispatcher(_echo, max_batch=10)
    batch = [{"jsonrpc": "2.0", "method": "echo", "id": i} for i in range(11)]
    answer = _run(dispatcher, json.dumps(batch).encode())
    assert answer["error"]["code"] == -32600
    assert "a batch of 11 requests (at most 10)" in answer["error"]["message"]


def test_a_batch_stops_running_once_its_reply_is_full() -> None:
    dispatcher = Dispatcher(_echo, max_reply=12_000)
    batch = [{"jsonrpc": "2.0", "method": "big", "id": i} for i in range(6)]
    answers = _run(dispatcher, json.dumps(batch).encode())
    assert [("result" in a) for a in answers] == [True, True, False, False, False, False]
    assert answers[2]["error"]["code"] == 1020
    assert all(a["id"] == i for i, a in enumerate(answers))
    single = _run(Dispatcher(_echo, max_reply=1000), b'{"jsonrpc":"2.0","method":"big","id":1}')
    assert single["error"]["data"]["details"]["size"] > 5000


def test_the_peer_check_refuses_a_descendant_of_a_monitor() -> None:
    a, b = socket.socketpair()
    with a, b:
        peer = peer_of(a)
        assert peer is not None and peer.pid == os.getpid() and peer.uid == os.getuid()
        assert refusal(peer, lambda: set()) is None
        assert refusal(peer, lambda: {os.getppid()}) is not None  # our parent: "a monitor"
        assert "descends from the monitor" in str(refusal(peer, lambda: {os.getppid()}))
        assert refusal(peer, lambda: {1 << 30}) is None


def test_the_peer_check_refuses_a_process_with_a_rounds_environment(tmp_path: Any) -> None:
    path = str(tmp_path / "s")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(1)
    code = f"import socket, time; s = socket.socket(socket.AF_UNIX); s.connect({path!r}); time.sleep(5)"
    env = {**os.environ, "TRAINEE_ROUND_DIR": "/somewhere"}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        conn, _ = server.accept()
        with conn:
            why = refusal(peer_of(conn), lambda: set())
        assert why is not None and "runs in a training round" in why
    finally:
        child.kill()
        child.wait()
        server.close()
