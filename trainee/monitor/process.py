"""Start a round under its monitor (:mod:`trainee.shim`), watch it, stop it, re-adopt it.

The monitor is started with ``start_new_session=True`` (and calls ``setsid()``
itself), so no signal aimed at the daemon or its process group reaches it: a
daemon killed with SIGKILL leaves the round running. The daemon keeps the
monitor's pid and its ``/proc`` start time (:class:`RoundHandle`); together
they identify the monitor even after pid reuse, so a restarted daemon tells a
live round (re-adopt it) from a dead one (``exit.json`` there: finished;
missing: lost).

Launch tokens: each launch carries a token (kept in the store before the monitor
starts, and in ``monitor.json`` and ``exit.json``). The monitor claims its launch by
creating ``claim-<token>`` in the round's control folder before the command starts;
a restarted daemon that finds a launch recorded but not confirmed tries to create
that same file first (:func:`revoke_launch`): whoever creates it decides, so the
round's command runs once whatever instant the daemon died at. An exit or state file
with another token (an earlier attempt's) is never taken for this launch's.

The control files are read with :mod:`trainee.jobfiles` (no symlink followed, never
blocking on a FIFO, bounded): in unsafe mode the job could reach
them, and a bad one is a warning, never a hang.

Reaping: when this process started the monitor, the ``Popen`` object is kept
in a registry and ``poll()``-ed by :func:`is_alive` / :func:`wait_exit`, so an
exited monitor is collected as soon as it is noticed and never lingers as a
zombie. Re-adopted monitors are not our children; their parent reaps them.
"""

from __future__ import annotations

import contextlib
import logging
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

from trainee import jobfiles, shim
from trainee.errors import InvalidState, LaunchError
from trainee.testhooks import crash_point, pause_wanted, wait_released

__all__ = [
    "Claim",
    "ExitInfo",
    "Limits",
    "MonitorState",
    "RoundHandle",
    "RoundPaths",
    "environ_of",
    "exit_of",
    "is_alive",
    "kill_orphans",
    "monitor_pids",
    "processes_with_env",
    "read_claim",
    "read_exit",
    "read_state",
    "request_stop",
    "revoke_launch",
    "spawn_round",
    "wait_exit",
]

log = logging.getLogger("trainee.monitor")

READY_TIMEOUT = 30.0
SHIM = Path(shim.__file__).resolve()
CONTROL_LIMIT = 1 << 20
"""Bytes read at most from a control file (exit.json, monitor.json, a claim)."""


class RoundPaths(Protocol):
    """What the monitor needs of a round's layout (``trainee.launch.layout.RoundLayout``)."""

    @property
    def dir(self) -> Path: ...
    @property
    def log(self) -> Path: ...
    @property
    def log_index(self) -> Path: ...
    @property
    def control(self) -> Path: ...
    @property
    def exit_file(self) -> Path: ...
    @property
    def monitor_file(self) -> Path: ...
    @property
    def stop_file(self) -> Path: ...
    def claim_file(self, token: str) -> Path: ...


class RoundHandle(msgspec.Struct, frozen=True):
    """Identifies a round's monitor: pid + ``/proc`` start time, and the round's files."""

    pid: int
    start_time: int
    log: str
    index: str
    exit_file: str
    state_file: str
    token: str | None = None
    """The launch's token: exit and state files of another launch are not this one's."""


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
    limit: str | None = None
    """Why the monitor killed the round over ``run.limits`` (``memory limit 8192 MiB reached``)."""
    token: str | None = None
    """The launch this record is of (None: written before launches had tokens)."""


class MonitorState(msgspec.Struct):
    """``monitor.json``, written by the monitor once the command runs."""

    pid: int
    start_time: int
    child_pid: int | None
    started_at: float
    argv: list[str]
    token: str | None = None


class Claim(msgspec.Struct):
    """``claim-<token>``: who decided a launch's fate (``monitor``: it started the command;
    ``daemon``: a restarted daemon revoked it before it started)."""

    by: str
    pid: int | None = None
    start_time: int | None = None
    token: str | None = None
    at: float | None = None
    job_id: str | None = None
    """A cluster job's id, when its job script claimed the launch (Slurm's)."""


_exit_decoder = msgspec.json.Decoder(ExitInfo)
_state_decoder = msgspec.json.Decoder(MonitorState)
_claim_decoder = msgspec.json.Decoder(Claim)
_children: dict[int, subprocess.Popen[bytes]] = {}
"""Monitors this process started and has not reaped yet."""


def _read_json(path: str | Path, decoder: msgspec.json.Decoder[msgspec.Struct]) -> object:
    folder = os.path.dirname(os.path.abspath(path))
    try:
        # never a symlink, a FIFO or a file elsewhere (unsafe jobs can reach this folder)
        data, more = jobfiles.read_bounded(path, CONTROL_LIMIT, within=[folder], deny=())
        if more:
            raise jobfiles.NotRegularFile(0, f"larger than {CONTROL_LIMIT} bytes", str(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LaunchError(
            f"cannot read {path}: {exc.strerror or exc}",
            data={"file": str(path), "reason": str(exc.strerror or exc)},
        ) from exc
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


def read_claim(rnd: RoundPaths, token: str) -> Claim | None:
    """The claim of launch ``token``, None when nobody claimed it (yet)."""
    claim = _read_json(rnd.claim_file(token), _claim_decoder)  # type: ignore[arg-type]
    assert claim is None or isinstance(claim, Claim)
    return claim


def revoke_launch(rnd: RoundPaths, token: str) -> Claim | None:
    """Decide the fate of a launch that was recorded but never confirmed.

    None: revoked here; its monitor had not claimed it, and never will start the
    command now (it finds the claim and exits), so the round can be launched anew.
    Otherwise the monitor's claim: it started the command, which must be re-adopted
    (its pid and start time name the monitor), never run a second time.
    """
    rnd.control.mkdir(parents=True, exist_ok=True)
    found = shim.claim(
        str(rnd.claim_file(token)), {"by": "daemon", "token": token, "at": time.time()}
    )
    if found is None:
        return None
    try:
        return msgspec.convert(found, type=Claim)
    except msgspec.ValidationError:
        # unreadable (a claim is written whole before it appears: someone tampered)
        return Claim(by="unknown", token=token)


def monitor_pids() -> set[int]:
    """Pids of the round monitors (:mod:`trainee.shim`, started as ``python -I <file>``)
    running on this machine as processes this user can see: a process that descends
    from one of them is a round's job."""
    shim_path = str(SHIM).encode()
    found: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read(4096).split(b"\0")
        except OSError:
            continue
        if len(argv) > 2 and argv[1] == b"-I" and argv[2] == shim_path:
            found.add(int(name))
    return found


ENVIRON_LIMIT = 1 << 21
"""Bytes of a process's environment read at most (ARG_MAX is 2 MiB)."""


def _environ_bytes(pid: int) -> bytes | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read(ENVIRON_LIMIT)
    except OSError:  # gone, or another user's
        return None


def environ_of(pid: int, start_time: int) -> dict[str, str] | None:
    """The environment process ``pid`` was started with, when it is still the process
    that started at ``start_time`` (a monitor: its job cannot change it); else None."""
    data = _environ_bytes(pid)
    fields = _stat_fields(pid)
    if data is None or fields is None or int(fields[19]) != start_time:
        return None
    out: dict[str, str] = {}
    for entry in data.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep:
            out[name.decode(errors="replace")] = value.decode(errors="replace")
    return out


def processes_with_env(name: str, value: str) -> list[int]:
    """Live processes of this user started with ``name=value`` in their environment
    (this process excepted): a round's whole tree carries its ``TRAINEE_ROUND_DIR``,
    whatever became of its process group or session."""
    entry = f"{name}={value}".encode()
    found: list[int] = []
    for pid_name in os.listdir("/proc"):
        if not pid_name.isdigit() or int(pid_name) == os.getpid():
            continue
        data = _environ_bytes(int(pid_name))
        if data is None or entry not in data.split(b"\0"):
            continue
        fields = _stat_fields(int(pid_name))
        if fields is not None and fields[0] not in (b"Z", b"X"):
            found.append(int(pid_name))
    return sorted(found)


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
    token: str | None = None,
    limits: Limits | None = None,
) -> list[str]:
    """The monitor's command line (``-I``: no user site, no PYTHON* variables, no cwd on the path)."""
    cmd = [sys.executable, "-I", str(SHIM)]
    cmd += ["--log", str(rnd.log), "--index", str(rnd.log_index)]
    cmd += ["--exit", str(rnd.exit_file), "--state", str(rnd.monitor_file)]
    cmd += ["--grace", repr(float(grace_sec)), "--cwd", cwd]
    # a stop recorded before the command runs keeps it from running (see trainee.shim)
    cmd += ["--stop-file", str(rnd.stop_file)]
    if timeout_sec is not None:
        cmd += ["--timeout", repr(float(timeout_sec))]
    if ready_fd is not None:
        cmd += ["--ready-fd", str(ready_fd)]
    if token is not None:
        cmd += ["--token", token, "--claim", str(rnd.claim_file(token))]
    if limits is not None and limits.memory_mb is not None:
        cmd += ["--max-memory-mb", str(limits.memory_mb)]
    if limits is not None and limits.processes is not None:
        cmd += ["--max-processes", str(limits.processes)]
    for point in ("shim.before_exec", "shim.spawned"):
        folder = pause_wanted(point)
        if folder is not None:
            cmd += ["--test-pause", f"{point}={folder}"]
    return [*cmd, "--", *argv]


class Limits(msgspec.Struct, frozen=True):
    """``run.limits`` of a round, enforced by its monitor over the whole process tree."""

    memory_mb: int | None = None
    processes: int | None = None


async def spawn_round(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    rnd: RoundPaths,
    timeout_sec: float | None,
    grace_sec: float,
    token: str | None = None,
    limits: Limits | None = None,
) -> RoundHandle:
    """Start ``argv`` under a new monitor; return once the command runs.

    ``token`` names the launch (recorded in the store before this is called): the
    monitor claims it before the command starts (see :func:`revoke_launch`); a launch
    revoked meanwhile raises LaunchError and starts nothing. ``limits``: run.limits.

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
    pause = pause_wanted("monitor.before_spawn")
    if pause is not None:
        await anyio.to_thread.run_sync(wait_released, "monitor.before_spawn", pause)
    previous = read_state(rnd.monitor_file)
    if previous is not None:
        old = RoundHandle(previous.pid, previous.start_time, "", "", "", "")
        if is_alive(old):
            raise InvalidState(
                f"a monitor (pid {previous.pid}) is still running this round",
                data={"file": str(rnd.monitor_file)},
            )
    append = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
    try:
        for stale in (rnd.exit_file, rnd.monitor_file):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(stale)
        for folder in (rnd.dir, rnd.control, rnd.log.parent, rnd.log_index.parent):
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
                argv,
                rnd,
                cwd=cwd,
                timeout_sec=timeout_sec,
                grace_sec=grace_sec,
                ready_fd=ready_w,
                token=token,
                limits=limits,
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
    crash_point("monitor.spawned")
    try:
        ready = await _read_until_eof(ready_r, READY_TIMEOUT)
    finally:
        os.close(ready_r)
    state = read_state(rnd.monitor_file) if ready.startswith(b"READY") else None
    if state is not None and state.token != token:
        state = None
    if state is None:
        # no READY: the monitor is ending (or stuck); a revoked launch says so by its status
        with anyio.move_on_after(2):
            while proc.poll() is None:
                await anyio.sleep(0.01)
        code = proc.poll()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if code == shim.REVOKED:
            raise LaunchError(f"launch {token} of {rnd.dir} was revoked before it started")
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
        token=token,
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


_warned: set[tuple[str, str]] = set()


def exit_of(handle: RoundHandle) -> ExitInfo | None:
    """The launch's own ``exit.json``: None when absent, unreadable (a warning, once) or
    of another launch (another token)."""
    try:
        info = read_exit(handle.exit_file)
    except LaunchError as exc:
        if (handle.exit_file, exc.message) not in _warned:
            _warned.add((handle.exit_file, exc.message))
            log.warning("ignoring the round's exit file: %s", exc.message)
        return None
    if info is not None and handle.token is not None and info.token != handle.token:
        return None
    return info


def _check(handle: RoundHandle) -> ExitInfo | None:
    info = exit_of(handle)
    if info is not None:
        _reap(handle.pid)
        return info
    if is_alive(handle):
        return None
    # exit.json is written just before the monitor exits: look once more.
    info = exit_of(handle)
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
