"""Soak: one long session of a flaky training command against the fake LLM server.

``python bench/soak.py [--rounds 200] [--seed 7]``

A real daemon (private socket, port 0) runs one ``llm`` session of ``--rounds`` rounds
in a temporary project (unsafe mode). The training command is flaky on purpose, drawn
per round from the seed: most rounds print a little and end with a metric, others exit
with a random error code, kill themselves with a signal, outlive the round timeout
(SIGTERM, grace, SIGKILL), or burst tens of thousands of lines to stdout and stderr.
FakeLLM (tests/fakes) answers every decision with a new plan, and now and then with
garbage first, so the repair path runs too.

A live subscriber follows the session's events over SSE from the start. Printed at the
end: the daemon's open fds, RSS and threads at the start (after round 3: litellm
loaded, two decisions made) and at the end (must stay flat), the round statuses, and events lost (stored
events the subscriber never got, plus rounds without their ``round.started`` /
``round.finished`` events; must be 0). Exit status 1 when a goal is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402

from tests.fakes.llm_server import FakeLLM  # noqa: E402
from tests.support.daemon import Daemon, base_env, kill_leftover_daemons  # noqa: E402
from trainee.rpc.client import RpcClient  # noqa: E402

SESSION = "session-0001"
TIMEOUT_MINUTES = 0.025
"""1.5 s: the rounds drawn to hang are stopped by the round timeout."""
GOAL_FDS = 3
GOAL_THREADS = 3
GOAL_RSS_MIB = 16.0
"""RSS growth allowed from the first quarter of the rounds (caches and the event window
filled, arenas grown) to the end."""

TRAIN_PY = textwrap.dedent(
    """\
    import argparse, os, random, signal, sys, time

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    index = int(os.environ.get("TRAINEE_ROUND_INDEX", "0"))
    rng = random.Random(args.seed * 100003 + index)
    kind = rng.choices(
        ["ok", "exit", "signal", "hang", "burst"], weights=[55, 12, 6, 7, 20]
    )[0]
    print(f"round {index} kind={kind}", flush=True)
    if kind == "burst":
        out, err = sys.stdout, sys.stderr
        for i in range(rng.randint(5000, 40000)):
            out.write(f"step={i} loss={1.0 / (i + 1):.6f} tokens/s=1234.5 a burst line\\n")
            if i % 997 == 0:
                err.write(f"warning: step {i} is slow\\n")
        out.flush()
    else:
        for i in range(rng.randint(1, 5)):
            print(f"step={i} loss={1.0 / (i + 1):.4f}", flush=True)
    if kind == "exit":
        print("crashed", file=sys.stderr, flush=True)
        sys.exit(rng.choice([1, 2, 3, 42, 127, 255]))
    if kind == "signal":
        os.kill(os.getpid(), rng.choice([signal.SIGKILL, signal.SIGSEGV, signal.SIGABRT]))
    if kind == "hang":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # stopped only by the SIGKILL
        time.sleep(60)
    print(f"final val_loss={(args.lr - 0.05) ** 2 + 0.1:.6f}", flush=True)
    """
)

PROJECT_YAML = """\
version: 1
launch:
  command: [python, train.py]
  args:
    - flag: --seed
      value: {seed}
run:
  max_rounds: {rounds}
  timeout_minutes: {timeout}
metrics:
  specs:
    - name: val_loss
      source: stdout_regex
      key_or_pattern: 'final val_loss=(?P<value>-?\\d+(?:\\.\\d+)?)'
      goal: min
      required: false
advanced:
  security_mode: unsafe
  stop_grace_sec: 0.5
"""

TUNING_YAML = """\
version: 1
params:
  - name: lr
    flag: --lr
    type: float
    default: 0.1
    min_value: 0.000001
    max_value: 1.0
"""


def plan(lr: float, index: int) -> dict[str, Any]:
    body = {
        "hypothesis": f"soak plan {index}",
        "change_summary": f"lr {lr:.6g}",
        "params": {"lr": lr},
        "expected": "val_loss decreases",
        "stop": False,
        "stop_reason": "",
    }
    return {"content": json.dumps(body)}


def llm_script(rounds: int, rng: random.Random) -> list[dict[str, Any]]:
    """The live test's OK, then per decision a new plan (every lr distinct), sometimes
    after a garbage answer that the repair round-trip must fix."""
    items: list[dict[str, Any]] = [{"content": "OK"}]
    for index in range(2, rounds + 2):
        if rng.random() < 0.05:
            items.append({"content": "Sure! {lr: bigger"})
        items.append(plan(round(1e-4 + (index * 0.6180339887 % 1.0) * 0.9, 8), index))
    return items


def fd_kinds(pid: int) -> Counter[str]:
    """The daemon's open fds by kind (socket, pipe, anon_inode:..., or the file's folder)."""
    kinds: Counter[str] = Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if ":" in target and not target.startswith("/"):
            kinds[target.split(":[")[0]] += 1  # socket, pipe, anon_inode:inotify, ...
        else:
            kinds[os.path.dirname(target)] += 1
    return kinds


def proc_stats(pid: int) -> dict[str, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return {
        "fds": float(len(os.listdir(f"/proc/{pid}/fd"))),
        "rss_mib": int(fields["VmRSS"].split()[0]) / 1024,
        "threads": float(fields["Threads"].strip()),
    }


class Subscriber(threading.Thread):
    """Reads the session's SSE stream from the start and keeps every event id."""

    def __init__(self, url: str, token: str, project: Path) -> None:
        super().__init__(daemon=True)
        self.url = f"{url}/api/sessions/{SESSION}/events?since=0&project_root={project}"
        self.headers = {"Authorization": f"Bearer {token}"}
        self.ids: list[int] = []
        self.kinds: Counter[str] = Counter()
        self.finished = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            with (
                httpx.Client(timeout=httpx.Timeout(30, read=120)) as http,
                http.stream("GET", self.url, headers=self.headers) as response,
            ):
                event_id: int | None = None
                for line in response.iter_lines():
                    if line.startswith("id: "):
                        event_id = int(line[4:])
                    elif line.startswith("data: ") and event_id is not None:
                        data = json.loads(line[6:])
                        if "kind" not in data:
                            continue  # a control frame (ready, gap)
                        self.ids.append(event_id)
                        self.kinds[data["kind"]] += 1
                        if data["kind"] == "session.finished":
                            self.finished.set()
                            return
                    elif line.startswith("event: "):
                        event_id = None
        except Exception as exc:  # reported in the table, the soak goes on
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.finished.set()


def stored_events(database: Path) -> list[tuple[int, str, dict[str, Any]]]:
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT id, kind, data FROM events WHERE session = ? ORDER BY id", (SESSION,)
        ).fetchall()
    db.close()
    return [(int(i), str(k), json.loads(d)) for i, k, d in rows]


def soak(rounds: int, seed: int, policy: str = "llm") -> int:
    rng = random.Random(seed)
    base = Path(tempfile.mkdtemp(prefix="tr-soak-", dir="/tmp"))
    project = base / "proj"
    (project / ".trainee").mkdir(parents=True)
    (project / "train.py").write_text(TRAIN_PY)
    (project / ".trainee" / "project.yaml").write_text(
        PROJECT_YAML.format(seed=seed, rounds=rounds, timeout=TIMEOUT_MINUTES)
    )
    (project / ".trainee" / "tuning.yaml").write_text(TUNING_YAML)
    runtime = base / "run"
    runtime.mkdir()
    daemon = Daemon(runtime=runtime, env=base_env(runtime))
    started = time.monotonic()
    try:
        ready = daemon.start()
        if not ready.startswith("READY") or daemon.proc is None:
            print(f"the daemon did not start: {ready}\n{daemon.log}", file=sys.stderr)
            return 1
        pid = daemon.proc.pid
        with FakeLLM(llm_script(rounds, rng)) as fake:
            env = {
                k: v
                for k, v in daemon.env.items()
                if not k.startswith(("OPENAI_", "ANTHROPIC_", "MOONSHOT_", "LLM_PROVIDER"))
            }
            env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
            env.update(
                TRAINEE_LLM_PROVIDER="openai_compatible",
                TRAINEE_LLM_BASE_URL=fake.openai_base_url,
                TRAINEE_LLM_MODEL="fake-model",
                TRAINEE_LLM_API_KEY="sk-soak-0000",
            )
            subscriber = Subscriber(daemon.http_url, daemon.token, project)
            with RpcClient(daemon.socket, timeout=120) as client:
                client.call(
                    "loop_start",
                    {
                        "project_root": str(project),
                        "env": env,
                        "cwd": str(project),
                        "policy": policy,
                    },
                )
                subscriber.start()
                start_stats: dict[str, float] | None = None
                warm_stats: dict[str, float] | None = None
                peak = {"fds": 0.0, "rss_mib": 0.0, "threads": 0.0}
                last_report = time.monotonic()
                while True:
                    state = client.call(
                        "loop_get", {"project_root": str(project), "session": SESSION}
                    )
                    done = [r for r in state["rounds"] if r["status"] not in ("pending", "running")]
                    stats = proc_stats(pid)
                    peak = {k: max(peak[k], stats[k]) for k in peak}
                    if start_stats is None and len(done) >= 3:  # two decisions made
                        start_stats = stats
                        start_fds = fd_kinds(pid)
                    if warm_stats is None and len(done) >= rounds // 4:
                        warm_stats = stats
                    if state["session"]["status"] != "running" and not state["running"]:
                        break
                    if time.monotonic() - last_report > 15:
                        last_report = time.monotonic()
                        print(
                            f"  ... {len(done)}/{rounds} rounds, {time.monotonic() - started:.0f} s,"
                            f" RSS {stats['rss_mib']:.1f} MiB, fds {stats['fds']:.0f}",
                            flush=True,
                        )
                    time.sleep(0.25)
                subscriber.finished.wait(60)
                end_stats = proc_stats(pid)
                end_fds = fd_kinds(pid)
            requests = len(fake.requests)
        elapsed = time.monotonic() - started
    finally:
        daemon.stop()
        kill_leftover_daemons(daemon)

    assert start_stats is not None and warm_stats is not None
    statuses = Counter(r["status"] for r in state["rounds"])
    stored = stored_events(project / ".trainee" / "runtime.sqlite3")
    stored_ids = [i for i, _, _ in stored]
    seen = set(subscriber.ids)
    missing_live = [i for i in stored_ids if i not in seen]
    duplicated = len(subscriber.ids) - len(seen)
    started_rounds = Counter(d["round"] for _, k, d in stored if k == "round.started")
    finished_rounds = Counter(d["round"] for _, k, d in stored if k == "round.finished")
    indices = [r["index"] for r in state["rounds"]]
    missing_round_events = sum(
        1 for i in indices if started_rounds[i] < 1 or finished_rounds[i] != 1
    )
    lost = len(missing_live) + missing_round_events + duplicated
    left = [p for p in os.listdir("/proc") if p.isdigit() and _names(int(p), project)]

    session = state["session"]
    print()
    print(
        f"soak: {len(indices)} rounds in {elapsed:.0f} s ({elapsed / max(1, len(indices)):.2f} s/round), seed {seed}"
    )
    print(f"session: {session['status']} / {session['stop_reason']}  error: {session['error']}")
    print("round statuses: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))
    print(f"decision requests: {requests - 1} for {len(indices) - 1} decisions")
    print()
    quarter = f"round {rounds // 4}"
    print(f"{'':14}{'round 3':>10}{quarter:>11}{'end':>10}{'peak':>10}{'end - ' + quarter:>17}")
    for key, label in (("fds", "open fds"), ("rss_mib", "RSS MiB"), ("threads", "threads")):
        a, w, b, p = start_stats[key], warm_stats[key], end_stats[key], peak[key]
        print(f"{label:14}{a:10.1f}{w:11.1f}{b:10.1f}{p:10.1f}{b - w:+17.1f}")
    grown = {
        k: end_fds[k] - start_fds[k] for k in end_fds | start_fds if end_fds[k] != start_fds[k]
    }
    if grown:
        print("fds that changed: " + ", ".join(f"{k} {v:+d}" for k, v in sorted(grown.items())))
    print()
    print(
        f"events stored {len(stored_ids)}, received live {len(subscriber.ids)}, "
        f"lost {lost} (not received {len(missing_live)}, duplicated {duplicated}, "
        f"rounds missing their events {missing_round_events})"
    )
    if subscriber.error:
        print(f"subscriber error: {subscriber.error}")
    print(f"processes of the project left: {len(left)}")

    problems = []
    if session["status"] != "finished" or session["stop_reason"] != "max_rounds":
        problems.append("the session did not run to max_rounds")
    if len(indices) != rounds:
        problems.append(f"{len(indices)} rounds instead of {rounds}")
    if end_stats["fds"] - start_stats["fds"] > GOAL_FDS:
        problems.append("open fds grew")
    if end_stats["threads"] - start_stats["threads"] > GOAL_THREADS:
        problems.append("threads grew")
    if end_stats["rss_mib"] - warm_stats["rss_mib"] > GOAL_RSS_MIB:
        problems.append("RSS grew after the warm-up")
    if lost or subscriber.error:
        problems.append("events were lost")
    if left:
        problems.append("processes were left")
    print("result: " + ("OK" if not problems else "FAILED: " + "; ".join(problems)))
    if not problems:
        shutil.rmtree(base, ignore_errors=True)
    else:
        print(f"kept for inspection: {base}")
    return 0 if not problems else 1


def _names(pid: int, project: Path) -> bool:
    """True for a live process whose command line names the project or whose cwd is in it."""
    root = str(project)
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return False
    if stat[stat.rfind(b")") + 2 :].split()[0] in (b"Z", b"X"):
        return False
    return root.encode() in cmdline or cwd == root or cwd.startswith(root + "/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=200, help="rounds of the session")
    parser.add_argument("--seed", type=int, default=7, help="draws the flaky behaviour")
    parser.add_argument(
        "--policy", choices=["llm", "random"], default="llm", help="who decides (default: llm)"
    )
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2")
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    return soak(args.rounds, args.seed, args.policy)


if __name__ == "__main__":
    sys.exit(main())
