"""Attacks on a running daemon by misbehaving clients, and the probes that measure what
they cost everyone else. Shared by tests/security/test_daemon_*.py (small, asserting)
and bench/abuse.py (larger, measuring).

Every attack is bounded in count and time and targets only this machine (the daemon's
Unix socket and its 127.0.0.1 port). A :class:`Probe` is "another client": it calls
``daemon_hello`` over a socket connection it opened before the attack and over HTTP
with the token, every few milliseconds, and keeps the latencies. A :class:`Sampler`
follows the daemon's file descriptors and memory.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.support.projects import LR_TUNING_YAML

__all__ = [
    "ATTACKS",
    "Probe",
    "Sampler",
    "Target",
    "batch_bomb",
    "big_frames",
    "http_idle_flood",
    "publish_notes",
    "reply_bomb",
    "rpc",
    "slowloris",
    "socket_flood",
    "stalled_watchers",
    "tokenless_flood",
]


@dataclass
class Target:
    """A running daemon: where to reach it and its process."""

    socket: Path
    http_url: str
    token: str
    pid: int

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.http_url)
        return parts.hostname or "127.0.0.1", parts.port or 80

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def _connect(path: Path, timeout: float = 10.0) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except BaseException:
        sock.close()
        raise
    return sock


def _read_line(sock: socket.socket, buf: bytearray) -> bytes:
    while b"\n" not in buf:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the daemon closed the connection")
        buf += chunk
    line, _, rest = bytes(buf).partition(b"\n")
    buf[:] = rest
    return line


def rpc(path: Path, method: str, params: Any = None, timeout: float = 30.0) -> dict[str, Any]:
    """One JSON-RPC request on a fresh socket connection; the whole response object."""
    with _connect(path, timeout) as sock:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": 1}
        if params is not None:
            message["params"] = params
        sock.sendall(json.dumps(message).encode() + b"\n")
        buf = bytearray()
        while True:
            reply: dict[str, Any] = json.loads(_read_line(sock, buf))
            if "id" in reply:
                return reply


def _reset(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), as a client that dies does."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with suppress(OSError):
        sock.close()


# -- measuring ----------------------------------------------------------------------------


@dataclass
class Probe:
    """Another client, calling ``daemon_hello`` all along, over the socket and HTTP."""

    target: Target
    interval: float = 0.02
    timeout: float = 30.0
    socket_ms: list[float] = field(default_factory=list)
    http_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _socket_loop(self) -> None:
        try:
            sock = _connect(self.target.socket, self.timeout)
        except OSError as exc:
            self.errors.append(f"socket connect: {exc}")
            return
        buf = bytearray()
        ids = 0
        with sock:
            while not self._stop.is_set():
                ids += 1
                start = time.perf_counter()
                try:
                    sock.sendall(b'{"jsonrpc":"2.0","method":"daemon_hello","id":%d}\n' % ids)
                    reply = json.loads(_read_line(sock, buf))
                except (OSError, ValueError) as exc:
                    self.errors.append(f"socket: {exc!r}")
                    return
                if "result" not in reply:
                    self.errors.append(f"socket: {reply}")
                self.socket_ms.append((time.perf_counter() - start) * 1000)
                self._stop.wait(self.interval)

    def _http_loop(self) -> None:
        with httpx.Client(
            base_url=self.target.http_url, headers=self.target.headers(), timeout=self.timeout
        ) as client:
            while not self._stop.is_set():
                start = time.perf_counter()
                try:
                    response = client.post("/api/tools/daemon_hello", json={})
                except httpx.HTTPError as exc:
                    self.errors.append(f"http: {exc!r}")
                    self._stop.wait(self.interval)
                    continue
                if response.status_code != 200:
                    self.errors.append(f"http: {response.status_code} {response.text[:200]}")
                self.http_ms.append((time.perf_counter() - start) * 1000)
                self._stop.wait(self.interval)

    def _answers(self) -> tuple[int, int]:
        return len(self.socket_ms), len(self.http_ms)

    def _wait_for_answers(self, after: tuple[int, int]) -> None:
        """Until both loops have one more answer than ``after`` (or failed, or timed out)."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and not self.errors:
            now = self._answers()
            if now[0] > after[0] and now[1] > after[1]:
                return
            if not any(t.is_alive() for t in self._threads):
                return
            time.sleep(0.005)

    def __enter__(self) -> Probe:
        for loop in (self._socket_loop, self._http_loop):
            thread = threading.Thread(target=loop, daemon=True)
            thread.start()
            self._threads.append(thread)
        self._wait_for_answers((0, 0))  # both connections answer before the attack starts
        return self

    def __exit__(self, *exc: object) -> None:
        self._wait_for_answers(self._answers())  # and both answer again after it
        self._stop.set()
        for thread in self._threads:
            thread.join(self.timeout + 5)

    @staticmethod
    def p99(values: list[float]) -> float:
        if not values:
            return float("inf")
        if len(values) < 2:
            return values[0]
        return statistics.quantiles(values, n=100, method="inclusive")[98]

    @property
    def worst_p99_ms(self) -> float:
        return max(self.p99(self.socket_ms), self.p99(self.http_ms))

    @property
    def worst_ms(self) -> float:
        return max([*self.socket_ms, *self.http_ms, 0.0])


def fds_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


class Sampler:
    """Peak file descriptors and resident memory of the daemon while it runs."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_fds = 0
        self.peak_rss_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            with suppress(OSError, KeyError, ValueError):
                self.peak_fds = max(self.peak_fds, fds_of(self.pid))
                self.peak_rss_kib = max(self.peak_rss_kib, status_kib(self.pid, "VmRSS"))
            self._stop.wait(self.interval)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


# -- attacks ------------------------------------------------------------------------------


def stalled_watchers(
    target: Target, *, watchers: int = 20, notes: int = 200, note_bytes: int = 50_000
) -> dict[str, Any]:
    """Watchers that ask for every event, stop reading while megabytes are pushed at
    them, then die (a reset): ``trainee attach S | head`` in bulk."""
    socks = []
    for _ in range(watchers):
        sock = _connect(target.socket)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b'{"jsonrpc":"2.0","method":"events_watch","params":{"since":0},"id":1}\n')
        socks.append(sock)
    publish_notes(target, notes=notes, note_bytes=note_bytes)
    for sock in socks:
        _reset(sock)
    return {"watchers": watchers, "pushed_bytes": notes * note_bytes}


def publish_notes(
    target: Target, *, notes: int, note_bytes: int, session: str | None = None
) -> None:
    """``notes`` annotations of ``note_bytes`` each on the event stream, one after another."""
    text = "x" * note_bytes
    with _connect(target.socket) as publisher:
        buf = bytearray()
        for i in range(notes):
            params: dict[str, Any] = {"kind": "note.abuse", "data": {"i": i, "text": text}}
            if session is not None:
                params["session"] = session
            message = {"jsonrpc": "2.0", "method": "events_publish", "params": params, "id": i}
            publisher.sendall(json.dumps(message).encode() + b"\n")
            _read_line(publisher, buf)


def socket_flood(target: Target, *, connections: int = 300, hold: float = 1.0) -> dict[str, Any]:
    """Many idle connections on the Unix socket at once; counts the ones refused."""
    socks: list[socket.socket] = []
    refused = 0
    messages: set[str] = set()
    try:
        for _ in range(connections):
            try:
                sock = _connect(target.socket, timeout=5)
            except OSError:
                refused += 1
                continue
            socks.append(sock)
        time.sleep(0.2)
        for sock in socks:
            sock.settimeout(0.05)
            with suppress(OSError, ValueError):
                data = sock.recv(4096)
                if data:
                    refused += 1
                    messages.add(json.loads(data.split(b"\n")[0])["error"]["message"])
        time.sleep(hold)
    finally:
        for sock in socks:
            _reset(sock)
    return {"connections": connections, "refused": refused, "messages": sorted(messages)}


def http_idle_flood(target: Target, *, connections: int = 300, hold: float = 1.0) -> dict[str, Any]:
    """Idle TCP connections to the HTTP port, no request and no token."""
    socks: list[socket.socket] = []
    try:
        for _ in range(connections):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(5)
            try:
                sock.connect(target.address)
            except OSError:
                sock.close()
                continue
            socks.append(sock)
        time.sleep(hold)
        closed = 0  # evicted, or answered 503 and closed: either way the daemon let go
        for sock in socks:
            sock.settimeout(0.01)
            try:
                sock.recv(1)
                closed += 1
            except (TimeoutError, BlockingIOError):
                pass
            except OSError:
                closed += 1
    finally:
        for sock in socks:
            _reset(sock)
    return {"connections": len(socks), "closed_by_daemon": closed}


def slowloris(target: Target, *, connections: int = 20, seconds: float = 2.0) -> dict[str, Any]:
    """Request headers trickled a byte at a time, never finished."""
    socks = []
    for _ in range(connections):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.connect(target.address)
        sock.sendall(b"GET /api/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        socks.append(sock)
    deadline = time.monotonic() + seconds
    alive = len(socks)
    while time.monotonic() < deadline and alive:
        alive = 0
        for sock in socks:
            try:
                sock.sendall(b"X")
                alive += 1
            except OSError:
                pass
        time.sleep(0.2)
    for sock in socks:
        _reset(sock)
    return {"connections": connections, "still_open": alive}


def tokenless_flood(target: Target, *, requests: int = 200) -> dict[str, Any]:
    """Requests without the token, each on a connection it tries to keep open."""
    statuses: dict[int, int] = {}
    kept_open = 0
    host, port = target.address
    for _ in range(requests):
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(
                f"POST /api/tools/loop_start HTTP/1.1\r\nHost: {host}:{port}\r\n"
                "Content-Length: 2\r\nConnection: keep-alive\r\n\r\n{}".encode()
            )
            data = b""
            while True:
                try:
                    chunk = sock.recv(65536)
                except TimeoutError:
                    kept_open += 1
                    break
                if not chunk:
                    break
                data += chunk
            status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0
            statuses[status] = statuses.get(status, 0) + 1
    return {"requests": requests, "statuses": statuses, "kept_open": kept_open}


def batch_bomb(target: Target, *, length: int = 10_000) -> dict[str, Any]:
    """One JSON-RPC batch of ``length`` ``tools_list`` calls."""
    batch = [{"jsonrpc": "2.0", "method": "tools_list", "id": i} for i in range(length)]
    with _connect(target.socket, timeout=120) as sock:
        sock.sendall(json.dumps(batch).encode() + b"\n")
        reply = json.loads(_read_line(sock, bytearray()))
    if isinstance(reply, dict):
        return {"length": length, "error": reply.get("error", {}).get("message")}
    return {"length": length, "answered": len(reply), "bytes": len(json.dumps(reply))}


def reply_bomb(target: Target, *, length: int = 40) -> dict[str, Any]:
    """A batch whose replies together would pass the reply limit (events_list of a
    bus full of large notes)."""
    publish_notes(target, notes=60, note_bytes=60_000)
    batch = [
        {"jsonrpc": "2.0", "method": "events_list", "params": {"limit": 10_000}, "id": i}
        for i in range(length)
    ]
    with _connect(target.socket, timeout=120) as sock:
        sock.sendall(json.dumps(batch).encode() + b"\n")
        line = _read_line(sock, bytearray())
    replies = json.loads(line)
    over = [r for r in replies if r.get("error", {}).get("code") == 1020]
    return {"length": length, "bytes": len(line), "refused": len(over)}


def big_frames(
    target: Target, *, senders: int = 16, frame_bytes: int = int(3.5 * 2**20)
) -> dict[str, Any]:
    """Clients each sending a frame just under the size limit, all at once."""
    head = b'{"jsonrpc":"2.0","method":"events_publish","params":{"data":{"x":"'
    chunk = b"z" * 65536
    errors: list[str] = []

    def send() -> None:
        try:
            with _connect(target.socket, timeout=60) as sock:
                sock.sendall(head)
                sent = len(head)
                while sent < frame_bytes:
                    sock.sendall(chunk)
                    sent += len(chunk)
                sock.sendall(b'"}},"id":1}\n')
                reply = json.loads(_read_line(sock, bytearray()))
                if "error" in reply:
                    errors.append(reply["error"]["message"])
        except (OSError, ValueError) as exc:
            errors.append(repr(exc))

    threads = [threading.Thread(target=send) for _ in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return {"senders": senders, "frame_bytes": frame_bytes, "errors": errors}


# -- hostile projects (sessions whose metric config or files are the attack) -----------------

PROJECT = """\
version: 1
launch:
  command: [python, train.py]
run:
  max_rounds: 1
  timeout_minutes: 5
metrics:
  specs:
{specs}
advanced:
  security_mode: unsafe
  stop_grace_sec: 2
{advanced}
"""


def metric_project(root: Path, train: str, specs: str, advanced: str = "") -> Path:
    (root / ".trainee").mkdir(parents=True)
    (root / "train.py").write_text(train)
    (root / ".trainee" / "project.yaml").write_text(PROJECT.format(specs=specs, advanced=advanced))
    (root / ".trainee" / "tuning.yaml").write_text(LR_TUNING_YAML)
    return root


SLOW = r"(?=(?:[^\n]*\n){0,500}zzz)(?P<value>\d)"
SPAM = """\
import sys
for i in range(60_000):
    print(f"{i % 10} ok={i}")
print("final val_loss=0.5", flush=True)
"""


GIANT_LINE = """\
import json, os
path = os.path.join(os.environ["TRAINEE_ROUND_DIR"], "outputs", "metrics.jsonl")
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "wb") as fh:
    fh.write(json.dumps({"val_loss": 0.25}).encode() + b"\\n")
    fh.truncate(fh.tell() + (1 << 30))  # one line of a gigabyte (sparse)
    fh.seek(0, os.SEEK_END)
    fh.write(b"\\n")
print("done", flush=True)
"""


FIFO_AND_LINK = """\
import json, os
out = os.path.join(os.environ["TRAINEE_ROUND_DIR"], "outputs")
os.makedirs(out, exist_ok=True)
os.mkfifo(os.path.join(out, "train.log"))  # a log path nobody writes: a blocking open hangs
os.symlink({secret!r}, os.path.join(out, "metrics.jsonl"))
print("final val_loss=0.5", flush=True)
"""


BACKTRACKING_SPECS = (
    "    - name: val_loss\n      source: stdout_regex\n"
    "      key_or_pattern: 'final val_loss=(?P<value>[0-9.]+)'\n"
    f"    - name: slow\n      source: stdout_regex\n      key_or_pattern: '{SLOW}'\n"
)
GIANT_SPECS = (
    "    - name: val_loss\n      source: jsonl\n      key_or_pattern: val_loss\n"
    "      path: '{outputs_dir}/metrics.jsonl'\n"
)


def run_session(target: Target, project: Path, *, timeout: float = 300) -> dict[str, Any]:
    """Start a session (random policy, the caller's PATH) and wait for its end; its state."""
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
    params = {"project_root": str(project), "env": env, "cwd": str(project), "policy": "random"}
    started = rpc(target.socket, "loop_start", params, timeout=timeout)
    assert "result" in started, started
    deadline = time.monotonic() + timeout
    while True:
        reply = rpc(target.socket, "loop_get", {"project_root": str(project)})
        state: dict[str, Any] = reply["result"]
        if state["session"]["status"] != "running" and not state["running"]:
            return state
        if time.monotonic() > deadline:
            raise TimeoutError(f"session of {project} still running after {timeout} s")
        time.sleep(0.1)


def backtracking_session(target: Target, root: Path) -> dict[str, Any]:
    """A session whose metric pattern backtracks on every line of a chatty job."""
    state = run_session(target, metric_project(root / "slow", SPAM, BACKTRACKING_SPECS))
    warnings = " ".join(" ".join(r.get("warnings") or []) for r in state["rounds"])
    return {"status": state["rounds"][0]["status"], "disabled": "disabled" in warnings}


def giant_line_session(target: Target, root: Path) -> dict[str, Any]:
    """A session whose job writes a JSONL metrics file with a line of a gigabyte."""
    state = run_session(target, metric_project(root / "giant", GIANT_LINE, GIANT_SPECS))
    return {"status": state["rounds"][0]["status"], "finals": state["rounds"][0]["finals"]}


ATTACKS: dict[str, Callable[[Target], dict[str, Any]]] = {
    "stalled watchers (attach | head)": stalled_watchers,
    "300 idle socket connections": socket_flood,
    "300 idle TCP connections": http_idle_flood,
    "slowloris headers": slowloris,
    "requests without a token": tokenless_flood,
    "batch of 10,000 tools_list": batch_bomb,
    "batch whose reply passes 16 MiB": reply_bomb,
    "16 frames of 3.5 MiB at once": big_frames,
}


@contextmanager
def measured(target: Target) -> Iterator[tuple[Probe, Sampler]]:
    """A probe and a sampler around a block."""
    with Sampler(target.pid) as sampler, Probe(target) as probe:
        yield probe, sampler
