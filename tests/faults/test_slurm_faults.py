"""The Slurm backend against fake Slurm client programs: hangs, missing commands,
refusals, garbage answers, a controller that stops answering, jobs Slurm forgot.

The fakes are small shell scripts in ``tmp_path/bin`` (the only folder on the PATH the
backend gets through ``client_env``, so the machine's real Slurm client is never
reached). They record their arguments and environment under ``tmp_path/state`` and
answer from files the test writes, like a fake server would. The round's folder and
log are a real :class:`RoundLayout` under tmp_path.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio
import msgspec
import pytest

from tests.support.timing import scaled
from trainee.errors import LaunchError
from trainee.launch.backends.base import (
    JobRef,
    JobState,
    RoundJob,
    cancel_reason,
    exit_code_file,
    remembered_job,
)
from trainee.launch.backends.slurm import MAX_POLL_FAILURES, SlurmBackend, SlurmOptions
from trainee.launch.layout import ProjectLayout
from trainee.monitor.process import ExitInfo

T = TypeVar("T")

HANG_BOUND_SEC = scaled(10.0)
"""A generous bound on how long a hanging Slurm may hold a call: it bounds a hang, it is
not a speed target (scaled by conftest's one factor)."""

NO_CONTROLLER = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
INVALID_JOB = "slurm_load_jobs error: Invalid job id specified"


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return anyio.run(fn)


@dataclass
class FakeSlurm:
    """A folder of fake Slurm client programs and what they recorded."""

    bin: Path
    state: Path
    round_env: dict[str, str]
    job: RoundJob

    def program(self, name: str, body: str) -> Path:
        """``bin/<name>``: a /bin/sh script that first logs its arguments (one call a
        line in ``state/<name>.calls``)."""
        path = self.bin / name
        path.write_text(
            f'#!/bin/sh\nprintf "%s\\n" "$*" >> {self.state}/{name}.calls\n' + body.rstrip() + "\n"
        )
        path.chmod(0o755)
        return path

    def calls(self, name: str) -> list[str]:
        path = self.state / f"{name}.calls"
        lines = path.read_text().splitlines() if path.exists() else []
        if name == "scancel":
            # every cancel names the round's job as well as its id (see SlurmBackend.cancel)
            assert all(line.split()[0].startswith("--name=trainee-") for line in lines), lines
            return [line.split()[-1] for line in lines]
        return lines

    def client_env(self, **extra: str) -> dict[str, str]:
        return {"PATH": str(self.bin), "SLURM_CONF": "/etc/fake-slurm/slurm.conf", **extra}

    def backend(self, **options: float) -> SlurmBackend:
        opts = {"poll_interval_sec": 0.01, "command_timeout_sec": 5.0, **options}
        return SlurmBackend(SlurmOptions(**opts), self.client_env())  # type: ignore[arg-type]

    def squeue_states(self, *states: str) -> None:
        """An squeue answering ``states`` in turn (the last one from then on); when it
        first answers COMPLETED it writes the exit status the job script would."""
        lines = "\n".join(states)
        (self.state / "squeue.script").write_text(lines + "\n")
        self.program(
            "squeue",
            f"""
n=$(/bin/cat {self.state}/squeue.n 2>/dev/null || echo 0)
n=$((n + 1))
echo $n > {self.state}/squeue.n
total=$(/usr/bin/wc -l < {self.state}/squeue.script)
[ $n -gt $total ] && n=$total
line=$(/usr/bin/sed -n "${{n}}p" {self.state}/squeue.script)
echo "$line"
""",
        )


@pytest.fixture
def fake(tmp_path: Path) -> FakeSlurm:
    bin_dir = tmp_path / "bin"
    state = tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    root = tmp_path / "proj"
    root.mkdir()
    rnd = ProjectLayout.for_root(root, env={}).session(1).round(2)
    round_env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(root / ".trainee" / "cache" / "home"),
        "TRAINEE_ROUND_INDEX": "2",
        "OPENAI_API_KEY": "sk-fake-secret-0123456789",
    }
    job = RoundJob(
        argv=("/bin/sh", "-c", 'echo "training in $PWD"; exit 3'),
        env=round_env,
        cwd=str(root),
        rnd=rnd,
        name="trainee-proj-s0001-r0002",
        timeout_sec=3600.0,
        grace_sec=5.0,
    )
    return FakeSlurm(bin_dir, state, round_env, job)


def scontrol_text(job_id: str, state: str, exit_code: str) -> str:
    return (
        f"JobId={job_id} JobName=trainee-proj-s0001-r0002\n"
        "   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A\n"
        f"   JobState={state} Reason=None Dependency=(null)\n"
        f"   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode={exit_code}\n"
        "   Partition=debug AllocNode:Sid=login1:4242\n"
    )


def elapsed(start: float) -> float:
    return time.monotonic() - start


# -- submitting ------------------------------------------------------------------------------


def test_a_hanging_sbatch_is_a_launch_error_naming_it_and_the_timeout(fake: FakeSlurm) -> None:
    fake.program("sbatch", f"echo $$ > {fake.state}/sbatch.pid\nexec /bin/sleep 60")
    backend = fake.backend(command_timeout_sec=0.5)

    start = time.monotonic()
    with pytest.raises(LaunchError) as info:
        run(lambda: backend.submit(fake.job))
    took = elapsed(start)

    assert took < HANG_BOUND_SEC, took
    message = info.value.message
    assert message.startswith("sbatch --parsable "), message
    assert "did not answer within 0.5 s" in message
    assert info.value.data == {"command": "sbatch", "reason": "timeout"}
    # the hung client was ended, not left behind
    pid = int((fake.state / "sbatch.pid").read_text())
    deadline = time.monotonic() + HANG_BOUND_SEC
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    assert remembered_job(fake.job.rnd) is None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_sbatch_missing_from_path_names_it_and_the_package(fake: FakeSlurm) -> None:
    fake.program("squeue", "exit 0")  # other clients exist; sbatch does not
    with pytest.raises(LaunchError) as info:
        run(lambda: fake.backend().submit(fake.job))
    message = info.value.message
    assert "needs sbatch, which is not on PATH" in message
    assert "slurm-client" in message
    assert info.value.data == {"field": "advanced.backend", "command": "sbatch"}


def test_sbatch_refusing_the_job_carries_slurms_message(fake: FakeSlurm) -> None:
    fake.program(
        "sbatch",
        'echo "sbatch: error: invalid partition specified: nope" >&2\n'
        'echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2\n'
        "exit 1",
    )
    with pytest.raises(LaunchError) as info:
        run(lambda: fake.backend().submit(fake.job))
    message = info.value.message
    assert "sbatch: error: invalid partition specified: nope" in message
    assert "(exit 1)" in message
    assert message.startswith("sbatch --parsable ")
    assert remembered_job(fake.job.rnd) is None


@pytest.mark.parametrize(
    "answer",
    ["Submitted batch job 123", "", "garbage;cluster", "12a3", "-5"],
    ids=["non-parsable-form", "empty", "garbage", "not-digits", "negative"],
)
def test_sbatch_answering_garbage_is_not_a_job_id(fake: FakeSlurm, answer: str) -> None:
    fake.program("sbatch", f"printf '%s\\n' '{answer}'")
    with pytest.raises(LaunchError, match="not a job id") as info:
        run(lambda: fake.backend().submit(fake.job))
    assert repr(answer.strip()) in info.value.message
    assert remembered_job(fake.job.rnd) is None


def test_a_submission_writes_a_private_script_and_remembers_the_job(fake: FakeSlurm) -> None:
    fake.program(
        "sbatch",
        f"/usr/bin/env -0 > {fake.state}/sbatch.env\necho '4242;cluster1'",
    )
    job = msgspec.structs.replace(
        fake.job, env={**fake.round_env, "SLURM_JOB_ID": "999", "SBATCH_PARTITION": "other"}
    )
    backend = SlurmBackend(
        SlurmOptions(partition="debug"), fake.client_env(CLIENT_ONLY="daemon-side")
    )

    ref = run(lambda: backend.submit(job))

    assert ref == JobRef(backend="slurm", job_id="4242", token=job.token)
    assert remembered_job(job.rnd) == ref
    # in the control folder, out of the round's workspace (which the job can write)
    script = job.rnd.control / "job.sbatch"
    assert fake.calls("sbatch") == [f"--parsable {script}"]
    assert stat.S_IMODE(script.stat().st_mode) == 0o600
    text = script.read_text()
    assert "#SBATCH --partition=debug" in text
    assert "sk-fake-secret" not in text  # the environment is not written into the script
    # sbatch ran with the round's environment (which --export=ALL hands to the job), the
    # cluster's SLURM_CONF, and none of the caller's Slurm job variables
    seen = _env0((fake.state / "sbatch.env").read_bytes())
    assert {k: seen[k] for k in fake.round_env} == fake.round_env
    assert seen["SLURM_CONF"] == "/etc/fake-slurm/slurm.conf"
    assert "SLURM_JOB_ID" not in seen and "SBATCH_PARTITION" not in seen
    assert "CLIENT_ONLY" not in seen
    assert set(seen) - set(fake.round_env) <= {"SLURM_CONF", "PWD", "SHLVL", "_", "OLDPWD"}


def _env0(raw: bytes) -> dict[str, str]:
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if item)


def test_a_fake_cluster_runs_the_script_and_the_result_comes_back(fake: FakeSlurm) -> None:
    """sbatch runs job.sbatch at once (output to the round log, as ``-o`` would);
    squeue and scontrol then report it: the script's own exit status is the result."""
    log = fake.job.rnd.log
    fake.program(
        "sbatch",
        f"""
script="$2"
/bin/sh "$script" >> '{log}' 2>&1
echo 77
""",
    )
    fake.squeue_states("COMPLETED|None")
    fake.program(
        "scontrol",
        f"printf '%s' '{scontrol_text('77', 'FAILED', '3:0')}'",
    )

    async def main() -> tuple[JobRef, ExitInfo]:
        backend = fake.backend()
        ref = await backend.submit(fake.job)
        return ref, await backend.wait(ref, fake.job)

    ref, info = run(main)

    assert ref.job_id == "77"
    assert info.returncode == 3
    assert not (info.lost or info.timed_out or info.stopped)
    assert exit_code_file(fake.job.rnd).read_text() == "3\n"
    assert log.read_text() == f"training in {os.path.realpath(fake.job.cwd)}\n"
    assert fake.calls("squeue") == ["-h -t all -j 77 -o %T|%r"]
    assert fake.calls("scontrol") == ["show job 77"]


# -- watching --------------------------------------------------------------------------------


def test_a_controller_that_stops_answering_ends_the_wait_with_an_error(fake: FakeSlurm) -> None:
    fake.program("squeue", f'echo "{NO_CONTROLLER}" >&2\nexit 1')
    fake.program("scancel", "exit 0")
    ref = JobRef(backend="slurm", job_id="77")

    start = time.monotonic()
    info = run(lambda: fake.backend(poll_interval_sec=0.01).wait(ref, fake.job))
    took = elapsed(start)

    assert took < HANG_BOUND_SEC, took
    assert info.error is not None
    assert "Slurm stopped answering about job 77" in info.error
    assert NO_CONTROLLER in info.error
    assert info.returncode is None and not info.lost
    assert len(fake.calls("squeue")) == MAX_POLL_FAILURES
    assert fake.calls("scancel") == ["77"]
    assert cancel_reason(fake.job.rnd) == "lost"  # not a user stop: the engine stopped answering


def test_hanging_squeue_and_scancel_still_end_the_wait(fake: FakeSlurm) -> None:
    fake.program("squeue", "exec /bin/sleep 60")
    fake.program("scancel", "exec /bin/sleep 60")
    ref = JobRef(backend="slurm", job_id="78")

    start = time.monotonic()
    info = run(lambda: fake.backend(command_timeout_sec=0.3).wait(ref, fake.job))
    took = elapsed(start)

    # five squeue timeouts, the pauses between them and one scancel timeout
    assert took < HANG_BOUND_SEC * 2, took
    assert info.error is not None
    assert "Slurm stopped answering about job 78" in info.error
    assert "did not answer within 0.3 s" in info.error
    assert fake.calls("scancel") == ["78"]


def test_a_few_failed_polls_in_a_row_are_tolerated(fake: FakeSlurm) -> None:
    failures = MAX_POLL_FAILURES - 1
    fake.program(
        "squeue",
        f"""
n=$(/bin/cat {fake.state}/n 2>/dev/null || echo 0)
n=$((n + 1))
echo $n > {fake.state}/n
if [ $n -le {failures} ]; then echo "{NO_CONTROLLER}" >&2; exit 1; fi
echo "COMPLETED|None"
""",
    )
    fake.program("scontrol", f"printf '%s' '{scontrol_text('79', 'COMPLETED', '0:0')}'")
    fake.program("scancel", "exit 0")
    exit_code_file(fake.job.rnd).parent.mkdir(parents=True)
    exit_code_file(fake.job.rnd).write_text("0\n")

    info = run(lambda: fake.backend().wait(JobRef(backend="slurm", job_id="79"), fake.job))

    assert (info.returncode, info.error, info.lost) == (0, None, False)
    assert len(fake.calls("squeue")) == failures + 1
    assert fake.calls("scancel") == []


def test_completed_with_exit_file_zero_is_returncode_zero(fake: FakeSlurm) -> None:
    fake.squeue_states("COMPLETED|None")
    fake.program("scontrol", f"printf '%s' '{scontrol_text('80', 'COMPLETED', '0:0')}'")
    exit_code_file(fake.job.rnd).parent.mkdir(parents=True)
    exit_code_file(fake.job.rnd).write_text("0\n")

    info = run(lambda: fake.backend().wait(JobRef(backend="slurm", job_id="80"), fake.job))

    assert info.returncode == 0
    assert info.signal is None
    assert info.error is None
    assert not (info.lost or info.timed_out or info.stopped)


@pytest.mark.parametrize(
    ("squeue_out", "squeue_err", "squeue_rc"),
    [("", "", 0), ("", INVALID_JOB, 1)],
    ids=["squeue-says-nothing", "squeue-invalid-job-id"],
)
def test_a_job_slurm_forgot_without_an_exit_file_is_lost(
    fake: FakeSlurm, squeue_out: str, squeue_err: str, squeue_rc: int
) -> None:
    fake.program("squeue", f"printf '%s' '{squeue_out}'\necho '{squeue_err}' >&2\nexit {squeue_rc}")
    fake.program("scontrol", f'echo "{INVALID_JOB}" >&2\nexit 1')
    # no sacct on the PATH: accounting is optional

    info = run(lambda: fake.backend().wait(JobRef(backend="slurm", job_id="81"), fake.job))

    assert info.lost is True
    assert info.returncode is None
    assert info.error is not None and "no longer knows job 81" in info.error
    assert fake.calls("scontrol") == ["show job 81"]


def test_a_job_slurm_forgot_with_an_exit_file_has_its_result(fake: FakeSlurm) -> None:
    fake.program("squeue", f'echo "{INVALID_JOB}" >&2\nexit 1')
    fake.program("scontrol", f'echo "{INVALID_JOB}" >&2\nexit 1')
    exit_code_file(fake.job.rnd).parent.mkdir(parents=True)
    exit_code_file(fake.job.rnd).write_text("3\n")

    info = run(lambda: fake.backend().wait(JobRef(backend="slurm", job_id="82"), fake.job))

    assert (info.returncode, info.lost, info.error) == (3, False, None)


def test_accounting_answers_when_the_controller_forgot(fake: FakeSlurm) -> None:
    fake.program("squeue", f'echo "{INVALID_JOB}" >&2\nexit 1')
    fake.program("scontrol", f'echo "{INVALID_JOB}" >&2\nexit 1')
    fake.program("sacct", "echo 'FAILED|2:0'")

    info = run(lambda: fake.backend().wait(JobRef(backend="slurm", job_id="83"), fake.job))

    assert (info.returncode, info.lost) == (2, False)
    assert fake.calls("sacct") == ["-n -X -P -j 83 -o State,ExitCode"]


def test_the_state_changes_are_reported_in_order(fake: FakeSlurm) -> None:
    fake.squeue_states(
        "PENDING|Resources", "PENDING|Resources", "RUNNING|None", "RUNNING|None", "COMPLETED|None"
    )
    fake.program("scontrol", f"printf '%s' '{scontrol_text('84', 'COMPLETED', '0:0')}'")
    exit_code_file(fake.job.rnd).parent.mkdir(parents=True)
    exit_code_file(fake.job.rnd).write_text("0\n")
    seen: list[tuple[JobState, str]] = []

    async def on_state(state: JobState, detail: str) -> None:
        seen.append((state, detail))

    info = run(
        lambda: fake.backend().wait(
            JobRef(backend="slurm", job_id="84"), fake.job, on_state=on_state
        )
    )

    assert info.returncode == 0
    assert seen == [
        (JobState.QUEUED, "slurm job 84 pending: Resources"),
        (JobState.RUNNING, "slurm job 84 running"),
        (JobState.EXITED, "slurm job 84 completed"),
    ]


def test_running_over_the_timeout_cancels_the_job_as_timed_out(fake: FakeSlurm) -> None:
    """The timeout counts running time: the job is cancelled (scancel) once it ran longer
    than ``timeout_sec``; Slurm then reports it CANCELLED."""
    fake.program(
        "squeue",
        f"""
if [ -e {fake.state}/cancelled ]; then echo "CANCELLED|None"; else echo "RUNNING|None"; fi
""",
    )
    fake.program("scancel", f": > {fake.state}/cancelled")
    fake.program("scontrol", f"printf '%s' '{scontrol_text('85', 'CANCELLED', '0:15')}'")
    job = msgspec.structs.replace(fake.job, timeout_sec=0.2, grace_sec=0.0)

    info = run(lambda: fake.backend().wait(JobRef(backend="slurm", job_id="85"), job))

    assert info.timed_out is True
    assert info.stopped is False
    assert info.signal == "signal 15"
    assert info.duration_sec >= 0.2
    assert fake.calls("scancel") == ["85"]
    assert cancel_reason(job.rnd) == "timed_out"


def test_a_timed_out_job_that_takes_its_grace_to_die_still_ends_timed_out(
    fake: FakeSlurm,
) -> None:
    """After scancel a real Slurm 22.05 shows the job COMPLETING for its KillWait (the job
    may be saving a checkpoint), and a repeated scancel then exits 0 without a new signal."""
    fake.program(
        "squeue",
        f"""
if [ ! -e {fake.state}/cancelled ]; then echo "RUNNING|None"; exit 0; fi
n=$(/bin/cat {fake.state}/after 2>/dev/null || echo 0)
n=$((n + 1))
echo $n > {fake.state}/after
if [ $n -le 3 ]; then echo "COMPLETING|None"; else echo "CANCELLED|None"; fi
""",
    )
    fake.program("scancel", f": > {fake.state}/cancelled")
    fake.program("scontrol", f"printf '%s' '{scontrol_text('88', 'CANCELLED', '0:15')}'")
    job = msgspec.structs.replace(fake.job, timeout_sec=0.1, grace_sec=0.0)
    seen: list[JobState] = []

    async def on_state(state: JobState, detail: str) -> None:
        seen.append(state)

    info = run(
        lambda: fake.backend().wait(JobRef(backend="slurm", job_id="88"), job, on_state=on_state)
    )

    assert (info.timed_out, info.stopped, info.error) == (True, False, None)
    assert seen == [JobState.RUNNING, JobState.CANCELLED]
    assert fake.calls("scancel")[0] == "88"
    assert cancel_reason(job.rnd) == "timed_out"


def test_time_in_the_queue_does_not_count_against_the_timeout(fake: FakeSlurm) -> None:
    fake.squeue_states(*(["PENDING|Priority"] * 40), "COMPLETED|None")
    fake.program("scontrol", f"printf '%s' '{scontrol_text('86', 'COMPLETED', '0:0')}'")
    fake.program("scancel", "exit 0")
    exit_code_file(fake.job.rnd).parent.mkdir(parents=True)
    exit_code_file(fake.job.rnd).write_text("0\n")
    job = msgspec.structs.replace(fake.job, timeout_sec=0.05, grace_sec=0.0)

    info = run(
        lambda: fake.backend(poll_interval_sec=0.01).wait(JobRef(backend="slurm", job_id="86"), job)
    )

    assert (info.returncode, info.timed_out) == (0, False)
    assert fake.calls("scancel") == []


def test_a_job_cancelled_in_the_queue_by_someone_else_is_not_a_clean_exit(
    fake: FakeSlurm,
) -> None:
    # what a real Slurm 22.05 reports for a pending job cancelled with scancel
    fake.squeue_states("PENDING|Priority", "CANCELLED|Priority")
    fake.program("scontrol", f"printf '%s' '{scontrol_text('87', 'CANCELLED', '0:0')}'")

    info = run(lambda: fake.backend().wait(JobRef(backend="slurm", job_id="87"), fake.job))

    assert not exit_code_file(fake.job.rnd).exists()
    assert cancel_reason(fake.job.rnd) is None
    clean = (
        info.returncode == 0
        and info.signal is None
        and not (info.stopped or info.timed_out or info.lost)
    )
    assert not clean, info


# -- cancel, adopt, lost ---------------------------------------------------------------------


def test_cancel_records_the_first_reason_and_runs_scancel(fake: FakeSlurm) -> None:
    fake.program("scancel", "exit 0")
    ref = JobRef(backend="slurm", job_id="90")

    async def main() -> None:
        backend = fake.backend()
        await backend.cancel(ref, fake.job, reason="timed_out")
        await backend.cancel(ref, fake.job)  # a later stop keeps the first reason

    run(main)
    assert fake.calls("scancel") == ["90", "90"]
    assert cancel_reason(fake.job.rnd) == "timed_out"


def test_a_failing_scancel_is_a_launch_error(fake: FakeSlurm) -> None:
    fake.program("scancel", f'echo "scancel: error: {NO_CONTROLLER}" >&2\nexit 1')
    with pytest.raises(LaunchError, match="scancel --name=trainee-proj-s0001-r0002 91 failed"):
        run(lambda: fake.backend().cancel(JobRef(backend="slurm", job_id="91"), fake.job))


@pytest.mark.parametrize(
    ("squeue", "exit_file", "adoptable"),
    [
        ("RUNNING|None", None, True),
        ("PENDING|Resources", None, True),
        (None, "0\n", True),
        (None, None, False),
    ],
    ids=["running", "queued", "forgotten-with-result", "forgotten"],
)
def test_adoptable(
    fake: FakeSlurm, squeue: str | None, exit_file: str | None, adoptable: bool
) -> None:
    if squeue is None:
        fake.program("squeue", f'echo "{INVALID_JOB}" >&2\nexit 1')
    else:
        fake.program("squeue", f"echo '{squeue}'")
    fake.program("scontrol", f'echo "{INVALID_JOB}" >&2\nexit 1')
    if exit_file is not None:
        exit_code_file(fake.job.rnd).parent.mkdir(parents=True)
        exit_code_file(fake.job.rnd).write_text(exit_file)
    ref = JobRef(backend="slurm", job_id="92")
    assert run(lambda: fake.backend().adoptable(ref, fake.job)) is adoptable


@pytest.mark.parametrize(
    ("squeue", "killed"),
    [("RUNNING|None", ["slurm job 93"]), ("PENDING|Priority", ["slurm job 93"]), ("", [])],
)
def test_end_lost_cancels_only_a_live_job(fake: FakeSlurm, squeue: str, killed: list[str]) -> None:
    fake.program("squeue", f"echo '{squeue}'")
    fake.program("scontrol", f'echo "{INVALID_JOB}" >&2\nexit 1')
    fake.program("scancel", "exit 0")
    ref = JobRef(backend="slurm", job_id="93")
    assert run(lambda: fake.backend().end_lost(ref, fake.job)) == killed
    assert fake.calls("scancel") == (["93"] if killed else [])


def test_a_timeout_cancel_that_failed_is_sent_again(fake: FakeSlurm) -> None:
    """scancel fails the first time (the controller was busy): the job must not run on
    without limit; the cancel is sent again after the grace, and then it takes."""
    fake.program(
        "squeue",
        f"""
if [ -e {fake.state}/cancelled ]; then echo "CANCELLED|None"; else echo "RUNNING|None"; fi
""",
    )
    fake.program(
        "scancel",
        f"""
if [ -e {fake.state}/tried ]; then : > {fake.state}/cancelled; exit 0; fi
: > {fake.state}/tried
echo "scancel: error: Socket timed out on send/recv operation" >&2
exit 1
""",
    )
    fake.program("scontrol", f"printf '%s' '{scontrol_text('86', 'CANCELLED', '0:15')}'")
    job = msgspec.structs.replace(fake.job, timeout_sec=0.2, grace_sec=0.0)
    started = time.monotonic()

    info = run(lambda: fake.backend().wait(JobRef(backend="slurm", job_id="86"), job))

    assert info.timed_out is True
    assert fake.calls("scancel") == ["86", "86"]
    assert time.monotonic() - started < HANG_BOUND_SEC  # resent after the grace, not never
