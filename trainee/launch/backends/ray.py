"""Rounds as Ray Jobs: ``JobSubmissionClient`` at ``advanced.backend.address``.

The entrypoint runs the round's job script (``job.sh`` in the round's control folder,
on the filesystem the cluster shares with this machine) with the round's
environment as ``runtime_env`` variables and ``entrypoint_num_cpus/gpus``
reserved. The job's log comes back through ``tail_job_logs`` and is copied into
the round log, which the session tails as for local rounds; after a daemon
restart the copy resumes where the file ends. ``stop_job`` stops a job (Ray
sends SIGTERM, then SIGKILL). ``ray`` is an optional extra: ``pip install
'trainee[ray]'``; it is imported only when a Ray round runs.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import re
import shlex
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from trainee.errors import LaunchError
from trainee.launch.backends.base import (
    BWRAP_MISSING_CODE,
    JobRef,
    JobState,
    RoundJob,
    StateCallback,
    cancel_reason,
    clear_job_files,
    exit_info,
    honoured_cancel,
    job_script,
    mark_cancel,
    read_exit_code,
    remember_job,
    remembered_job,
    watch_job,
)
from trainee.launch.render import is_secret_name
from trainee.monitor.process import ExitInfo

__all__ = ["RayBackend"]

T = TypeVar("T")
log = logging.getLogger("trainee.launch.ray")


class RayBackend:
    name = "ray"

    def __init__(
        self,
        *,
        address: str,
        cpus: float | None = None,
        gpus: float | None = None,
        poll_interval_sec: float = 1.0,
        command_timeout_sec: float = 30.0,
    ) -> None:
        self.address = address
        # One CPU per round unless told otherwise, so K rounds on K CPUs run at once
        # and a (K+1)th waits in Ray's queue instead of overloading the node.
        self.cpus = 1.0 if cpus is None else float(cpus)
        self.gpus = gpus
        self.poll_interval_sec = poll_interval_sec
        self.command_timeout_sec = command_timeout_sec
        self._client: Any = None
        # At most 4 Ray calls at once from this session, beside the daemon's shared
        # worker threads. Ray's HTTP calls have no timeout of their own: a call is given
        # up after command_timeout_sec (+30 s), but its thread runs on until Ray answers
        # or the connection drops, so a head that hangs for long leaves such threads.
        self._limiter = anyio.CapacityLimiter(4)

    # -- the client (blocking HTTP) in a thread, with a timeout ----------------------------

    def _connect(self) -> Any:
        if self._client is None:
            try:
                from ray.job_submission import JobSubmissionClient
            except ImportError as exc:
                raise LaunchError(
                    "the Ray backend needs the ray package: pip install 'trainee[ray]'",
                    {"field": "advanced.backend", "reason": str(exc)},
                ) from exc
            # Ray's client takes these over its own address argument: the project's
            # advanced.backend.address must win (the daemon needs neither itself).
            for name in ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS"):
                if os.environ.get(name, self.address) != self.address:
                    log.warning(
                        "ignoring %s=%s of the daemon's environment: rounds go to %s "
                        "(advanced.backend.address)",
                        name,
                        os.environ[name],
                        self.address,
                    )
                os.environ.pop(name, None)
            try:
                # verify=False only without TLS: with it on a plain http:// address,
                # tail_job_logs hands aiohttp ssl=None, which it deprecates.
                plain = self.address.startswith("http://")
                self._client = JobSubmissionClient(self.address, verify=not plain)
            except Exception as exc:
                raise LaunchError(
                    f"cannot reach the Ray Jobs API at {self.address}: {exc}",
                    {"field": "advanced.backend.address", "address": self.address},
                ) from exc
        return self._client

    async def _call(self, what: str, fn: Callable[[Any], T]) -> T:
        def run() -> T:
            return fn(self._connect())

        try:
            with anyio.fail_after(self.command_timeout_sec + 30):  # the import may be slow
                return await anyio.to_thread.run_sync(
                    run, abandon_on_cancel=True, limiter=self._limiter
                )
        except TimeoutError as exc:
            raise LaunchError(
                f"Ray {what} did not answer within {self.command_timeout_sec:g} s ({self.address})",
                {"address": self.address, "reason": "timeout"},
            ) from exc
        except LaunchError:
            raise
        except Exception as exc:
            raise LaunchError(
                f"Ray {what} failed ({self.address}): {type(exc).__name__}: {exc}",
                {"address": self.address, "reason": str(exc)},
            ) from exc

    # -- Backend ---------------------------------------------------------------------------

    async def submit(self, job: RoundJob) -> JobRef:
        job.rnd.dir.mkdir(parents=True, exist_ok=True)
        job.rnd.control.mkdir(parents=True, exist_ok=True)
        job.rnd.log.parent.mkdir(parents=True, exist_ok=True)
        clear_job_files(job.rnd)
        script = job.rnd.control / "job.sh"
        script.write_text(job_script(job, clean_env=False))
        job_id = f"{job.name}-{uuid.uuid4().hex[:8]}"
        ref = JobRef(backend=self.name, job_id=job_id, token=job.token)
        # Known before Ray has it: a daemon dying right after submitting still finds it.
        remember_job(job.rnd, ref)
        options: dict[str, Any] = {"entrypoint_num_cpus": self.cpus}
        if self.gpus:
            options["entrypoint_num_gpus"] = self.gpus
        # Ray shows a job's runtime_env to whoever reaches its dashboard: variables named
        # like secrets stay here (the cluster needs its own credentials).
        env = {k: v for k, v in job.env.items() if not is_secret_name(k)}
        withheld = sorted(set(job.env) - set(env))
        if withheld:
            log.warning(
                "%s: not sending %s to Ray (a runtime_env is visible on its dashboard)",
                job.name,
                ", ".join(withheld),
            )
        # Ray's stop_job waits this long between SIGTERM and SIGKILL (default 3 s)
        env["RAY_JOB_STOP_WAIT_TIME_S"] = str(max(1, math.ceil(job.grace_sec)))
        await self._call(
            "submit_job",
            functools.partial(
                _submit,
                entrypoint=f"sh {shlex.quote(str(script))}",
                submission_id=job_id,
                env=env,
                options=options,
            ),
        )
        return ref

    async def _status(self, job_id: str) -> tuple[JobState, str, Any]:
        info = await self._call("get_job_info", lambda c: _info_or_none(c, job_id))
        if info is None:
            return JobState.UNKNOWN, "unknown to Ray", None
        status = str(getattr(info.status, "value", info.status)).upper()
        if status == "PENDING":
            return JobState.QUEUED, "pending", info
        if status == "RUNNING":
            return JobState.RUNNING, "running", info
        if status == "STOPPED":
            return JobState.CANCELLED, "stopped", info
        return JobState.EXITED, status.lower(), info

    async def wait(
        self, ref: JobRef, job: RoundJob, *, on_state: StateCallback | None = None
    ) -> ExitInfo:
        assert ref.job_id is not None
        job_id = ref.job_id
        copier = _LogCopier(job.rnd.log)

        async def finish(state: JobState, detail: str, info: object, started: float) -> ExitInfo:
            if info is not None:
                try:  # the whole log, whatever the stream delivered
                    logs = await self._call("get_job_logs", lambda c: c.get_job_logs(job_id))
                    copier.complete(logs)
                except LaunchError as exc:
                    # e.g. Ray cannot decode a log with non-UTF-8 bytes: the round keeps
                    # what the stream delivered, and its result
                    log.warning("%s: the job's full log: %s", job.name, exc.message)
            return self._exit(job_id, job, state, detail, info, started)

        async def cancel(reason: str) -> None:
            await self.cancel(ref, job, reason=reason)

        async with anyio.create_task_group() as tg:
            tg.start_soon(self._follow_logs, job_id, copier)
            try:
                return await watch_job(
                    ref,
                    job,
                    engine="Ray",
                    status=lambda: self._status(job_id),
                    cancel=cancel,
                    finish=finish,
                    poll_sec=self.poll_interval_sec,
                    on_state=on_state,
                )
            finally:
                tg.cancel_scope.cancel()
                copier.close()
        raise AssertionError("unreachable: the task group returns from its body")

    async def _follow_logs(self, job_id: str, copier: _LogCopier) -> None:
        """Live output: Ray's log stream copied into the round log (best effort; the
        full log is fetched again when the job ends)."""
        with contextlib.suppress(Exception):
            client = await self._call("connect", lambda c: c)
            async for chunk in client.tail_job_logs(job_id):
                copier.feed(chunk)

    def _exit(
        self,
        job_id: str,
        job: RoundJob,
        state: JobState,
        detail: str,
        info: Any,
        running_since: float | None,
    ) -> ExitInfo:
        code = read_exit_code(job.rnd)
        if code is None:
            code = getattr(info, "driver_exit_code", None)
        if code is None and detail == "succeeded":
            code = 0
        reason = honoured_cancel(job.rnd, cancelled=state == JobState.CANCELLED, code=code)
        started = running_since or (
            info.start_time / 1000 if getattr(info, "start_time", None) else time.time()
        )
        error = None
        if code == BWRAP_MISSING_CODE:
            error = "guarded mode: bubblewrap is not installed on the Ray node (see the log)"
        elif state == JobState.CANCELLED and cancel_reason(job.rnd) is None:
            error = f"ray job {job_id} was stopped outside trainee"
        elif detail == "failed" and code is None:
            error = f"ray job {job_id} failed: {getattr(info, 'message', '')}"
        return exit_info(
            returncode=code,
            started_at=started,
            timed_out=reason == "timed_out",
            stopped=reason == "stopped",
            error=error,
        )

    async def cancel(self, ref: JobRef, job: RoundJob, *, reason: str = "stopped") -> None:
        if cancel_reason(job.rnd) is None:
            mark_cancel(job.rnd, reason)
        if ref.job_id is not None and _ours(ref.job_id, job):
            job_id = ref.job_id
            await self._call("stop_job", lambda c: _stop_or_false(c, job_id))

    async def adoptable(self, ref: JobRef, job: RoundJob) -> bool:
        if ref.job_id is None:
            return False
        state, _, _ = await self._status(ref.job_id)
        return state != JobState.UNKNOWN

    async def probe(self) -> str:
        version = await self._call("get_version", lambda c: c.get_version())
        return f"the Ray Jobs API at {self.address} answers (version {version})"

    def unrecorded(self, job: RoundJob) -> JobRef | None:
        return remembered_job(job.rnd)

    async def end_lost(self, ref: JobRef, job: RoundJob) -> list[str]:
        if ref.job_id is None:
            return []
        state, _, _ = await self._status(ref.job_id)
        if state in (JobState.QUEUED, JobState.RUNNING) and _ours(ref.job_id, job):
            job_id = ref.job_id
            await self._call("stop_job", lambda c: _stop_or_false(c, job_id))
            return [f"ray job {job_id}"]
        return []


def _ours(job_id: str, job: RoundJob) -> bool:
    """Submission ids are ``<round's job name>-<8 hex>``: an id read back from the round
    folder (which a guarded job can write) never stops a job that is not this round's."""
    ok = re.fullmatch(re.escape(job.name) + "-[0-9a-f]{8}", job_id) is not None
    if not ok:
        log.warning("%s: not stopping Ray job %s, which is not this round's", job.name, job_id)
    return ok


def _submit(
    client: Any,
    *,
    entrypoint: str,
    submission_id: str,
    env: dict[str, str],
    options: dict[str, Any],
) -> None:
    client.submit_job(
        entrypoint=entrypoint,
        submission_id=submission_id,
        runtime_env={"env_vars": env},
        **options,
    )


def _info_or_none(client: Any, job_id: str) -> Any:
    try:
        return client.get_job_info(job_id)
    except RuntimeError as exc:
        if "does not exist" in str(exc) or "404" in str(exc):
            return None
        raise


def _stop_or_false(client: Any, job_id: str) -> bool:
    try:
        return bool(client.stop_job(job_id))
    except RuntimeError as exc:
        if "does not exist" in str(exc) or "404" in str(exc):
            return False
        raise


class _LogCopier:
    """Appends the job's log to the round log, skipping what an earlier copy (before a
    daemon restart) already wrote: Ray replays a log from its start."""

    def __init__(self, path: os.PathLike[str]) -> None:
        self.path = path
        try:
            self.have = os.path.getsize(path)
        except OSError:
            self.have = 0
        self.seen = 0
        self._fd: int | None = None

    def _write(self, data: bytes) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(self._fd, data)

    def feed(self, text: str) -> None:
        data = text.encode()
        start = self.seen
        self.seen += len(data)
        if self.seen > self.have:
            self._write(data[max(0, self.have - start) :])
            self.have = self.seen

    def complete(self, text: str) -> None:
        data = text.encode()
        if len(data) > self.have:
            self._write(data[self.have :])
            self.have = len(data)
        self.seen = max(self.seen, len(data))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
