"""What every place a round can run on offers: submit, watch, cancel, re-adopt.

A backend gets a rendered round (command, environment, working folder; wrapped
in bwrap already in guarded mode) and must bring its output into the round's
log file: the local monitor writes it, Slurm writes it with ``sbatch -o`` on the
shared filesystem, Ray's log stream is copied into it. The session tails that
one file whatever the backend, so live output, metrics and the failure tail
work the same everywhere.

A :class:`JobRef` is what the store keeps to find a job again after a daemon
restart: the local monitor's pid and start time, or the engine's job id.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import math
import shlex
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import anyio
import msgspec

from trainee import jobfiles
from trainee.atomic import write_atomic
from trainee.errors import LaunchError
from trainee.launch.layout import RoundLayout
from trainee.monitor.process import ExitInfo, Limits

__all__ = [
    "BWRAP_MISSING_CODE",
    "MAX_POLL_FAILURES",
    "Backend",
    "JobRef",
    "JobState",
    "RoundJob",
    "StateCallback",
    "cancel_reason",
    "exit_code_file",
    "honoured_cancel",
    "job_script",
    "mark_cancel",
    "mark_running",
    "running_since",
    "watch_job",
]

log = logging.getLogger("trainee.launch")

BWRAP_MISSING_CODE = 97
"""The job script's exit status when guarded mode finds no bwrap on the node."""


class JobState(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    EXITED = "exited"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"
    """The engine no longer knows the job (or never did)."""


class JobRef(msgspec.Struct, frozen=True, kw_only=True):
    backend: str
    job_id: str | None = None
    pid: int | None = None
    start_time: int | None = None
    token: str | None = None
    """The launch's token (see :func:`trainee.monitor.process.revoke_launch`)."""


class RoundJob(msgspec.Struct, frozen=True, kw_only=True):
    """One launch of a round: what runs, where its files go and its limits."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    rnd: RoundLayout
    name: str
    """A name the engine shows (``trainee-s0001-r0003-a0``)."""
    timeout_sec: float | None
    grace_sec: float
    guarded: bool = False
    token: str | None = None
    """The launch's token, recorded in the store before the launch: the monitor or the
    job script claims it before the command starts (a launch runs once)."""
    limits: Limits | None = None
    """``run.limits``; enforced by the local monitor (a cluster has its own)."""


StateCallback = Callable[[JobState, str], Awaitable[None]]
"""Called when the engine reports a new state, with a detail line (``queued: Priority``)."""


class Backend(Protocol):
    name: str

    async def submit(self, job: RoundJob) -> JobRef:
        """Start (or queue) the job; returns once the engine has it. LaunchError otherwise."""
        ...

    async def wait(
        self, ref: JobRef, job: RoundJob, *, on_state: StateCallback | None = None
    ) -> ExitInfo:
        """Until the job ends: its exit (``lost=True`` when it vanished without one).
        Enforces ``job.timeout_sec`` of running time (``timed_out``)."""
        ...

    async def cancel(self, ref: JobRef, job: RoundJob, *, reason: str = "stopped") -> None:
        """Stop it: SIGTERM, then the engine's escalation. ``reason``: stopped or timed_out."""
        ...

    async def adoptable(self, ref: JobRef, job: RoundJob) -> bool:
        """True when the job can be watched again (running, queued, or ended with a result)."""
        ...

    async def end_lost(self, ref: JobRef, job: RoundJob) -> list[str]:
        """Make sure nothing of a lost attempt still runs; what was killed."""
        ...

    async def probe(self) -> str:
        """A one-line description of the engine when it answers; LaunchError otherwise."""
        ...

    def unrecorded(self, job: RoundJob) -> JobRef | None:
        """The job a launch left in the round's folder before the store recorded it (the
        daemon died in between), so it can be ended instead of running on unseen."""
        ...


# -- helpers shared by the cluster backends ------------------------------------------------


def exit_code_file(rnd: RoundLayout) -> Path:
    return rnd.control / "job-exit-code"


def _job_file(rnd: RoundLayout) -> Path:
    return rnd.control / "job.json"


def _read_control(path: Path) -> bytes:
    """A control file, read without following a link out of its folder or blocking."""
    data, more = jobfiles.read_bounded(path, 1 << 20, within=[path.parent], deny=())
    if more:
        raise jobfiles.NotRegularFile(0, "larger than 1 MiB", str(path))
    return data


def remember_job(rnd: RoundLayout, ref: JobRef) -> None:
    """Written as soon as the engine accepted the job, before the store records it."""
    path = _job_file(rnd)
    rnd.control.mkdir(parents=True, exist_ok=True)
    write_atomic(path, msgspec.json.encode(ref), fsync=False)


def remembered_job(rnd: RoundLayout) -> JobRef | None:
    try:
        return msgspec.json.decode(_read_control(_job_file(rnd)), type=JobRef)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _cancel_file(rnd: RoundLayout) -> Path:
    return rnd.control / "cancel.json"


def mark_cancel(rnd: RoundLayout, reason: str) -> None:
    """Remember why a job was cancelled, so a restarted daemon reports it the same way."""
    rnd.control.mkdir(parents=True, exist_ok=True)
    path = _cancel_file(rnd)
    write_atomic(path, json.dumps({"reason": reason, "at": time.time()}), fsync=False)


def cancel_reason(rnd: RoundLayout) -> str | None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        reason = json.loads(_read_control(_cancel_file(rnd))).get("reason")
        return str(reason) if reason else None
    return None


def _started_file(rnd: RoundLayout) -> Path:
    return rnd.control / "job-started"


def running_since(rnd: RoundLayout) -> float | None:
    """When the job was first seen running (not queued): its timeout counts from there,
    across daemon restarts."""
    try:
        value = float(_read_control(_started_file(rnd)))
    except (OSError, ValueError):
        return None
    # never a time to come: a value found there must not lift the timeout
    return value if math.isfinite(value) and value <= time.time() else None


def mark_running(rnd: RoundLayout) -> float:
    found = running_since(rnd)
    if found is not None:
        return found
    now = time.time()
    try:
        rnd.control.mkdir(parents=True, exist_ok=True)
        write_atomic(_started_file(rnd), repr(now), fsync=False)
    except OSError as exc:  # the timeout then counts from this daemon's first sight
        log.warning("cannot record when %s started: %s", rnd.dir, exc)
    return now


def honoured_cancel(rnd: RoundLayout, *, cancelled: bool, code: int | None) -> str | None:
    """Why trainee cancelled the job (``stopped``/``timed_out``), when the cancel is what
    ended it: the engine says cancelled, or the command exited with an error. A job that
    finished cleanly just before the cancel keeps its result."""
    reason = cancel_reason(rnd)
    if reason is None or not (cancelled or (code is not None and code != 0)):
        return None
    return reason


def clear_job_files(rnd: RoundLayout) -> None:
    for path in (exit_code_file(rnd), _cancel_file(rnd), _job_file(rnd), _started_file(rnd)):
        path.unlink(missing_ok=True)


def read_exit_code(rnd: RoundLayout) -> int | None:
    """The status the job script recorded when the command ended (None: it did not)."""
    try:
        text = _read_control(exit_code_file(rnd)).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.lstrip("-").isdigit() else None


def job_script(
    job: RoundJob, *, header: Sequence[str] = (), clean_env: bool = True, record_exit: bool = True
) -> str:
    """A POSIX shell script running the round's command on a cluster node.

    With ``clean_env`` it starts from an empty environment plus the round's own
    (``env -i``; else the engine passes the environment), in the
    round's working folder; in guarded mode it first checks that the sandbox
    (the ``bwrap`` the command starts with) exists on the node and otherwise ends
    with :data:`BWRAP_MISSING_CODE` and a message saying so. The command's status
    is written to :func:`exit_code_file` (atomically) before the script exits with it.

    With a launch token the script first claims the launch (``ln`` of a finished
    temporary file to ``claim-<token>`` in the control folder, atomic like the local
    monitor's): if a restarted daemon revoked the launch meanwhile (it found it never
    confirmed and submitted the round again), the script ends at once, silently, and
    the command never runs.

    Stopping: Slurm's scancel and Ray's stop_job send SIGTERM to every process of
    the job, the command's included. The script itself survives it (a handler that
    does nothing, run only once the foreground command has ended), so the status is
    recorded and the output complete; the engine's SIGKILL ends everything after its
    grace (Slurm's KillWait, Ray's RAY_JOB_STOP_WAIT_TIME_S).
    """
    lines = [
        "#!/bin/sh",
        *header,
        f"cd {shlex.quote(job.cwd)} || exit 1",
        "trap 'true' TERM INT HUP",
        f"mkdir -p {shlex.quote(str(job.rnd.control))}",
    ]
    if job.token is not None:
        claim = shlex.quote(str(job.rnd.claim_file(job.token)))
        tmp = shlex.quote(str(job.rnd.control / f".claim-{job.token}.")) + "$$.tmp"
        record = '{"by": "job", "job_id": "%s", "token": "' + job.token + '", "at": %s}\\n'
        lines += [
            f'printf \'{record}\' "${{SLURM_JOB_ID:-}}" "$(date +%s)" > {tmp} || exit 1',
            f"if ! ln {tmp} {claim} 2>/dev/null; then rm -f {tmp}; exit 0; fi",
            f"rm -f {tmp}",
        ]
    env_args = " ".join(shlex.quote(f"{k}={v}") for k, v in sorted(job.env.items()))
    command = " ".join(shlex.quote(a) for a in job.argv)
    run = f"env -i {env_args} {command}" if clean_env else command
    # In the foreground, not with `&`: a background command of a non-interactive shell
    # starts with SIGINT and SIGQUIT ignored. dash and bash both hold a trapped TERM
    # until the foreground command ends, so the status recorded is the command's own.
    wait = "rc=$?"
    if job.guarded:
        bwrap = shlex.quote(job.argv[0])
        lines += [
            f"if [ ! -x {bwrap} ]; then",
            f'  echo "trainee: guarded mode needs bubblewrap ({job.argv[0]}) on node'
            " $(hostname), which is not there; install bubblewrap on the nodes or run"
            ' with --unsafe" >&2',
            f"  rc={BWRAP_MISSING_CODE}",
            "else",
            f"  {run}",
            f"  {wait}",
            "fi",
        ]
    else:
        lines += [run, wait]
    if record_exit:
        target = shlex.quote(str(exit_code_file(job.rnd)))
        lines.append(f'printf "%s\\n" "$rc" > {target}.tmp && mv -f {target}.tmp {target}')
    lines.append('exit "$rc"')
    return "\n".join(lines) + "\n"


def exit_info(
    *,
    returncode: int | None,
    started_at: float,
    signal: str | None = None,
    timed_out: bool = False,
    stopped: bool = False,
    lost: bool = False,
    error: str | None = None,
) -> ExitInfo:
    now = time.time()
    return ExitInfo(
        returncode=returncode,
        signal=signal,
        timed_out=timed_out,
        stopped=stopped,
        started_at=started_at,
        ended_at=now,
        duration_sec=max(0.0, now - started_at),
        lost=lost,
        error=error,
    )


MAX_POLL_FAILURES = 5
"""Consecutive failed state queries (with growing pauses) before a round is given up."""

Status = Callable[[], Awaitable[tuple[JobState, str, object]]]
Finish = Callable[[JobState, str, object, float], Awaitable[ExitInfo]]


async def watch_job(
    ref: JobRef,
    job: RoundJob,
    *,
    engine: str,
    status: Status,
    cancel: Callable[[str], Awaitable[None]],
    finish: Finish,
    poll_sec: float,
    on_state: StateCallback | None = None,
) -> ExitInfo:
    """Poll a cluster job until it ends; what both cluster backends share.

    ``status`` asks the engine (LaunchError when it does not answer: tolerated
    :data:`MAX_POLL_FAILURES` times in a row, with growing pauses, then the round
    ends with an error and the job is cancelled); ``finish`` turns an ended job into
    its :class:`ExitInfo`. The timeout counts running time from the moment the job
    was first seen running (kept beside the job, so a restarted daemon goes on
    counting); over it the job is cancelled as ``timed_out``. A job the engine
    forgot is finished from the status its script recorded, else lost.
    """
    submitted = time.time()
    started = running_since(job.rnd)
    last: JobState | None = None
    failures = 0
    cancel_seen: float | None = None  # when a cancel was first seen still running
    resend_sec = job.grace_sec + max(5.0, 5 * poll_sec)
    while True:
        try:
            state, detail, info = await status()
            failures = 0
        except LaunchError as exc:
            failures += 1
            if failures >= MAX_POLL_FAILURES:
                with contextlib.suppress(LaunchError):
                    await cancel("lost")
                return exit_info(
                    returncode=None,
                    started_at=started or submitted,
                    error=f"{engine} stopped answering about job {ref.job_id}: {exc.message}",
                )
            await anyio.sleep(min(30.0, poll_sec * 2**failures))
            continue
        if state != last:
            last = state
            if on_state is not None:
                await on_state(state, f"{engine.lower()} job {ref.job_id} {detail}")
        if state == JobState.RUNNING and started is None:
            started = mark_running(job.rnd)
        if state in (JobState.EXITED, JobState.CANCELLED):
            return await finish(state, detail, info, started or submitted)
        if state == JobState.UNKNOWN:
            if read_exit_code(job.rnd) is not None:
                return await finish(JobState.EXITED, "ended", None, started or submitted)
            return exit_info(
                returncode=None,
                started_at=started or submitted,
                lost=True,
                error=f"{engine} no longer knows job {ref.job_id} and it left no exit status",
            )
        reason = cancel_reason(job.rnd)
        if (
            job.timeout_sec is not None
            and started is not None
            and time.time() - started > job.timeout_sec
            and reason is None
        ):
            with contextlib.suppress(LaunchError):
                await cancel("timed_out")
        elif reason is not None:
            # A cancel that did not take (the engine did not answer, or lost it): ask
            # again while the job still runs, after its grace, so a stop or a timeout
            # never leaves a job running without limit.
            now = time.time()
            if cancel_seen is None:
                cancel_seen = now
            elif now - cancel_seen > resend_sec:
                cancel_seen = now
                with contextlib.suppress(LaunchError):
                    await cancel(reason)
        await anyio.sleep(poll_sec)
