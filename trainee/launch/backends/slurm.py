"""Rounds as Slurm batch jobs: ``sbatch --parsable``, ``squeue``/``scontrol`` (``sacct``
when present), ``scancel``.

The batch script (``job.sbatch`` in the round's control folder) runs the rendered command
with the round's environment and writes stdout and stderr to the round log
(``-o``) on the filesystem the nodes share with this machine; the session tails
that file as for local rounds. Every Slurm command runs with a timeout: a Slurm
that does not answer ends the round with an error naming the command, never a
hang. Cancelling is ``scancel``: Slurm sends SIGTERM and, after its ``KillWait``,
SIGKILL.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

import anyio

from trainee.errors import LaunchError
from trainee.launch.backends.base import (
    BWRAP_MISSING_CODE,
    MAX_POLL_FAILURES,
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
from trainee.monitor.process import ExitInfo

__all__ = ["MAX_POLL_FAILURES", "SlurmBackend", "SlurmOptions", "parse_scontrol"]

PENDING = {
    "PENDING",
    "CONFIGURING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "SUSPENDED",
    "RESV_DEL_HOLD",
    "SPECIAL_EXIT",
    "STAGE_OUT",
    "SIGNALING",
    "RESIZING",
    "STOPPED",
}
RUNNING = {"RUNNING", "COMPLETING"}
ENDED = {
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
    "BOOT_FAIL",
    "DEADLINE",
    "REVOKED",
}


class SlurmOptions:
    """``advanced.backend`` options of a Slurm round."""

    def __init__(
        self,
        *,
        partition: str | None = None,
        time_limit: str | None = None,
        cpus: int | None = None,
        gpus: int | None = None,
        mem: str | None = None,
        account: str | None = None,
        qos: str | None = None,
        sbatch_args: Sequence[str] = (),
        poll_interval_sec: float = 1.0,
        command_timeout_sec: float = 30.0,
    ) -> None:
        self.partition = partition
        self.time_limit = time_limit
        self.cpus = cpus
        self.gpus = gpus
        self.mem = mem
        self.account = account
        self.qos = qos
        self.sbatch_args = tuple(sbatch_args)
        self.poll_interval_sec = poll_interval_sec
        self.command_timeout_sec = command_timeout_sec


def parse_scontrol(text: str) -> dict[str, str]:
    """``scontrol show job`` output as a mapping (``JobState``, ``ExitCode``, ...)."""
    out: dict[str, str] = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep and key not in out:
            out[key] = value
    return out


def _slurm_escape(text: str) -> str:
    """``text`` as one word of an ``#SBATCH`` line: sbatch splits at whitespace and ends
    the line at a ``#`` outside double quotes (checked with sbatch 22.05), so such a
    word is double-quoted, with backslashes and quotes escaped."""
    if any(c in text for c in "\n\r"):
        raise LaunchError(
            f"a Slurm option cannot hold a line break: {text!r} "
            "(rename the folder or change advanced.backend)",
            {"field": "advanced.backend", "value": text},
        )
    if any(c.isspace() or c in "#'\"\\" for c in text):
        # inside double quotes sbatch reads \\ as \ and \" as "
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _directive(flag: str, value: str) -> str:
    return f"#SBATCH {flag}={_slurm_escape(value)}"


class SlurmBackend:
    name = "slurm"

    def __init__(self, options: SlurmOptions, client_env: Mapping[str, str]) -> None:
        self.options = options
        # sbatch & co. need the caller's SLURM_CONF, PATH and munge settings.
        self.client_env = dict(client_env)

    # -- Slurm commands ------------------------------------------------------------------

    async def _call(
        self, argv: list[str], *, check: bool = True, env: Mapping[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        exe = shutil.which(argv[0], path=self.client_env.get("PATH"))
        if exe is None:
            raise LaunchError(
                f"the Slurm backend needs {argv[0]}, which is not on PATH; install the "
                "Slurm client (Debian: slurm-client) or set advanced.backend to local",
                data={"field": "advanced.backend", "command": argv[0]},
            )
        timeout = self.options.command_timeout_sec
        try:
            with anyio.fail_after(timeout):
                done = await anyio.run_process(
                    [exe, *argv[1:]],
                    env=dict(self.client_env if env is None else env),
                    check=False,
                    stdin=subprocess.DEVNULL,
                )
        except TimeoutError as exc:
            raise LaunchError(
                f"{' '.join(argv)} did not answer within {timeout:g} s; is slurmctld up?",
                data={"command": argv[0], "reason": "timeout"},
            ) from exc
        result = subprocess.CompletedProcess(
            argv,
            done.returncode,
            done.stdout.decode(errors="replace"),
            done.stderr.decode(errors="replace"),
        )
        if check and result.returncode != 0:
            raise LaunchError(
                f"{' '.join(argv)} failed (exit {result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}",
                data={"command": argv[0], "reason": result.stderr.strip()},
            )
        return result

    def _header(self, job: RoundJob) -> list[str]:
        o = self.options
        log = str(job.rnd.log)
        header = [
            _directive("--job-name", job.name),
            _directive("--output", log.replace("%", "%%")),  # % starts a Slurm filename pattern
            _directive("--error", log.replace("%", "%%")),
            "#SBATCH --open-mode=append",
            # a requeued job would run again into the same round log
            "#SBATCH --no-requeue",
            _directive("--chdir", job.cwd),
            # the job gets the round's environment through sbatch's own (never written
            # into the script: it may hold the caller's secrets, kept only in memory)
            "#SBATCH --export=ALL",
        ]
        limit = o.time_limit
        if limit is None and job.timeout_sec is not None:
            # Slurm's own limit backs ours up: the timeout plus the stop grace, rounded up.
            limit = str(max(1, math.ceil((job.timeout_sec + job.grace_sec) / 60) + 1))
        for flag, value in (
            ("--partition", o.partition),
            ("--time", limit),
            ("--cpus-per-task", o.cpus),
            ("--gpus", o.gpus),
            ("--mem", o.mem),
            ("--account", o.account),
            ("--qos", o.qos),
        ):
            if value is not None:
                header.append(_directive(flag, str(value)))
        header += ["#SBATCH " + _slurm_escape(arg) for arg in o.sbatch_args]
        return header

    # -- Backend -------------------------------------------------------------------------

    async def submit(self, job: RoundJob) -> JobRef:
        job.rnd.dir.mkdir(parents=True, exist_ok=True)
        job.rnd.control.mkdir(parents=True, exist_ok=True)
        job.rnd.log.parent.mkdir(parents=True, exist_ok=True)
        clear_job_files(job.rnd)
        script = job.rnd.control / "job.sbatch"
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(job_script(job, header=self._header(job), clean_env=False))
        done = await self._call(["sbatch", "--parsable", str(script)], env=self._submit_env(job))
        job_id = done.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise LaunchError(f"sbatch answered {done.stdout.strip()!r}, not a job id")
        ref = JobRef(backend=self.name, job_id=job_id, token=job.token)
        remember_job(job.rnd, ref)
        return ref

    def _submit_env(self, job: RoundJob) -> dict[str, str]:
        """sbatch's environment, which ``--export=ALL`` hands to the job: the round's own,
        plus what sbatch needs to find the cluster; no Slurm job or option variables of
        the caller (a daemon inside an allocation would otherwise leak its own)."""
        env = {
            k: v
            for k, v in job.env.items()
            if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_"))
        }
        for key in ("SLURM_CONF", "PATH"):
            if key in self.client_env and key not in env:
                env[key] = self.client_env[key]
        if "SLURM_CONF" in self.client_env:
            env["SLURM_CONF"] = self.client_env["SLURM_CONF"]
        return env

    async def _state(self, job_id: str) -> tuple[JobState, str, dict[str, str]]:
        """The job's state, Slurm's name for it and what ``scontrol`` says (may be empty)."""
        done = await self._call(
            ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T|%r"], check=False
        )
        raw, _, why = done.stdout.strip().partition("|")
        info: dict[str, str] = {}
        if done.returncode != 0 or not raw:
            if "Invalid job id" not in done.stderr and done.returncode != 0:
                raise LaunchError(f"squeue -j {job_id} failed: {done.stderr.strip()}")
            shown = await self._call(["scontrol", "show", "job", job_id], check=False)
            info = parse_scontrol(shown.stdout) if shown.returncode == 0 else {}
            raw = info.get("JobState", "")
            if not raw and shutil.which("sacct", path=self.client_env.get("PATH")):
                acct = await self._call(
                    ["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode"], check=False
                )
                first = acct.stdout.strip().splitlines()[:1]
                if first and "|" in first[0]:
                    state, code = first[0].split("|", 1)
                    raw = state.split()[0]
                    info = {"JobState": raw, "ExitCode": code}
        elif raw in ENDED:
            shown = await self._call(["scontrol", "show", "job", job_id], check=False)
            info = parse_scontrol(shown.stdout) if shown.returncode == 0 else {}
        if raw in PENDING:
            return (
                JobState.QUEUED,
                f"{raw.lower()}: {why}" if why and why != "None" else raw.lower(),
                info,
            )
        if raw in RUNNING:
            return JobState.RUNNING, raw.lower(), info
        if raw == "CANCELLED":
            return JobState.CANCELLED, raw.lower(), info
        if raw in ENDED:
            return JobState.EXITED, raw.lower(), info
        return JobState.UNKNOWN, raw.lower() or "unknown", info

    async def wait(
        self, ref: JobRef, job: RoundJob, *, on_state: StateCallback | None = None
    ) -> ExitInfo:
        assert ref.job_id is not None
        job_id = ref.job_id

        async def finish(state: JobState, detail: str, info: object, started: float) -> ExitInfo:
            return self._exit(ref, job, detail, info if isinstance(info, dict) else {}, started)

        async def cancel(reason: str) -> None:
            await self.cancel(ref, job, reason=reason)

        return await watch_job(
            ref,
            job,
            engine="Slurm",
            status=lambda: self._state(job_id),
            cancel=cancel,
            finish=finish,
            poll_sec=self.options.poll_interval_sec,
            on_state=on_state,
        )

    def _exit(
        self, ref: JobRef, job: RoundJob, detail: str, info: Mapping[str, str], started: float
    ) -> ExitInfo:
        code = read_exit_code(job.rnd)
        sig: str | None = None
        if code is None:
            rc, _, signo = info.get("ExitCode", "").partition(":")
            if signo.isdigit() and int(signo):
                sig = f"signal {signo}"
            if detail in ("completed", "failed") and rc.isdigit():
                # Slurm's status only when the job ran to its end; a job cancelled or
                # lost before the script recorded its own has no status (0:0 in the queue).
                code = int(rc)
        cancelled = detail in ("cancelled", "timeout")
        reason = honoured_cancel(job.rnd, cancelled=cancelled, code=code)
        error = None
        if code == BWRAP_MISSING_CODE:
            error = "guarded mode: bubblewrap is not installed on the compute node (see the log)"
        elif detail == "cancelled" and reason is None:
            error = f"slurm job {ref.job_id} was cancelled outside trainee (scancel by someone)"
        elif detail not in ("completed", "failed", "cancelled", "timeout", "ended"):
            # "ended": Slurm forgot the job, whose script recorded its own status
            error = f"slurm job {ref.job_id} ended {detail.upper()}"
        return exit_info(
            returncode=code,
            signal=sig,
            started_at=started,
            timed_out=reason == "timed_out" or (detail == "timeout" and reason is None),
            stopped=reason == "stopped",
            error=error,
        )

    async def cancel(self, ref: JobRef, job: RoundJob, *, reason: str = "stopped") -> None:
        """``scancel --name`` as well as the id: a job id read back from the round folder
        (which a guarded job can write) never cancels a job that is not this round's."""
        if cancel_reason(job.rnd) is None:
            mark_cancel(job.rnd, reason)
        if ref.job_id is not None:
            await self._call(["scancel", f"--name={job.name}", ref.job_id])

    async def adoptable(self, ref: JobRef, job: RoundJob) -> bool:
        if ref.job_id is None:
            return False
        if read_exit_code(job.rnd) is not None:
            return True
        state, _, _ = await self._state(ref.job_id)
        return state != JobState.UNKNOWN

    async def probe(self) -> str:
        done = await self._call(["sinfo", "-h", "-o", "%P %a %D %t"])
        rows = [line.split() for line in done.stdout.splitlines() if line.strip()]
        names = [r[0].rstrip("*") for r in rows if r]
        wanted = self.options.partition
        if wanted is not None and wanted not in names:
            raise LaunchError(
                f"Slurm has no partition {wanted!r} (it has: {', '.join(names) or 'none'})",
                {"field": "advanced.backend.partition"},
            )
        return "Slurm answers; partitions: " + ", ".join(
            f"{r[0]} ({r[1]}, {r[2]} nodes {r[3]})" for r in rows if len(r) >= 4
        )

    def unrecorded(self, job: RoundJob) -> JobRef | None:
        return remembered_job(job.rnd)

    async def end_lost(self, ref: JobRef, job: RoundJob) -> list[str]:
        if ref.job_id is None:
            return []
        state, _, _ = await self._state(ref.job_id)
        if state in (JobState.QUEUED, JobState.RUNNING):
            await self._call(["scancel", f"--name={job.name}", ref.job_id])
            return [f"slurm job {ref.job_id}"]
        return []
