"""What each abuse costs everyone else, measured in one run on this machine.

For every attack of tests/security/attacks.py (plus two sessions whose metric config or
files are the attack), a fresh daemon starts with a low open-file limit
(``TRAINEE_FD_LIMIT``, 256 by default, so the connection attacks reach it). A probe
client calls ``daemon_hello`` over the Unix socket and over HTTP every 20 ms: first
for a few seconds with nothing else going on (the idle baseline), then during the
attack. Prints per attack:

- others' p99 latency during the attack as a ratio to the idle p99 of the same daemon
  (the worse of socket and HTTP), and the worst single call;
- the daemon's peak resident memory and peak open file descriptors during the attack;
- whether it survived, and what the attack got back.

Bounded: every attack has a fixed count and duration and targets only this machine.
``BENCH_ABUSE_TCP`` sets the idle TCP connections of the flood (default 5000: the
issue's 20,000 works too when this process may open that many files).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.security import attacks
from tests.security.attacks import Probe, Sampler, Target
from tests.support.daemon import Daemon, base_env, kill_leftover_daemons

FD_LIMIT = int(os.environ.get("BENCH_ABUSE_FD_LIMIT", "256"))
TCP = int(os.environ.get("BENCH_ABUSE_TCP", "5000"))
IDLE_SEC = float(os.environ.get("BENCH_ABUSE_IDLE_SEC", "3"))
MIN_SEC = float(os.environ.get("BENCH_ABUSE_MIN_SEC", "3"))


def _raise_own_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _one(name: str, attack: Callable[[Target, Path], dict[str, Any]]) -> dict[str, Any]:
    runtime = Path(tempfile.mkdtemp(prefix="tr-abuse-", dir="/tmp"))
    env = {**base_env(runtime), "TRAINEE_FD_LIMIT": str(FD_LIMIT)}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    daemon = Daemon(runtime=runtime, env=env)
    line = daemon.start()
    if not line.startswith("READY") or daemon.proc is None:
        raise SystemExit(f"daemon did not start: {line!r}\n{daemon.log}")
    target = Target(daemon.socket, daemon.http_url, daemon.token, daemon.proc.pid)
    try:
        with Probe(target) as idle:
            time.sleep(IDLE_SEC)
        with Sampler(target.pid) as sampler, Probe(target) as probe:
            started = time.monotonic()
            repeats = 0
            # a quick attack is repeated for MIN_SEC, so the probe sees enough of it
            while repeats == 0 or time.monotonic() - started < MIN_SEC:
                repeats += 1
                try:
                    outcome = attack(target, runtime)
                except Exception as exc:  # the attack's own failure is a result
                    outcome = {"attack failed": repr(exc)[:200]}
            outcome["repeats"] = repeats
            took = time.monotonic() - started
        alive = daemon.proc.poll() is None
        if alive:
            try:
                alive = "result" in attacks.rpc(target.socket, "daemon_hello", timeout=30)
            except OSError:
                alive = False
        log_bytes = os.path.getsize(runtime / "daemon.log")
    finally:
        daemon.stop()
        kill_leftover_daemons(daemon)
        shutil.rmtree(runtime, ignore_errors=True)
    idle_p99 = max(Probe.p99(idle.socket_ms), Probe.p99(idle.http_ms))
    return {
        "attack": name,
        "idle_p99_ms": idle_p99,
        "p99_ms": probe.worst_p99_ms,
        "ratio": probe.worst_p99_ms / idle_p99 if idle_p99 else float("inf"),
        "worst_ms": probe.worst_ms,
        "probe_errors": len(probe.errors),
        "peak_rss_mb": sampler.peak_rss_kib / 1024,
        "peak_fds": sampler.peak_fds,
        "alive": alive,
        "log_kb": log_bytes / 1024,
        "seconds": took,
        "outcome": outcome,
    }


def _plain(fn: Callable[..., dict[str, Any]], **kw: Any) -> Callable[[Target, Path], Any]:
    def run(target: Target, root: Path) -> dict[str, Any]:
        return fn(target, **kw)

    return run


def _once(fn: Callable[[Target, Path], dict[str, Any]]) -> Callable[[Target, Path], Any]:
    """A session attack: one project folder per repetition."""
    count = 0

    def run(target: Target, root: Path) -> dict[str, Any]:
        nonlocal count
        count += 1
        folder = root / f"run-{count}"
        folder.mkdir()
        return fn(target, folder)

    return run


ATTACKS: list[tuple[str, Callable[[Target, Path], dict[str, Any]]]] = [
    ("20 watchers stop reading, then die", _plain(attacks.stalled_watchers, watchers=20)),
    ("300 idle socket connections", _plain(attacks.socket_flood, connections=300, hold=2)),
    (
        f"{TCP} idle TCP connections",
        _plain(attacks.http_idle_flood, connections=TCP, hold=2),
    ),
    ("50 slowloris connections", _plain(attacks.slowloris, connections=50, seconds=12)),
    ("500 requests without a token", _plain(attacks.tokenless_flood, requests=500)),
    ("a batch of 10,000 tools_list", _plain(attacks.batch_bomb, length=10_000)),
    ("a batch of 256 tools_list (the most)", _plain(attacks.batch_bomb, length=256)),
    ("a batch whose reply passes 16 MiB", _plain(attacks.reply_bomb, length=40)),
    ("16 frames of 3.5 MiB at once", _plain(attacks.big_frames, senders=16)),
    ("a backtracking metric pattern", _once(attacks.backtracking_session)),
    ("a 1 GiB JSONL line", _once(attacks.giant_line_session)),
]


def main() -> int:
    _raise_own_fd_limit()
    only = os.environ.get("BENCH_ABUSE_ONLY")
    rows = [
        _one(name, partial(attack))
        for name, attack in ATTACKS
        if not only or only.lower() in name.lower()
    ]
    print(f"abuse bench: daemon open-file limit {FD_LIMIT}, idle baseline {IDLE_SEC:g} s each")
    header = (
        f"{'attack':38} {'idle p99':>9} {'p99':>9} {'ratio':>6} {'worst':>8} "
        f"{'RSS MB':>7} {'fds':>5} {'log KB':>7} {'up':>3}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['attack'][:38]:38} {r['idle_p99_ms']:8.1f}m {r['p99_ms']:8.1f}m "
            f"{r['ratio']:6.1f} {r['worst_ms']:7.0f}m {r['peak_rss_mb']:7.1f} "
            f"{r['peak_fds']:5d} {r['log_kb']:7.1f} {'yes' if r['alive'] else 'NO':>3}"
        )
    print()
    for r in rows:
        print(f"- {r['attack']}: {json.dumps(r['outcome'])[:300]} ({r['seconds']:.1f} s)")
    return 0 if all(r["alive"] and not r["probe_errors"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
