"""Start a round under its monitor (:mod:`trainee.shim`), watch it, stop it, re-adopt it.

The monitor is started with ``start_new_session=True`` (and calls ``setsid()``
itself), so no signal aimed at the daemon or its process group reaches it: a
daemon killed with SIGKILL leaves the round running. The daemon keeps the
monitor's pid and its ``/proc`` start time (:class:`RoundHandle`); together
they identify the monitor even after pid reuse, so a restarted daemon tells a
live round (re-adopt it) from a dead one (``exit.json`` there: finished;
missing: lost).

Reaping: when this process started the monitor, the ``Popen`` object is kept
in a registry and ``poll()``-ed by :func:`is_alive` / :func:`wait_exit`, so an
exited monitor is collected as soon as it is noticed and never lingers as a
zombie. Re-adopted monitors are not our children; their parent reaps them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import anyio
import msgspec
from watchfiles import awatch

from trainee import shim
from trainee.errors import InvalidState, LaunchError

__all__ = [
    "ExitInfo",
    "MonitorState",
    "RoundHandle",
    "RoundPaths",
    "is_alive",
    "kill_orphans",
    "read_exit",
    "read_state",
    "request_stop",
    "spawn_round",
    "wait_exit",
]

READY_TIMEOUT = 30.0
SHIM = Path(shim.__file__).resolve()


class RoundPaths(Protocol):
    """What the monitor needs of a round's layout (``trainee.launch.layout.RoundLayout``)."""

    @property
    def dir(self) -> Path: ...
    @property
    def log(self) -> Path: ...
    @property
    def log_index(self) -> Path: ...
    @property
    def exit_file(self) -> Path: ...
    @property
    def monitor_file(self) -> Path: ...


class RoundHandle(msgspec.Struct, frozen=True):
    """Identifies a round's monitor: pid + ``/proc`` start time, and the round's files."""

    pid: int
    start_time: int
    log: str
    index: str
    exit_file: str
    state_file: str


class ExitInfo(msgspec.Struct):
    """``exit.json``: how the command ended. ``lost``: the monitor died without writing it."""

    returncode: int | None
    signal: str | None
    timed_out: bool
    stopped: bool
    started_at: float
    ended_at: float
    duration_sec: float
    lost: bool = False
    error: str | None = None
    lost_output_bytes: int = 0
    """stderr bytes the monitor could not write to the log (disk full)."""


class MonitorState(msgspec.Struct):
    """``monitor.json``, written by the monitor once the command runs."""

    pid: int
    start_time: int
    child_pid: int | None
    started_at: float
    argv: list[str]


_exit_decoder = msgspec.json.Decoder(ExitInfo)
_state_decoder = msgspec.json.Decoder(MonitorState)
_children: dict[int, subprocess.Popen[bytes]] = {}
"""Monitors this process started and has not reaped yet."""


def _read_json(path: str | Path, decoder: msgspec.json.Decoder[msgspec.Struct]) -> object:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LaunchError(f"cannot read {path}: {exc.strerror}", data={"file": str(path)}) from exc
    try:
        return decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise LaunchError(
            f"{path} is not a valid monitor file: {exc}",
            data={"file": str(path), "reason": str(exc)},
        ) from exc


def read_exit(path: str | Path) -> ExitInfo | None:
    """``exit.json`` if it is there (it is written atomically), else None."""
    info = _read_json(path, _exit_decoder)  # type: ignore[arg-type]
    assert info is None or isinstance(info, ExitInfo)
    return info


def read_state(path: str | Path) -> MonitorState | None:
    """``monitor.json`` if it is there, else None."""
    state = _read_json(path, _state_decoder)  # type: ignore[arg-type]
    assert state is None or isinstance(state, MonitorState)
    return state


def _stat_fields(pid: int) -> list[bytes] | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return data[data.rfind(b")") + 2 :].split()


def _reap(pid: int) -> None:
    proc = _children.get(pid)
    if proc is not None and proc.poll() is not None:
        del _children[pid]


def is_alive(handle: RoundHandle) -> bool:
    """True while the monitor of ``handle`` runs (same pid AND same start time, not a zombie)."""
    _reap(handle.pid)
    fields = _stat_fields(handle.pid)
    if fields is None or fields[0] in (b"Z", b"X"):
        return False
    return int(fields[19]) == handle.start_time


def request_stop(handle: RoundHandle) -> None:
    """Ask the monitor to stop the round: SIGTERM to the group, grace, SIGKILL (it escalates)."""
    if is_alive(handle):
        with contextlib.suppress(ProcessLookupError):
            os.kill(handle.pid, signal.SIGTERM)


def kill_orphans(handle: RoundHandle) -> list[int]:
    """SIGKILL what is left of a round whose monitor died (no-op while it lives).

    Finds processes still in the monitor's session and the command's process
    group (both recorded in ``monitor.json``); returns their pids.
    """
    if is_alive(handle):
        return []
    state = read_state(handle.state_file)
    if state is None or state.child_pid is None:
        return []
    killed: list[int] = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = _stat_fields(int(name))
        if fields is None or fields[0] in (b"Z", b"X"):
            continue
        pgid, sid = int(fields[2]), int(fields[3])
        if sid == handle.pid and pgid == state.child_pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(name), signal.SIGKILL)
                killed.append(int(name))
    return killed


def build_shim_argv(
    argv: Sequence[str],
    rnd: RoundPaths,
    *,
    cwd: str,
    timeout_sec: float | None,
    grace_sec: float,
    ready_fd: int | None = None,
) -> list[str]:
    """The monitor's command line (``-I``: no user site, no PYTHON* variables, no cwd on the path)."""
    cmd = [sys.executable, "-I", str(SHIM)]
    cmd += ["--log", str(rnd.log), "--index", str(rnd.log_index)]
    cmd += ["--exit", str(rnd.exit_file), "--state", str(rnd.monitor_file)]
    cmd += ["--grace", repr(float(grace_sec)), "--cwd", cwd]
    if timeout_sec is not None:
        cmd += ["--timeout", repr(float(timeout_sec))]
    if ready_fd is not None:
        cmd += ["--ready-fd", str(ready_fd)]
    return [*cmd, "--", *argv]


async def spawn_round(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    rnd: RoundPaths,
    timeout_sec: float | None,
    grace_sec: float,
) -> RoundHandle:
    """Start ``argv`` under a new monitor; return once the command runs.

    Stale ``exit.json`` / ``monitor.json`` of an earlier attempt are removed;
    the log and its index are appended to. Raises LaunchError when the command
    cannot be started (bad cwd, monitor failure) and InvalidState when a live
    monitor already serves this round. A command that cannot be executed
    (not found, not executable) is not an error here: the round ends at once
    with returncode 127/126 and ``error`` in ``exit.json``.
    """
    if not argv:
        raise LaunchError("the training command is empty", data={"field": "run.command"})
    if timeout_sec is not None and not timeout_sec > 0:
        raise LaunchError(f"timeout must be > 0 seconds, got {timeout_sec}")
    if not grace_sec >= 0:
        raise LaunchError(f"stop grace must be >= 0 seconds, got {grace_sec}")
    if not os.path.isdir(cwd):
        raise LaunchError(
            f"working directory of the round does not exist: {cwd}",
            data={"field": "cwd", "reason": "not a directory"},
        )
    previous = read_state(rnd.monitor_file)
    if previous is not None:
        old = RoundHandle(previous.pid, previous.start_time, "", "", "", "")
        if is_alive(old):
            raise InvalidState(
                f"a monitor (pid {previous.pid}) is still running this round",
                data={"file": str(rnd.monitor_file)},
            )
    append = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        for stale in (rnd.exit_file, rnd.monitor_file):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)
        for folder in (rnd.dir, rnd.log.parent, rnd.log_index.parent):
            folder.mkdir(parents=True, exist_ok=True)
        # The index exists before the log (a tailer that finds the log finds it too);
        # the monitor's own stderr (a traceback if it ever crashes) goes to the log.
        os.close(os.open(rnd.log_index, append, shim.FILE_MODE))
        log_fd = os.open(rnd.log, append, shim.FILE_MODE)
    except OSError as exc:
        raise LaunchError(
            f"cannot prepare the round's files: {exc.filename}: {exc.strerror}",
            data={"file": str(exc.filename), "reason": exc.strerror},
        ) from exc
    ready_r, ready_w = os.pipe()
    try:
        proc = subprocess.Popen(
            build_shim_argv(
                argv, rnd, cwd=cwd, timeout_sec=timeout_sec, grace_sec=grace_sec, ready_fd=ready_w
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_fd,
            env=dict(env),
            cwd="/",
            pass_fds=(ready_w,),
            start_new_session=True,
        )
    except OSError as exc:
        os.close(ready_r)
        raise LaunchError(f"cannot start the round monitor: {exc}") from exc
    finally:
        os.close(ready_w)
        os.close(log_fd)
    _children[proc.pid] = proc
    try:
        ready = await _read_until_eof(ready_r, READY_TIMEOUT)
    finally:
        os.close(ready_r)
    state = read_state(rnd.monitor_file) if ready.startswith(b"READY") else None
    if state is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.poll()
        raise LaunchError(
            f"the round monitor failed to start (exit status {code}); see {rnd.log}",
            data={"file": str(rnd.log), "tail": _log_tail(rnd.log)},
        )
    return RoundHandle(
        pid=state.pid,
        start_time=state.start_time,
        log=str(rnd.log),
        index=str(rnd.log_index),
        exit_file=str(rnd.exit_file),
        state_file=str(rnd.monitor_file),
    )


async def _read_until_eof(fd: int, timeout: float) -> bytes:
    os.set_blocking(fd, False)
    data = b""
    with anyio.move_on_after(timeout):
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 256)
            except BlockingIOError:
                continue
            if not chunk:
                break
            data += chunk
    return data


def _log_tail(path: Path, size: int = 2000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _lost(handle: RoundHandle) -> ExitInfo:
    state = None
    with contextlib.suppress(LaunchError):
        state = read_state(handle.state_file)
    now = time.time()
    started = state.started_at if state is not None else now
    return ExitInfo(
        returncode=None,
        signal=None,
        timed_out=False,
        stopped=False,
        started_at=started,
        ended_at=now,
        duration_sec=max(0.0, now - started),
        lost=True,
        error=f"the round monitor (pid {handle.pid}) ended without writing {handle.exit_file}",
    )


def _check(handle: RoundHandle) -> ExitInfo | None:
    info = read_exit(handle.exit_file)
    if info is not None:
        _reap(handle.pid)
        return info
    if is_alive(handle):
        return None
    # exit.json is written just before the monitor exits: look once more.
    info = read_exit(handle.exit_file)
    if info is not None:
        return info
    # The monitor died without it (killed): its job must not run on unsupervised.
    with contextlib.suppress(LaunchError):
        kill_orphans(handle)
    return _lost(handle)


async def wait_exit(handle: RoundHandle, *, poll: float = 0.2) -> ExitInfo:
    """Wait until the round ends: ``exit.json``, or ``lost=True`` if the monitor died without it.

    Woken by watchfiles on the round folder, with a check every ``poll`` seconds.
    """
    info = _check(handle)
    if info is not None:
        return info
    folder = os.path.dirname(handle.exit_file)
    stop = anyio.Event()
    changes = awatch(
        folder,
        watch_filter=None,
        debounce=50,
        step=10,
        stop_event=stop,
        recursive=False,
        rust_timeout=max(1, int(poll * 1000)),
        yield_on_timeout=True,
    )
    try:
        async with contextlib.aclosing(changes):
            async for _ in changes:
                info = _check(handle)
                if info is not None:
                    return info
    except OSError:
        pass  # the folder vanished: fall back to the periodic check
    finally:
        stop.set()
    while (info := _check(handle)) is None:
        await anyio.sleep(poll)
    return info
