"""The round monitor (trainee.shim) and trainee.monitor.process, with real child processes.

Every job is a tiny Python script run by ``sys.executable``. Nothing sleeps to
wait: tests poll a condition (a file, a log line, a pid) with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from tests.support.timing import wait_for
from trainee.launch.layout import ProjectLayout, RoundLayout
from trainee.monitor.process import (
    ExitInfo,
    RoundHandle,
    is_alive,
    kill_orphans,
    read_exit,
    read_state,
    request_stop,
    spawn_round,
    wait_exit,
)
from trainee.monitor.tail import FileTail

GRACE = 0.5


def pid_gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return state[state.rfind(b")") + 2 :].startswith(b"Z")


@pytest.fixture
def rnd(tmp_path: Path) -> RoundLayout:
    return ProjectLayout.for_root(tmp_path / "proj", env={}).session(1).round(1)


def script(tmp_path: Path, body: str, name: str = "job.py") -> list[str]:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return [sys.executable, str(path)]


def spawn(
    rnd: RoundLayout,
    argv: list[str],
    *,
    timeout: float | None = None,
    grace: float = GRACE,
    cwd: str | None = None,
) -> RoundHandle:
    async def go() -> RoundHandle:
        return await spawn_round(
            argv,
            env=dict(os.environ),
            cwd=cwd or str(rnd.session.project.project_root.parent),
            rnd=rnd,
            timeout_sec=timeout,
            grace_sec=grace,
        )

    return anyio.run(go)


def finish(handle: RoundHandle) -> ExitInfo:
    async def go() -> ExitInfo:
        with anyio.fail_after(30):
            return await wait_exit(handle)

    return anyio.run(go)


def log_lines(rnd: RoundLayout) -> list[tuple[str, str]]:
    tail = FileTail(str(rnd.log), index=str(rnd.log_index))
    try:
        return [(line.stream, line.text) for line in tail.finish()]
    finally:
        tail.close()


def log_has(rnd: RoundLayout, text: str) -> bool:
    return rnd.log.exists() and text.encode() in rnd.log.read_bytes()


# -- results --------------------------------------------------------------------


def test_exit_code_and_streams_kept_apart(tmp_path: Path, rnd: RoundLayout) -> None:
    argv = script(
        tmp_path,
        """
        import sys
        for i in range(3):
            print(f"out {i}", flush=True)
            print(f"err {i}", file=sys.stderr, flush=True)
        sys.stdout.write("partial stdout ")
        sys.stdout.flush()
        print("stderr in between", file=sys.stderr, flush=True)
        print("end of the stdout line", flush=True)
        sys.exit(3)
        """,
    )
    handle = spawn(rnd, argv)
    info = finish(handle)
    assert (info.returncode, info.signal, info.timed_out, info.stopped, info.lost) == (
        3,
        None,
        False,
        False,
        False,
    )
    assert info.error is None and info.ended_at >= info.started_at and info.duration_sec >= 0
    lines = log_lines(rnd)
    assert [t for s, t in lines if s == "stdout"] == [
        "out 0",
        "out 1",
        "out 2",
        "partial stdout end of the stdout line",
    ]
    assert [t for s, t in lines if s == "stderr"] == [
        "err 0",
        "err 1",
        "err 2",
        "stderr in between",
    ]
    # The index names exactly the stderr bytes.
    raw = rnd.log.read_bytes()
    ranges = [tuple(map(int, x.split())) for x in rnd.log_index.read_text().splitlines()]
    stderr_bytes = b"".join(raw[s : s + n] for s, n in ranges)
    assert stderr_bytes == b"err 0\nerr 1\nerr 2\nstderr in between\n"
    assert oct(rnd.log.stat().st_mode & 0o777) == "0o600"
    state = read_state(rnd.monitor_file)
    assert state is not None and state.pid == handle.pid and state.argv == argv
    wait_for(
        lambda: not is_alive(handle),
        "the monitor to exit after exit.json",
        timeout=15,
        interval=0.02,
    )


def test_death_by_signal(tmp_path: Path, rnd: RoundLayout) -> None:
    argv = script(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    info = finish(spawn(rnd, argv))
    assert info.returncode is None and info.signal == "SIGKILL" and not info.stopped


def test_command_not_found_is_127_with_error(tmp_path: Path, rnd: RoundLayout) -> None:
    info = finish(spawn(rnd, ["no-such-command-for-trainee", "--flag"]))
    assert info.returncode == 127 and info.signal is None
    assert info.error is not None and "no-such-command-for-trainee" in info.error
    assert ("stderr", f"[trainee.shim] {info.error}") in log_lines(rnd)


def test_cwd_and_stdin(tmp_path: Path, rnd: RoundLayout) -> None:
    work = tmp_path / "work"
    work.mkdir()
    argv = script(tmp_path, "import os, sys\nprint(os.getcwd())\nprint(repr(sys.stdin.read()))\n")
    info = finish(spawn(rnd, argv, cwd=str(work)))
    assert info.returncode == 0
    assert [t for _, t in log_lines(rnd)] == [str(work), "''"]


def test_environment_reaches_the_command_unchanged(tmp_path: Path, rnd: RoundLayout) -> None:
    """Exactly the given variables: not even the LC_CTYPE that Python adds under a C locale."""
    # the job reads the kernel's copy: its own Python start-up edits os.environ too
    argv = script(
        tmp_path,
        """
        import json
        raw = open("/proc/self/environ", "rb").read().decode()
        print(json.dumps(dict(e.split("=", 1) for e in raw.split("\\0") if e)))
        """,
    )
    env = {"PATH": "/usr/bin:/bin", "LANG": "C", "TRAINEE_TEST_MARK": "value with spaces ünï"}

    async def go() -> RoundHandle:
        return await spawn_round(
            argv, env=env, cwd=str(tmp_path), rnd=rnd, timeout_sec=None, grace_sec=GRACE
        )

    info = finish(anyio.run(go))
    assert info.returncode == 0
    (text,) = [t for _, t in log_lines(rnd)]
    assert json.loads(text) == env


def test_bad_cwd_is_a_launch_error(tmp_path: Path, rnd: RoundLayout) -> None:
    from trainee.errors import LaunchError

    with pytest.raises(LaunchError, match="working directory"):
        spawn(rnd, [sys.executable, "-c", "pass"], cwd=str(tmp_path / "missing"))
    assert not rnd.monitor_file.exists()


# -- stopping -------------------------------------------------------------------

IGNORES_TERM = """
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("READY", flush=True)
while True:
    time.sleep(0.05)
"""


def test_stop_kills_a_job_that_ignores_sigterm(tmp_path: Path, rnd: RoundLayout) -> None:
    handle = spawn(rnd, script(tmp_path, IGNORES_TERM))
    wait_for(lambda: log_has(rnd, "READY"), "the job to start", timeout=15, interval=0.02)
    assert is_alive(handle)
    request_stop(handle)
    info = finish(handle)
    assert info.stopped and not info.timed_out
    assert info.signal == "SIGKILL" and info.returncode is None
    assert log_has(rnd, "stop requested") and log_has(rnd, "SIGKILL")
    wait_for(
        lambda: not is_alive(handle),
        "the monitor to exit after exit.json",
        timeout=15,
        interval=0.02,
    )


def test_stop_lets_a_polite_job_finish(tmp_path: Path, rnd: RoundLayout) -> None:
    body = """
    import signal, sys, time
    def bye(*_):
        print("saving checkpoint", flush=True)
        sys.exit(0)
    signal.signal(signal.SIGTERM, bye)
    print("READY", flush=True)
    while True:
        time.sleep(0.05)
    """
    handle = spawn(rnd, script(tmp_path, body), grace=30)
    wait_for(lambda: log_has(rnd, "READY"), "the job to start", timeout=15, interval=0.02)
    request_stop(handle)
    info = finish(handle)
    assert info.stopped and info.returncode == 0 and info.signal is None
    assert ("stdout", "saving checkpoint") in log_lines(rnd)


def test_timeout_marks_timed_out(tmp_path: Path, rnd: RoundLayout) -> None:
    body = "import time\nprint('READY', flush=True)\ntime.sleep(60)\n"
    info = finish(spawn(rnd, script(tmp_path, body), timeout=0.3))
    assert info.timed_out and not info.stopped
    assert info.signal == "SIGTERM" and info.returncode is None
    assert log_has(rnd, "timeout of 0.3 s reached")


def test_background_grandchild_is_killed(tmp_path: Path, rnd: RoundLayout) -> None:
    pidfile = tmp_path / "grandchild.pid"
    body = f"""
    import os, signal, time
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            with open({str(pidfile)!r} + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename({str(pidfile)!r} + ".tmp", {str(pidfile)!r})
            while True:
                time.sleep(0.05)
        os._exit(0)
    while not os.path.exists({str(pidfile)!r}):
        time.sleep(0.01)
    print("main job done", flush=True)
    """
    handle = spawn(rnd, script(tmp_path, body))
    info = finish(handle)
    assert info.returncode == 0 and not info.stopped
    grandchild = int(pidfile.read_text())
    assert pid_gone(grandchild), "the daemonized grandchild survived the round"
    assert log_has(rnd, "main job done")


def test_stop_reaches_a_background_grandchild(tmp_path: Path, rnd: RoundLayout) -> None:
    pidfile = tmp_path / "grandchild.pid"
    body = f"""
    import os, time
    if os.fork() == 0:
        os.setsid()
        with open({str(pidfile)!r} + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename({str(pidfile)!r} + ".tmp", {str(pidfile)!r})
        while True:
            time.sleep(0.05)
    print("READY", flush=True)
    while True:
        time.sleep(0.05)
    """
    handle = spawn(rnd, script(tmp_path, body))
    wait_for(pidfile.exists, "the grandchild to start", timeout=15, interval=0.02)
    wait_for(lambda: log_has(rnd, "READY"), "the job to start", timeout=15, interval=0.02)
    request_stop(handle)
    info = finish(handle)
    assert info.stopped and info.signal == "SIGTERM"
    assert pid_gone(int(pidfile.read_text()))


# -- identity, survival, loss ---------------------------------------------------------


def test_is_alive_checks_the_start_time(tmp_path: Path, rnd: RoundLayout) -> None:
    handle = spawn(rnd, script(tmp_path, IGNORES_TERM))
    try:
        assert is_alive(handle)
        other = RoundHandle(
            handle.pid,
            handle.start_time + 1,
            handle.log,
            handle.index,
            handle.exit_file,
            handle.state_file,
        )
        assert not is_alive(other)
        from trainee.errors import InvalidState

        with pytest.raises(InvalidState, match="still running"):
            spawn(rnd, [sys.executable, "-c", "pass"])
    finally:
        request_stop(handle)
        finish(handle)


RUNNER = """
import anyio, json, os, sys
from trainee.launch.layout import ProjectLayout
from trainee.monitor.process import spawn_round

async def main():
    rnd = ProjectLayout.for_root(sys.argv[1], env={}).session(1).round(1)
    handle = await spawn_round(
        sys.argv[2:], env=dict(os.environ), cwd="/", rnd=rnd, timeout_sec=None, grace_sec=0.5
    )
    print(json.dumps({"pid": handle.pid, "start_time": handle.start_time}), flush=True)
    await anyio.sleep_forever()

anyio.run(main)
"""


def test_round_survives_its_daemon_being_killed(tmp_path: Path, rnd: RoundLayout) -> None:
    go = tmp_path / "go"
    job = script(
        tmp_path,
        f"""
        import os, sys, time
        print("first line", flush=True)
        while not os.path.exists({str(go)!r}):
            time.sleep(0.01)
        for i in range(2000):
            print(f"step {{i}} loss {{1 / (i + 1):.5f}}")
            if i % 500 == 0:
                print(f"progress {{i}}", file=sys.stderr, flush=True)
        sys.exit(4)
        """,
    )
    runner = script(tmp_path, RUNNER, "fake_daemon.py")
    daemon = subprocess.Popen(
        [*runner, str(rnd.session.project.project_root), *job],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    try:
        assert daemon.stdout is not None
        started = json.loads(daemon.stdout.readline())
        wait_for(lambda: log_has(rnd, "first line"), "the job to start", timeout=15, interval=0.02)
        daemon.kill()
        daemon.wait(10)
        handle = RoundHandle(
            started["pid"],
            started["start_time"],
            str(rnd.log),
            str(rnd.log_index),
            str(rnd.exit_file),
            str(rnd.monitor_file),
        )
        assert is_alive(handle), "the monitor died with its daemon"
        go.touch()
        info = finish(handle)
    finally:
        if daemon.poll() is None:
            daemon.kill()
        if daemon.stdout is not None:
            daemon.stdout.close()
        daemon.wait(10)
    assert info.returncode == 4 and not info.lost
    lines = log_lines(rnd)
    steps = [t for s, t in lines if s == "stdout" and t.startswith("step ")]
    assert len(steps) == 2000 and steps[-1] == "step 1999 loss 0.00050"
    assert [t for s, t in lines if s == "stderr"] == [f"progress {i}" for i in range(0, 2000, 500)]
    assert read_exit(rnd.exit_file) == info


def test_a_killed_monitor_is_lost_and_its_job_can_be_killed(
    tmp_path: Path, rnd: RoundLayout
) -> None:
    handle = spawn(rnd, script(tmp_path, IGNORES_TERM))
    wait_for(lambda: log_has(rnd, "READY"), "the job to start", timeout=15, interval=0.02)
    state = read_state(rnd.monitor_file)
    assert state is not None and state.child_pid is not None
    assert kill_orphans(handle) == []  # the monitor lives: nothing to do
    os.kill(handle.pid, signal.SIGKILL)
    wait_for(lambda: pid_gone(handle.pid), "the monitor to die", timeout=15, interval=0.02)
    assert not pid_gone(state.child_pid), "the job outlives its monitor, orphaned"
    assert kill_orphans(handle) == [state.child_pid]
    wait_for(
        lambda: pid_gone(state.child_pid), "the orphaned job to die", timeout=15, interval=0.02
    )


def test_waiting_on_a_killed_monitor_ends_its_orphaned_job(
    tmp_path: Path, rnd: RoundLayout
) -> None:
    handle = spawn(rnd, script(tmp_path, IGNORES_TERM))
    wait_for(lambda: log_has(rnd, "READY"), "the job to start", timeout=15, interval=0.02)
    state = read_state(rnd.monitor_file)
    assert state is not None and state.child_pid is not None
    os.kill(handle.pid, signal.SIGKILL)
    info = finish(handle)
    assert info.lost and info.returncode is None and info.error is not None
    wait_for(
        lambda: pid_gone(state.child_pid), "the orphaned job to die", timeout=15, interval=0.02
    )
    assert kill_orphans(handle) == []


def test_shim_command_line(tmp_path: Path) -> None:
    base = [sys.executable, "-m", "trainee.shim"]
    files = ["--log", "l", "--index", "i", "--exit", "e", "--state", "s"]
    bad = subprocess.run([*base, *files], capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and "must follow '--'" in bad.stderr
    bad = subprocess.run(
        [*base, *files, "--timeout", "-1", "--", "true"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--timeout" in bad.stderr
    ok = subprocess.run(
        [*base, *files, "--timeout", "2.5", "--", sys.executable, "-c", "print('hi')"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        start_new_session=True,
    )
    assert ok.returncode == 0 and ok.stdout == ""
    assert (tmp_path / "l").read_text() == "hi\n"
    assert json.loads((tmp_path / "e").read_text())["returncode"] == 0
