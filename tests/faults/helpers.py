"""Shared pieces of the fault tests: a tiny controllable project, a restartable daemon,
RPC over the socket in-process (polling through the CLI would cost a Python start per poll),
and the orphan checks every fault test ends with. Every deadline here is nominal seconds
times conftest's one factor (:func:`tests.support.timing.scaled`).

The project's ``train.py`` is stdlib only and reads ``behaviour.json`` from the project
root at each start (the test rewrites it between rounds; the project stays read-only to
the job in guarded mode). Each start appends a line to ``$TRAINEE_ROUND_DIR/starts.txt``,
so a re-adopted round (one start) is told from a re-run one (two starts).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from tests.support.daemon import Daemon, base_env, kill_leftover_daemons
from tests.support.processes import training_processes
from tests.support.projects import LR_TUNING_YAML, VAL_LOSS_METRICS_YAML
from tests.support.timing import pause, scaled, wait_for
from trainee.rpc.client import RpcClient

TRAIN_PY = """\
import argparse, json, os, subprocess, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
root = os.path.dirname(os.path.abspath(__file__))
round_dir = os.environ.get("TRAINEE_ROUND_DIR", ".")
with open(os.path.join(round_dir, "starts.txt"), "a") as fh:
    fh.write(f"{os.getpid()}\\n")
try:
    with open(os.path.join(root, "behaviour.json")) as fh:
        conf = json.load(fh)
except FileNotFoundError:
    conf = {}
index = os.environ.get("TRAINEE_ROUND_INDEX", "0")
conf = {**conf, **conf.get("rounds", {}).get(index, {})}
if conf.get("say"):
    print(conf["say"], flush=True)
if conf.get("grandchild"):
    # a daemonized grandchild: double fork, setsid (start_new_session): it leaves our
    # process group and session, and its parent exits
    code = "import time; time.sleep(600)  # trainee-fault-grandchild"
    launcher = (
        "import os, subprocess, sys; "
        f"subprocess.Popen([sys.executable, '-c', {code!r}], start_new_session=True, "
        "stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)"
    )
    subprocess.run([sys.executable, "-c", launcher], check=True)
    print("grandchild started", flush=True)
if conf.get("garbage"):
    out = sys.stdout.buffer
    out.write(bytes(range(256)) * 64 + b"\\x1b[31mred\\x1b[0m\\xff\\xfe\\r\\n")
    out.write(os.urandom(conf["garbage"]).replace(b"\\n", b"")[: conf["garbage"]] + b"\\n")
    out.flush()
if conf.get("long_line"):
    chunk = b"y" * (1 << 20)
    out = sys.stdout.buffer
    for _ in range(conf["long_line"]):
        out.write(chunk)
    out.write(b"\\n")
    out.flush()
if conf.get("fill"):
    # write output until the disk is full (the write fails), then go on with a note
    out = sys.stdout.buffer
    try:
        for _ in range(conf["fill"]):
            out.write(b"z" * 1023 + b"\\n")
        out.flush()
    except OSError as exc:
        print(f"write failed: {exc}", file=sys.stderr, flush=True)
        sys.exit(3)
step = 0
hold = os.path.join(root, conf.get("hold_file", "hold").format(index=index))
holding = conf.get("hold_while_file") and os.path.exists(hold)
deadline = time.monotonic() + conf.get("hold_limit", 60)
steps = conf.get("steps", 10)
while step < steps or (holding and os.path.exists(hold) and time.monotonic() < deadline):
    print(f"step {step} loss={1.0 / (step + 1):.4f}", flush=True)
    step += 1
    time.sleep(conf.get("delay", 0.05))
if conf.get("exit"):
    sys.exit(conf["exit"])
print(f"final val_loss={(args.lr - 0.05) ** 2 + 0.1:.6f}", flush=True)
"""

PROJECT_YAML = (
    """\
version: 1
launch:
  command: [python, train.py]
run:
  max_rounds: {max_rounds}
  timeout_minutes: {timeout_minutes}
"""
    + VAL_LOSS_METRICS_YAML
    + """\
      required: {required}
advanced:
  security_mode: {mode}
  stop_grace_sec: 2
"""
)


def make_project(
    root: Path,
    *,
    mode: str = "unsafe",
    max_rounds: int = 3,
    timeout_minutes: float = 5,
    required: bool = True,
    behaviour: dict[str, Any] | None = None,
) -> Path:
    """A project at ``root`` with the controllable ``train.py``."""
    (root / ".trainee").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN_PY)
    (root / ".trainee" / "project.yaml").write_text(
        PROJECT_YAML.format(
            max_rounds=max_rounds,
            timeout_minutes=timeout_minutes,
            mode=mode,
            required="true" if required else "false",
        )
    )
    (root / ".trainee" / "tuning.yaml").write_text(LR_TUNING_YAML)
    set_behaviour(root, behaviour or {})
    return root


def set_behaviour(root: Path, behaviour: dict[str, Any]) -> None:
    tmp = root / "behaviour.json.tmp"
    tmp.write_text(json.dumps(behaviour))
    os.replace(tmp, root / "behaviour.json")


def job_env(daemon_env: dict[str, str], **extra: str) -> dict[str, str]:
    """The caller environment a session gets: the daemon's, the venv first on PATH."""
    env = dict(daemon_env)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


class Node:
    """A daemon on a private runtime folder that can be killed and started again."""

    def __init__(self, runtime: Path, env: dict[str, str] | None = None) -> None:
        self.runtime = runtime
        self.env = env or base_env(runtime)
        self.daemon = Daemon(runtime=runtime, env=self.env)
        self.starts = 0

    def start(self) -> Daemon:
        self.daemon = Daemon(runtime=self.runtime, env=self.env)
        line = self.daemon.start()
        assert line.startswith("READY"), f"daemon did not start: {line!r}\n{self.daemon.log}"
        self.starts += 1
        return self.daemon

    def kill(self, sig: int = signal.SIGKILL) -> int | None:
        return self.daemon.stop(sig)

    @property
    def log(self) -> str:
        return self.daemon.log

    def rpc(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60) -> Any:
        with RpcClient(self.daemon.socket, timeout=scaled(timeout)) as client:
            return client.call(method, params or {})

    def alive(self) -> bool:
        try:
            self.rpc("daemon_hello", timeout=10)
        except Exception:
            return False
        return True

    def start_session(
        self,
        project: Path,
        *,
        policy: str = "random",
        mode: str | None = None,
        max_rounds: int | None = None,
        env: dict[str, str] | None = None,
    ) -> str:
        params: dict[str, Any] = {
            "project_root": str(project),
            "env": env or job_env(self.env),
            "cwd": str(project),
            "policy": policy,
        }
        if mode:
            params["security_mode"] = mode
        if max_rounds:
            params["max_rounds"] = max_rounds
        result = self.rpc("loop_start", params)
        return str(result["session"])

    def state(self, project: Path, session: str = "session-0001") -> dict[str, Any]:
        state: dict[str, Any] = self.rpc(
            "loop_get", {"project_root": str(project), "session": session}
        )
        return state

    def wait(
        self,
        project: Path,
        done: Callable[[dict[str, Any]], bool],
        *,
        session: str = "session-0001",
        timeout: float = 60,
        what: str = "the condition",
    ) -> dict[str, Any]:
        last: list[dict[str, Any]] = []

        def check() -> dict[str, Any] | None:
            last[:] = [self.state(project, session)]
            return last[0] if done(last[0]) else None

        return wait_for(
            check,
            what,
            timeout=timeout,
            detail=lambda: (
                f"{json.dumps(last[0], indent=1)[-3000:]}\ndaemon log tail:\n{self.log[-3000:]}"
            ),
        )

    def wait_finished(
        self, project: Path, *, session: str = "session-0001", timeout: float = 60
    ) -> dict[str, Any]:
        return self.wait(
            project,
            lambda s: s["session"]["status"] != "running" and not s["running"],
            session=session,
            timeout=timeout,
            what=f"{session} to finish",
        )


@contextmanager
def node() -> Iterator[Node]:
    """A started daemon on a fresh short runtime folder; stopped and removed after."""
    runtime = Path(tempfile.mkdtemp(prefix="tr-f-", dir="/tmp"))
    n = Node(runtime)
    n.start()
    try:
        yield n
    finally:
        n.kill(signal.SIGTERM)
        kill_leftover_daemons(n.daemon)
        shutil.rmtree(runtime, ignore_errors=True)


def shim_processes(project: Path) -> list[int]:
    """Round monitors (``trainee/shim.py``) serving a round of ``project``."""
    root = str(project.resolve())
    found = []
    for pid, cmdline in training_processes(project):
        if "shim.py" in cmdline and root in cmdline:
            found.append(pid)
    return found


def assert_no_orphans(project: Path, timeout: float = 15.0) -> None:
    """No process of the project remains: no job, no grandchild, no monitor.

    Processes found after ``timeout`` are killed (so they do not leak into other
    tests) and the test fails naming them.
    """
    deadline = time.monotonic() + scaled(timeout)
    left = training_processes(project) + _by_marker(project)
    while left and time.monotonic() < deadline:
        pause(0.1)
        left = training_processes(project) + _by_marker(project)
    for pid, _ in left:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of {project} left running: {left}"
    assert not shim_processes(project)


def _by_marker(project: Path) -> list[tuple[int, str]]:
    """Processes whose environment names the project (a setsid grandchild keeps it)."""
    root = str(project.resolve()).encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2 :].split()[0] in (b"Z", b"X"):
            continue
        if b"TRAINEE_ROUND_DIR=" + root in environ:
            found.append((int(entry.name), f"env names {project}"))
    return found


def starts_of(project: Path, session: str, index: int) -> int:
    """How many times the round's command started (lines of its ``starts.txt``)."""
    path = project / ".trainee" / "runs" / session / f"round-{index:04d}" / "starts.txt"
    return len(path.read_text().split()) if path.exists() else 0


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmHWM for {pid}")
