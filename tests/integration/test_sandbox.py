"""Guarded mode for real: a Python child inside bwrap tries to write, connect and escape.

Every test runs the real /usr/bin/bwrap with the argv trainee builds. The projects live
under /tmp (pytest's tmp_path), which is the case the mount order has to get right.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.timing import wait_for
from tests.unit.launch.projects import make_project, round_of
from trainee.errors import SandboxError
from trainee.launch.layout import RoundLayout
from trainee.launch.render import build_env, render_round
from trainee.launch.sandbox import (
    bwrap_argv,
    check_bwrap,
    sandboxed_pids,
    signal_sandboxed,
    tool_paths,
    wrap,
)
from trainee.spec import ProjectSpec

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

PROBE = textwrap.dedent(
    """\
    import ctypes, errno, json, os, socket, sys

    def attempt(fn):
        try:
            out = fn()
        except OSError as exc:
            return errno.errorcode.get(exc.errno, str(exc.errno))
        return "ok" if out is None else out

    def write(path):
        with open(path, "a") as fh:
            fh.write("probe\\n")

    def connect(port):
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass

    def connect_unix(path):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(path)

    def read(path):
        with open(path, "rb") as fh:
            fh.read(1)

    def symlink_write(arg):
        link, target = arg
        os.symlink(target, link)
        write(link)

    def makedirs_write(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write(path)

    def hardlink(arg):
        os.link(arg[1], arg[0])

    def remount(path):
        libc = ctypes.CDLL(None, use_errno=True)
        MS_REMOUNT, MS_BIND = 32, 4096
        if libc.mount(b"none", path.encode(), None, MS_REMOUNT | MS_BIND, None) != 0:
            raise OSError(ctypes.get_errno(), "mount")

    ops = {
        "write": lambda p: attempt(lambda: write(p)),
        "write_env": lambda v: attempt(lambda: write(os.path.join(os.environ[v], "probe.txt"))),
        "env": lambda v: os.environ.get(v),
        "exists": os.path.exists,
        "listdir": lambda p: sorted(os.listdir(p)),
        "connect": lambda port: attempt(lambda: connect(port)),
        "remount": lambda p: attempt(lambda: remount(p)),
        "connect_unix": lambda p: attempt(lambda: connect_unix(p)),
        "read": lambda p: attempt(lambda: read(p)),
        "symlink_write": lambda a: attempt(lambda: symlink_write(a)),
        "hardlink": lambda a: attempt(lambda: hardlink(a)),
        "makedirs_write": lambda p: attempt(lambda: makedirs_write(p)),
    }
    print(json.dumps([ops[op](arg) for op, arg in json.loads(sys.argv[1])]))
    """
)


def project(root: Path) -> ProjectSpec:
    spec = make_project(root, "version: 1\nlaunch:\n  command: [python, train.py]\n")
    trainee = root / ".trainee"
    (trainee / "runtime.sqlite3").write_bytes(b"SQLite format 3\x00")
    return spec


def run_probe(
    spec: ProjectSpec, rnd: RoundLayout, ops: Sequence[tuple[str, Any]], *, network: bool = True
) -> list[Any]:
    argv = bwrap_argv(
        [sys.executable, "-c", PROBE, json.dumps(ops)],
        layout=rnd,
        cwd=spec.working_dir,
        network=network,
    )
    env = build_env(spec, rnd, os.environ)
    proc = subprocess.run(
        argv, env=env, cwd=spec.working_dir, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    result: list[Any] = json.loads(proc.stdout)
    return result


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def outside_dir() -> Iterator[Path]:
    """A host folder outside the project and outside /tmp (so the sandbox still sees it)."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(Path.home())
    path = Path(tempfile.mkdtemp(prefix="trainee-outside-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_bwrap_works_here() -> None:
    check_bwrap()
    check_bwrap(network=False)


def test_a_broken_bwrap_is_reported_with_its_own_message(tmp_path: Path) -> None:
    broken = tmp_path / "bwrap"
    broken.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
    )
    broken.chmod(0o755)
    with pytest.raises(SandboxError) as info:
        check_bwrap(str(broken))
    assert "No permissions to create new namespace" in info.value.message
    assert "--unsafe" in info.value.message


def test_only_the_round_workspace_caches_and_logs_are_writable(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    spec = project(root)
    trainee = root / ".trainee"
    other = round_of(spec, 1, 1)
    other.dir.mkdir(parents=True)
    (other.dir / "config.yaml").write_text("lr: 0.1\n")
    other.log.parent.mkdir(parents=True)
    other.log.write_text("round 1 output\n")
    rnd = round_of(spec, 1, 2)
    rnd.outputs.mkdir(parents=True)
    protected = [
        root / "train.py",
        trainee / "runtime.sqlite3",
        trainee / "project.yaml",
        trainee / "tuning.yaml",
        other.dir / "config.yaml",
        other.log,
    ]
    before = {p: digest(p) for p in protected}
    cache_vars = ["HOME", "XDG_CACHE_HOME", "HF_HOME", "TORCH_HOME", "MPLCONFIGDIR", "WANDB_DIR"]

    results = run_probe(
        spec,
        rnd,
        [
            *(("write", str(p)) for p in protected),
            ("write", str(root / "new-file.txt")),
            ("write", str(other.dir / "new.txt")),
            ("write", str(rnd.session.runs / "round-0003.txt")),
            ("write", str(rnd.dir / "mine.txt")),
            ("write", str(rnd.outputs / "metrics.jsonl")),
            ("write", str(trainee / "logs" / "job.log")),
            *(("write_env", var) for var in cache_vars),
            *(("env", var) for var in cache_vars),
        ],
    )

    refused, allowed, envs = results[:9], results[9:18], results[18:]
    assert refused == ["EROFS"] * 9
    assert allowed == ["ok"] * 9
    names = ["home", "xdg", "hf", "torch", "mpl", "wandb"]
    assert envs == [str(trainee / "cache" / n) for n in names]
    assert {p: digest(p) for p in protected} == before
    assert not (root / "new-file.txt").exists()
    assert (rnd.outputs / "metrics.jsonl").read_text() == "probe\n"
    for n in names:
        assert (trainee / "cache" / n / "probe.txt").read_text() == "probe\n"


def test_symlinks_do_not_lead_out_of_the_sandbox(tmp_path: Path, outside_dir: Path) -> None:
    root = tmp_path / "proj"
    spec = project(root)
    rnd = round_of(spec)
    logs = root / ".trainee" / "logs"
    logs.mkdir(parents=True)
    (logs / "to-host").symlink_to(outside_dir)
    (logs / "to-project").symlink_to(root / "train.py")
    host_tmp = tmp_path / "host-tmp"
    host_tmp.mkdir()
    (logs / "to-tmp").symlink_to(host_tmp)
    train = (root / "train.py").read_text()

    results = run_probe(
        spec,
        rnd,
        [
            ("write", str(logs / "to-host" / "x.txt")),
            ("write", str(logs / "to-project")),
            ("write", str(logs / "to-tmp" / "x.txt")),
        ],
    )

    # the host folder is not in the sandbox at all; the project is, read-only
    assert results == ["ENOENT", "EROFS", "ENOENT"]
    assert list(outside_dir.iterdir()) == []
    assert list(host_tmp.iterdir()) == []
    assert (root / "train.py").read_text() == train


def test_a_writable_place_symlinked_out_is_refused_before_launch(
    tmp_path: Path, outside_dir: Path
) -> None:
    root = tmp_path / "proj"
    spec = project(root)
    rnd = round_of(spec)
    (root / ".trainee" / "runs").symlink_to(outside_dir)
    with pytest.raises(SandboxError, match="--unsafe"):
        render_round(spec, rnd, {}, base_env=os.environ, security_mode="guarded")
    rendered = render_round(spec, rnd, {}, base_env=os.environ, security_mode="unsafe")
    shutil.rmtree(outside_dir / "session-0001")  # unsafe mode followed the link, as asked
    with pytest.raises(SandboxError, match="through a symlink"):
        wrap(rendered, spec, rnd)
    assert list(outside_dir.iterdir()) == []


def test_the_job_cannot_remount_the_project_writable(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    spec = project(root)
    results = run_probe(
        spec,
        round_of(spec),
        [("remount", str(root)), ("remount", "/"), ("write", str(root / "train.py"))],
    )
    assert results[0] == results[1] == "EPERM"
    assert results[2] == "EROFS"


def test_tmp_is_empty_and_private(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    spec = project(root)
    fd, host_file = tempfile.mkstemp(prefix="trainee-host-", dir="/tmp")
    os.close(fd)
    inside_file = f"/tmp/trainee-inside-{os.getpid()}.txt"
    try:
        results = run_probe(
            spec,
            round_of(spec),
            [("exists", host_file), ("listdir", "/tmp"), ("write", inside_file)],
        )
        # only the paths down to the project and to an interpreter living under /tmp
        # (a CI checkout's virtualenv), re-bound read-only under the tmpfs, are there
        bound = [Path(root), *tool_paths([sys.executable], homes=["/root", "/home"])]
        bound = [p for p in bound if p.is_relative_to("/tmp")]
        firsts = sorted({p.relative_to("/tmp").parts[0] for p in bound})
        assert [results[0], sorted(results[1]), results[2]] == [False, firsts, "ok"]

        assert not os.path.exists(inside_file)
    finally:
        os.unlink(host_file)


@pytest.mark.parametrize(("network", "expected"), [(True, ["ok"]), (False, ["ECONNREFUSED"])])
def test_network_false_cuts_the_job_off(tmp_path: Path, network: bool, expected: list[str]) -> None:
    spec = project(tmp_path / "proj")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        port = listener.getsockname()[1]
        results = run_probe(spec, round_of(spec), [("connect", port)], network=network)
    if not network and results != expected:
        assert results[0] in ("ENETUNREACH", "EHOSTUNREACH"), results
    else:
        assert results == expected


JOB = textwrap.dedent(
    """\
    import os, signal, sys, time
    round_dir = os.environ["TRAINEE_ROUND_DIR"]
    def stop(signum, frame):
        with open(os.path.join(round_dir, "stopped.txt"), "w") as fh:
            fh.write("graceful\\n")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    with open(os.path.join(round_dir, "ready.txt"), "w") as fh:
        fh.write("ready\\n")
    time.sleep(120)
    """
)

PARENT = textwrap.dedent(
    """\
    import json, subprocess, sys, time
    argv, env, cwd = json.loads(sys.argv[1])
    proc = subprocess.Popen(argv, env=env, cwd=cwd)
    print(proc.pid, flush=True)
    time.sleep(120)
    """
)


def job_argv(spec: ProjectSpec, rnd: RoundLayout) -> tuple[list[str], dict[str, str]]:
    argv = bwrap_argv([sys.executable, "-c", JOB], layout=rnd, cwd=spec.working_dir)
    return argv, build_env(spec, rnd, os.environ)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_the_job_dies_with_the_process_that_started_bwrap(tmp_path: Path) -> None:
    spec = project(tmp_path / "proj")
    rnd = round_of(spec)
    argv, env = job_argv(spec, rnd)
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, json.dumps([argv, env, spec.working_dir])],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        bwrap_pid = int(parent.stdout.readline())
        wait_for((rnd.dir / "ready.txt").exists, "the job to start", interval=0.02)
        jobs = sandboxed_pids(bwrap_pid)
        assert jobs and all(alive(p) for p in jobs)
        parent.kill()
        parent.wait()
        wait_for(
            lambda: not any(alive(p) for p in [bwrap_pid, *jobs]),
            "the sandbox to die",
            interval=0.02,
        )
    finally:
        parent.kill()
        parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()
    assert not (rnd.dir / "stopped.txt").exists()


def test_signal_sandboxed_stops_the_job_gracefully(tmp_path: Path) -> None:
    spec = project(tmp_path / "proj")
    rnd = round_of(spec)
    argv, env = job_argv(spec, rnd)
    proc = subprocess.Popen(argv, env=env, cwd=spec.working_dir, start_new_session=True)
    try:
        wait_for((rnd.dir / "ready.txt").exists, "the job to start", interval=0.02)
        assert signal_sandboxed(proc.pid, signal.SIGTERM) == 1
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert (rnd.dir / "stopped.txt").read_text() == "graceful\n"
    assert sandboxed_pids(proc.pid) == []


def test_the_yaml_config_example_trains_inside_the_sandbox(tmp_path: Path) -> None:
    root = tmp_path / "yaml-config"
    shutil.copytree(EXAMPLES / "yaml-config", root)
    before = {p: digest(p) for p in root.rglob("*") if p.is_file()}
    from trainee.spec import load_project

    spec = load_project(root)
    rnd = round_of(spec)
    base_env = dict(os.environ)
    base_env["PATH"] = f"{Path(sys.executable).parent}:{base_env.get('PATH', os.defpath)}"
    rendered = render_round(spec, rnd, {"lr": 0.05, "l2_weight": 1e-06}, base_env=base_env)
    wrapped = wrap(rendered, spec, rnd, network=False)
    proc = subprocess.run(
        wrapped.argv, env=wrapped.env, cwd=wrapped.cwd, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "final val_loss=" in proc.stdout
    lines = (rnd.outputs / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["val_loss"] > 0
    after = {p: digest(p) for p in root.rglob("*") if p.is_file() and ".trainee" not in p.parts}
    assert after == {p: h for p, h in before.items() if ".trainee" not in p.parts}


def test_every_write_the_job_must_not_make_is_refused(tmp_path: Path) -> None:
    """The full list, beside what the test above covers: the store's sidecar files, the
    other project files of .trainee/, every artifact (the round's own log too: the job
    writes it only through the stdout it was given), other sessions, new files anywhere
    but the writable places, links planted from the writable places, a hard link out."""
    root = tmp_path / "proj"
    spec = project(root)
    trainee = root / ".trainee"
    (root / "configs").mkdir()
    (root / "configs" / "base.yaml").write_text("lr: 0.1\n")
    for name in ("runtime.sqlite3-wal", "runtime.sqlite3-shm", "context.md", "README.md"):
        (trainee / name).write_text(name)
    (trainee / "journal.md").write_text("# journal\n")
    rnd = round_of(spec, 2, 1)
    own = rnd.session.artifacts
    own.mkdir(parents=True)
    rnd.log.write_text("my own output\n")
    for name in ("result_ledger.csv", "result_ledger.jsonl", "report.md", "research_state.json"):
        (own / name).write_text(name)
    earlier = round_of(spec, 1, 1)
    earlier.dir.mkdir(parents=True)
    earlier.log.parent.mkdir(parents=True)
    earlier.log.write_text("session 1 output\n")
    (earlier.session.artifacts / "report.md").write_text("report 1\n")
    rnd.dir.mkdir(parents=True)
    protected = [
        root / "configs" / "base.yaml",
        *(trainee / n for n in ("runtime.sqlite3-wal", "runtime.sqlite3-shm")),
        *(trainee / n for n in ("context.md", "README.md", "journal.md")),
        rnd.log,
        rnd.log_index,
        *(own / n for n in ("result_ledger.csv", "result_ledger.jsonl", "report.md")),
        own / "research_state.json",
        earlier.log,
        earlier.session.artifacts / "report.md",
        earlier.dir / "config.yaml",
    ]
    new_files = [
        trainee / "project.yaml.new",
        trainee / "runtime.sqlite3-journal",
        trainee / "artifacts" / "session-0003" / "report.md",
        own / "round-0002.log",
        trainee / "runs" / "session-0002" / "round-0002" / "config.yaml",
        trainee / "cache" / "evil.txt",
        trainee / "new.txt",
    ]
    before = {p: digest(p) for p in protected if p.exists()}
    planted = [
        (str(rnd.dir / "to-spec"), str(trainee / "project.yaml")),
        (str(trainee / "logs" / "to-store"), str(trainee / "runtime.sqlite3")),
        (str(trainee / "cache" / "home" / "to-train"), str(root / "train.py")),
    ]
    hard = [(str(rnd.dir / "store-link"), str(trainee / "runtime.sqlite3"))]

    results = run_probe(
        spec,
        rnd,
        [
            *(("write", str(p)) for p in protected),
            *(("makedirs_write", str(p)) for p in new_files),
            *(("symlink_write", link) for link in planted),
            *(("hardlink", link) for link in hard),
        ],
    )

    assert results[: len(protected)] == ["EROFS"] * len(protected), results
    rest = results[len(protected) :]
    assert rest[: len(new_files)] == ["EROFS"] * len(new_files), rest
    rest = rest[len(new_files) :]
    assert rest[: len(planted)] == ["EROFS"] * len(planted), rest
    # the store is not in the sandbox at all: there is nothing to link to
    assert rest[len(planted) :] == ["ENOENT"], rest
    assert {p: digest(p) for p in before} == before
    assert not any(p.exists() for p in new_files)
    assert (trainee / "project.yaml").read_text() == (
        "version: 1\nlaunch:\n  command: [python, train.py]\n"
    )


@pytest.mark.parametrize("link", ["cache/hf", "logs"])
def test_a_cache_or_log_folder_symlinked_out_of_trainee_is_refused_before_launch(
    tmp_path: Path, outside_dir: Path, link: str
) -> None:
    root = tmp_path / "proj"
    spec = project(root)
    path = root / ".trainee" / link
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(outside_dir)
    with pytest.raises(SandboxError, match="through a symlink"):
        bwrap_argv(["true"], layout=round_of(spec), cwd=spec.working_dir)
    path.unlink()
    path.symlink_to(root)  # inside the project, but outside .trainee/
    with pytest.raises(SandboxError, match="through a symlink"):
        bwrap_argv(["true"], layout=round_of(spec), cwd=spec.working_dir)
    assert list(outside_dir.iterdir()) == []


def test_the_daemon_socket_token_and_provider_keys_are_out_of_reach(
    tmp_path: Path, outside_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over the socket any call needs no token (project_register would rewrite
    project.yaml); the token opens the HTTP API; config.json holds the API keys. With the
    daemon's folders outside /tmp (as $XDG_RUNTIME_DIR and ~ are), the job sees none."""
    runtime = outside_dir / "run"
    runtime.mkdir(mode=0o700)
    home = outside_dir / "home"
    (home / ".trainee").mkdir(parents=True)
    config = home / ".trainee" / "config.json"
    config.write_text('{"providers": {"openai": {"api_key": "sk-secret"}}}')
    config.chmod(0o600)
    token = runtime / "token"
    token.write_text("t" * 43 + "\n")
    monkeypatch.setenv("TRAINEE_SOCKET", str(runtime / "trainee.sock"))
    monkeypatch.setenv("HOME", str(home))
    spec = project(tmp_path / "proj")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(runtime / "trainee.sock"))
        listener.listen(8)
        ops = [
            ("connect_unix", str(runtime / "trainee.sock")),
            ("read", str(token)),
            ("read", str(config)),
            ("exists", str(runtime)),
            ("exists", str(home / ".trainee")),
        ]
        results = run_probe(spec, round_of(spec), ops)
        # the same probe outside the sandbox reaches all of it: the test can fail
        outside = subprocess.run(
            [sys.executable, "-c", PROBE, json.dumps(ops[:3])],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert json.loads(outside.stdout) == ["ok", "ok", "ok"]
    assert results == ["ENOENT", "ENOENT", "ENOENT", False, False]
