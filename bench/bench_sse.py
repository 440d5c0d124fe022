"""SSE fan-out, measured in one run on this machine.

A real daemon runs a one-round session whose training command prints 2,000 lines/s
(a tiny script in a temporary project, unsafe mode, random policy). The session runs
twice: once with no browser attached (the baseline) and once with 50 SSE clients
(httpx, one asyncio process) on ``/api/sessions/<id>/events``.

Prints:
- events lost or repeated per client, against the events the store kept (goal: 0)
- delivery latency (event ``ts`` to the moment a client read it): p50, p99, max
  (goal: p99 <= 200 ms)
- daemon CPU (utime + stime from /proc) during each session, and the ratio of the
  two: what 50 live clients cost on top of the session itself
"""

from __future__ import annotations

import asyncio
import os
import re
import select
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import httpx

CLIENTS = int(os.environ.get("BENCH_SSE_CLIENTS", "50"))
RATE = int(os.environ.get("BENCH_SSE_RATE", "2000"))
SECONDS = float(os.environ.get("BENCH_SSE_SECONDS", "6"))
GOAL_P99_MS = 200.0
TS_RE = re.compile(rb'"ts":([0-9.eE+-]+)')
CLK_TCK = os.sysconf("SC_CLK_TCK")

SPAM = textwrap.dedent(
    """
    import sys, time
    rate, seconds = int(sys.argv[2]), float(sys.argv[4])
    total = int(rate * seconds)
    start = time.monotonic()
    out = sys.stdout
    for i in range(total):
        if i % 100 == 99:
            out.write(f"step={i} loss={1.0 / (i + 1):.6f}\\n")
            out.flush()
            delay = start + (i + 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        else:
            out.write(f"step={i} tokens/s=1234.5 lr=0.001 grad_norm=0.42 a training log line\\n")
    out.write(f"final score={1.0 / total:.8f}\\n")
    """
)

PROJECT_YAML = textwrap.dedent(
    """
    version: 1
    launch:
      environment: system
      command: [python, spam.py]
    run:
      max_rounds: 1
      timeout_minutes: 5
      fixed_args:
        - flag: --rate
          value: {rate}
        - flag: --seconds
          value: {seconds}
    metrics:
      specs:
        - name: score
          source: stdout_regex
          key_or_pattern: 'final score=(?P<value>[0-9.eE+-]+)'
          goal: min
    advanced:
      security_mode: unsafe
    """
)


@dataclass
class Client:
    ids: list[int] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    cursor: int = 0


def _make_project(root: Path) -> Path:
    project = root / "spam-project"
    (project / ".trainee").mkdir(parents=True)
    (project / "spam.py").write_text(SPAM)
    (project / ".trainee" / "project.yaml").write_text(
        PROJECT_YAML.format(rate=RATE, seconds=SECONDS)
    )
    (project / ".trainee" / "tuning.yaml").write_text("version: 1\nparams: []\n")
    return project


def _start_daemon(runtime: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINEE_")}
    env.update(
        TRAINEE_SOCKET=str(runtime / "trainee.sock"),
        HOME=str(runtime / "home"),
        PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
    )
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainee.daemon", "--port", "0", "--ready-fd", str(write_fd)],
        env=env,
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        stderr=open(runtime / "daemon.log", "wb"),  # noqa: SIM115 - handed to the child
        start_new_session=True,
    )
    os.close(write_fd)
    line = b""
    deadline = time.monotonic() + 30
    while not line.endswith(b"\n") and time.monotonic() < deadline:
        ready, _, _ = select.select([read_fd], [], [], deadline - time.monotonic())
        chunk = os.read(read_fd, 1024) if ready else b""
        if not chunk:
            break
        line += chunk
    os.close(read_fd)
    if not line.startswith(b"READY"):
        proc.kill()
        raise SystemExit(f"daemon did not start: {line!r}")
    token = (runtime / "token").read_text().strip()
    return proc, line.split()[1].decode(), token


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def _listen(http: httpx.AsyncClient, path: str, client: Client, done: asyncio.Event) -> None:
    async with http.stream("GET", path) as response:
        response.raise_for_status()
        event_id: int | None = None
        named = False
        async for line in response.aiter_lines():
            now = time.time()
            if line.startswith("id:"):
                event_id = int(line[3:])
            elif line.startswith("event:"):
                named = True
            elif line.startswith("data:"):
                if named:
                    client.cursor = event_id or 0
                    client.ready.set()
                else:
                    assert event_id is not None
                    client.ids.append(event_id)
                    m = TS_RE.search(line.encode(), 0, 120)
                    if m:
                        client.latencies.append(now - float(m.group(1)))
                    if '"kind":"session.finished"' in line[:160]:
                        done.set()
                        return
            elif line == "":
                event_id, named = None, False


async def _wait_finished(http: httpx.AsyncClient, project: Path, session: str) -> None:
    while True:
        r = await http.post(
            "/api/tools/loop_get", json={"project_root": str(project), "session": session}
        )
        state = r.json()["result"]
        if not state["running"] and state["session"]["status"] != "running":
            return
        await asyncio.sleep(0.2)


def _stored_ids(project: Path, session: str, after: int) -> list[int]:
    db = project / ".trainee" / "runtime.sqlite3"
    deadline = time.monotonic() + 10
    while True:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
            rows = conn.execute(
                "SELECT id, kind FROM events WHERE session = ? AND id > ? ORDER BY id",
                (session, after),
            ).fetchall()
        if any(kind == "session.finished" for _, kind in rows) or time.monotonic() > deadline:
            return [int(i) for i, _ in rows]
        time.sleep(0.1)


async def _session(
    url: str, token: str, project: Path, pid: int, clients: int
) -> tuple[str, float, float, list[Client]]:
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    timeout = httpx.Timeout(60.0, read=120.0)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, limits=limits, timeout=timeout
    ) as http:
        r = await http.post("/api/tools/runs_list", json={"project_root": str(project)})
        index = len(r.json()["result"]["sessions"]) + 1 if r.status_code == 200 else 1
        session = f"session-{index:04d}"
        path = f"/api/sessions/{session}/events?project_root={quote(str(project))}"
        listeners = [Client() for _ in range(clients)]
        done = asyncio.Event()
        tasks = [asyncio.create_task(_listen(http, path, c, done)) for c in listeners]
        await asyncio.gather(*(c.ready.wait() for c in listeners))
        cpu0, wall0 = _cpu_seconds(pid), time.monotonic()
        r = await http.post(
            "/api/tools/loop_start",
            json={"project_root": str(project), "policy": "random", "security_mode": "unsafe"},
        )
        r.raise_for_status()
        assert r.json()["result"]["session"] == session, r.text
        await _wait_finished(http, project, session)
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
        cpu, wall = _cpu_seconds(pid) - cpu0, time.monotonic() - wall0
    return session, cpu, wall, listeners


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    runtime = Path(tempfile.mkdtemp(prefix="trb-", dir="/tmp"))
    project = _make_project(runtime)
    proc, url, token = _start_daemon(runtime)
    try:
        print(
            f"session: 1 round printing {RATE:,} lines/s for {SECONDS:g} s; {os.cpu_count()} CPUs"
        )
        _, base_cpu, base_wall, _ = asyncio.run(_session(url, token, project, proc.pid, 0))
        session, cpu, wall, clients = asyncio.run(_session(url, token, project, proc.pid, CLIENTS))
        cursor = min(c.cursor for c in clients)
        stored = _stored_ids(project, session, cursor)
        lost = [len(set(stored) - set(c.ids)) for c in clients]
        repeated = [len(c.ids) - len(set(c.ids)) for c in clients]
        out_of_order = sum(c.ids != sorted(c.ids) for c in clients)
        latencies = [x for c in clients for x in c.latencies]
        p50, p99 = _pct(latencies, 0.50) * 1000, _pct(latencies, 0.99) * 1000
        print(f"events stored for the session:  {len(stored):,}")
        print(
            f"SSE clients:                    {CLIENTS} "
            f"({sum(len(c.ids) for c in clients):,} events delivered in all)"
        )
        print(
            f"lost events:                    {sum(lost)} "
            f"(clients missing any: {sum(1 for n in lost if n)}); repeated: {sum(repeated)}; "
            f"clients out of order: {out_of_order}"
        )
        print(
            f"delivery latency:               p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
            f"max {max(latencies) * 1000:.1f} ms "
            f"(goal p99 <= {GOAL_P99_MS:.0f} ms: {'met' if p99 <= GOAL_P99_MS else 'NOT met'})"
        )
        base_pct = 100 * base_cpu / base_wall
        pct = 100 * cpu / wall
        print(
            f"daemon CPU, no client:          {base_cpu:.2f} s over {base_wall:.1f} s "
            f"({base_pct:.0f} % of a core)"
        )
        print(
            f"daemon CPU, {CLIENTS} clients:         {cpu:.2f} s over {wall:.1f} s "
            f"({pct:.0f} % of a core); ratio to no client: {cpu / max(base_cpu, 1e-9):.2f}x"
        )
        print(
            f"mean events per client per s:   {statistics.mean(len(c.ids) for c in clients) / wall:.0f}"
        )
        return 0 if sum(lost) == 0 and sum(repeated) == 0 else 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
