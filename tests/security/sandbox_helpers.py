"""What the sandbox red-team tests share: hostile training scripts, projects around them,
a daemon in a chosen layout, and the checks every attack ends with.

Every hostile job is a real stdlib-only ``train.py`` run by a real daemon through real
bwrap. It reads its orders from ``attack.json`` in the project (read-only to it), tries
each one, and writes what happened to ``$TRAINEE_ROUND_DIR/outputs/findings.json``
(its own workspace, which the test reads afterwards); then it prints its metric and
ends normally, so a round that ran its attack is ``completed`` unless the attack
itself changed the outcome.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.faults.helpers import Node
from tests.support.daemon import kill_leftover_daemons
from tests.support.projects import LR_TUNING_YAML, VAL_LOSS_METRICS_YAML
from tests.support.timing import pause

SESSION = "session-0001"

PROBE = textwrap.dedent(
    """\
    import errno, json, os, socket, sys, time

    root = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(root, "attack.json")) as fh:
        orders = json.load(fh)
    index = os.environ.get("TRAINEE_ROUND_INDEX", "0")
    orders = orders.get(index, orders.get("*", {}))
    round_dir = os.environ["TRAINEE_ROUND_DIR"]
    os.makedirs(round_dir, exist_ok=True)
    with open(os.path.join(round_dir, "starts.txt"), "a") as fh:
        fh.write(f"{os.getpid()}\\n")
    findings = {}

    def attempt(fn):
        try:
            out = fn()
        except OSError as exc:
            return errno.errorcode.get(exc.errno, str(exc.errno))
        return "ok" if out is None else out

    def read(path):
        with open(path, "rb") as fh:
            return "read:" + fh.read(64).decode("utf-8", "replace")

    def connect(path):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            try:
                sock.sendall(b'{"jsonrpc": "2.0", "id": 1, "method": "daemon_hello"}\\n')
                return "connected:" + sock.recv(200).decode("utf-8", "replace")
            except OSError as exc:
                return "connected, then " + errno.errorcode.get(exc.errno, str(exc.errno))

    def write(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write("pwned\\n")

    def listdir(path):
        return "listed:" + ",".join(sorted(os.listdir(path)))

    def fifo(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkfifo(path)

    def symlink(pair):
        link, target = pair
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink(target, link)

    def big(pair):
        path, size = pair
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.truncate(size)

    actions = {"read": read, "connect": connect, "write": write, "listdir": listdir,
               "fifo": fifo, "symlink": symlink, "big": big}
    for name, (action, arg) in orders.get("try", {}).items():
        findings[name] = attempt(lambda: actions[action](arg))
    for name, text in orders.get("write_files", {}).items():
        path = os.path.join(round_dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            fh.write(text)
    findings["env"] = sorted(os.environ)
    findings["secrets"] = {k: v for k, v in os.environ.items() if "SECRET-" in v}
    os.makedirs(os.path.join(round_dir, "outputs"), exist_ok=True)
    with open(os.path.join(round_dir, "outputs", "findings.json"), "w") as fh:
        json.dump(findings, fh)
    print("step 1 loss=0.5", flush=True)
    hold = orders.get("hold_sec", 0)
    deadline = time.monotonic() + hold
    while time.monotonic() < deadline:
        time.sleep(0.05)
    if orders.get("exit"):
        sys.exit(orders["exit"])
    print(f"final val_loss={orders.get('metric', 0.5)}", flush=True)
    """
)

PROJECT_YAML = (
    """\
version: 1
launch:
  command: [python, train.py]
{launch_extra}run:
  max_rounds: {max_rounds}
  timeout_minutes: {timeout_minutes}
{run_extra}"""
    + VAL_LOSS_METRICS_YAML
    + """\
      required: true
{metrics_extra}advanced:
  security_mode: {mode}
  stop_grace_sec: 1
{advanced_extra}"""
)


def make_probe_project(
    root: Path,
    orders: dict[str, Any],
    *,
    mode: str = "guarded",
    max_rounds: int = 1,
    timeout_minutes: float = 2,
    launch_extra: str = "",
    run_extra: str = "",
    metrics_extra: str = "",
    advanced_extra: str = "",
) -> Path:
    """A project whose ``train.py`` is the probe, following ``orders`` (per round index
    as a string, or ``"*"``). It accepts ``--lr`` like a training script."""
    (root / ".trainee").mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text(PROBE)
    (root / ".trainee" / "project.yaml").write_text(
        PROJECT_YAML.format(
            mode=mode,
            max_rounds=max_rounds,
            timeout_minutes=timeout_minutes,
            launch_extra=launch_extra,
            run_extra=run_extra,
            metrics_extra=metrics_extra,
            advanced_extra=advanced_extra,
        )
    )
    (root / ".trainee" / "tuning.yaml").write_text(LR_TUNING_YAML)
    set_orders(root, orders)
    return root


def set_orders(root: Path, orders: dict[str, Any]) -> None:
    tmp = root / "attack.json.tmp"
    tmp.write_text(json.dumps(orders))
    os.replace(tmp, root / "attack.json")


def findings(project: Path, index: int = 1) -> dict[str, Any]:
    path = project / ".trainee" / "runs" / SESSION / f"round-{index:04d}" / "outputs"
    data: dict[str, Any] = json.loads((path / "findings.json").read_text())
    return data


def starts(project: Path, index: int) -> int:
    """How many times the round's command started (the probe notes each start)."""
    path = workspace(project, index) / "starts.txt"
    return len(path.read_text().split()) if path.exists() else 0


def control(project: Path, index: int = 1) -> Path:
    return project / ".trainee" / "control" / SESSION / f"round-{index:04d}"


def workspace(project: Path, index: int = 1) -> Path:
    return project / ".trainee" / "runs" / SESSION / f"round-{index:04d}"


def digests(*roots: Path, skip: Sequence[Path] = ()) -> dict[str, str]:
    """sha256 of every regular file under ``roots`` (links and other files by kind)."""
    out: dict[str, str] = {}
    for root in roots:
        if not root.exists():
            continue
        for path in [root] if not root.is_dir() else sorted(root.rglob("*")):
            if any(path.is_relative_to(s) for s in skip):
                continue
            if path.is_symlink():
                out[str(path)] = "link:" + os.readlink(path)
            elif path.is_file():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            elif not path.is_dir():
                out[str(path)] = "special"
    return out


def refused(result: object) -> bool:
    """A probe result that means the attack did not get through."""
    return isinstance(result, str) and result.isupper() and result.startswith("E")


@dataclass
class Layout:
    """Where trainee's files are: HOME, the socket, the data folder, the project, PATH."""

    name: str
    base: Path
    home: Path
    project: Path
    runtime: Path
    """The folder of the socket, token and daemon log."""
    daemon_env: dict[str, str]
    caller_env: dict[str, str]
    data_dir: Path | None = None
    other_home: Path | None = None

    @property
    def socket(self) -> Path:
        return self.runtime / "trainee.sock"

    @property
    def database(self) -> Path:
        return (self.data_dir or self.project / ".trainee") / "runtime.sqlite3"


def _base_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRAINEE_", "NOTIFY_", "LISTEN_", "XDG_RUNTIME"))
    }
    env["TRAINEE_HTTP_PORT"] = "0"
    env["PYTHONUNBUFFERED"] = "1"
    return env


SECRETS = {
    "OPENAI_API_KEY": "sk-SECRET-openai",
    "ANTHROPIC_API_KEY": "sk-SECRET-anthropic",
    "MOONSHOT_API_KEY": "sk-SECRET-moonshot",
    "HF_TOKEN": "hf_SECRET-token",
    "AWS_SECRET_ACCESS_KEY": "SECRET-aws",
    "PGPASSWORD": "SECRET-pg",
}
"""Provider keys and other secrets in the caller's environment: none may reach a job."""


def plant_private_files(layout: Layout) -> None:
    """config.json with a provider key in every trainee HOME of the layout, an SSH key."""
    homes = [layout.home] + ([layout.other_home] if layout.other_home else [])
    for home in homes:
        (home / ".trainee").mkdir(parents=True, exist_ok=True)
        config = home / ".trainee" / "config.json"
        config.write_text(json.dumps({"providers": {"openai": {"api_key": "sk-SECRET-config"}}}))
        config.chmod(0o600)
        (home / ".ssh").mkdir(exist_ok=True)
        (home / ".ssh" / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY----- SECRET\n")


@contextmanager
def started(layout: Layout) -> Iterator[Node]:
    """A daemon with ``layout.daemon_env``; stopped, its leftovers killed, after."""
    layout.runtime.mkdir(parents=True, exist_ok=True, mode=0o700)
    n = Node(layout.runtime, layout.daemon_env)
    n.start()
    try:
        yield n
    finally:
        n.kill(signal.SIGTERM)
        kill_leftover_daemons(n.daemon)


@contextmanager
def short_base(prefix: str, under: str = "/tmp") -> Iterator[Path]:
    """A fresh short folder (socket paths stay under 108 bytes), removed after."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=under))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def make_layout(name: str, base: Path, outside: Path) -> Layout:
    """The layouts the sandbox must hold in (``outside``: a folder outside /tmp)."""
    env = _base_env()
    venv_bin = os.path.dirname(sys.executable)
    path = env.get("PATH", os.defpath)
    other = outside / "other-home"
    if name == "home-under-tmp-with-home-bin-on-path":
        # HOME under /tmp, the interpreter reached through $HOME/bin on PATH: binding the
        # PATH folder must not bring HOME (and ~/.trainee) back
        home = base / "home"
        (home / "bin").mkdir(parents=True)
        (home / "bin" / "python").symlink_to(sys.executable)
        env.update(HOME=str(home), PATH=f"{home / 'bin'}:{venv_bin}:{path}")
        runtime = home / ".trainee" / "run"
        project = base / "proj"
    elif name == "project-under-home":
        home = outside / "home"
        project = home / "work" / "proj"
        env.update(HOME=str(home), PATH=f"{venv_bin}:{path}")
        runtime = base / "xdg" / "trainee"
        env["XDG_RUNTIME_DIR"] = str(base / "xdg")
    elif name == "socket-beside-the-project":
        home = outside / "home"
        project = base / "x" / "proj"
        runtime = base / "x"
        env.update(
            HOME=str(home), PATH=f"{venv_bin}:{path}", TRAINEE_SOCKET=str(runtime / "trainee.sock")
        )
    elif name == "socket-inside-the-project":
        home = outside / "home"
        project = base / "proj"
        runtime = project
        env.update(
            HOME=str(home), PATH=f"{venv_bin}:{path}", TRAINEE_SOCKET=str(runtime / "trainee.sock")
        )
    elif name == "venv-under-tmp":
        home = outside / "home"
        project = base / "proj"
        venv = base / "venv"
        import venv as venv_module

        venv_module.EnvBuilder(with_pip=False, symlinks=True).create(venv)
        env.update(HOME=str(home), PATH=f"{venv / 'bin'}:{path}")
        runtime = home / ".trainee" / "run"
    elif name == "data-dir-elsewhere":
        home = outside / "home"
        project = base / "proj"
        data = outside / "data"
        env.update(HOME=str(home), PATH=f"{venv_bin}:{path}", TRAINEE_DATA_DIR=str(data))
        runtime = home / ".trainee" / "run"
    else:
        raise ValueError(name)
    project.mkdir(parents=True, exist_ok=True)
    caller = {k: v for k, v in env.items() if not k.startswith("TRAINEE_")}
    caller.update(SECRETS)
    layout = Layout(
        name=name,
        base=base,
        home=home,
        project=project,
        runtime=runtime,
        daemon_env=env,
        caller_env=caller,
        data_dir=Path(env["TRAINEE_DATA_DIR"]) if "TRAINEE_DATA_DIR" in env else None,
        other_home=other,
    )
    plant_private_files(layout)
    return layout


def answers_within(n: Node, seconds: float) -> bool:
    """The daemon answers daemon_hello within ``seconds``."""
    started_at = time.monotonic()
    try:
        n.rpc("daemon_hello", timeout=seconds)
    except Exception:
        return False
    return time.monotonic() - started_at <= seconds


__all__ = [
    "PROBE",
    "SECRETS",
    "SESSION",
    "Layout",
    "answers_within",
    "control",
    "digests",
    "findings",
    "make_layout",
    "make_probe_project",
    "pause",
    "plant_private_files",
    "refused",
    "set_orders",
    "short_base",
    "started",
    "starts",
    "workspace",
]
