"""Smoke tests of the real single-node Slurm cluster the harness brings up."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import short_tmp_dir
from tests.cluster.slurm_harness import SlurmCluster, unavailable_reason
from tests.support.timing import wait_for

pytestmark = pytest.mark.cluster


def _running(pid: int, name: str) -> bool:
    """``pid`` is alive (not a zombie) and its argv[0] is ``name``."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return argv0.decode() == name and stat[stat.rfind(")") + 2 :].split()[0] != "Z"


@pytest.fixture
def job_dir(slurm_cluster: SlurmCluster) -> Path:
    d = Path(slurm_cluster.base_dir) / "jobs" / os.urandom(4).hex()
    d.mkdir(parents=True)
    return d


@pytest.mark.timeout(300)  # the session fixture's start-up is charged to the first test
def test_cluster_is_up_and_listens_on_loopback_only(slurm_cluster: SlurmCluster) -> None:
    assert slurm_cluster.node_state() == "idle"
    assert set(slurm_cluster.pids) == {"munged", "slurmctld", "slurmd"}
    listeners = slurm_cluster.listeners()
    addrs = {addr for _, addr, _ in listeners}
    assert f"127.0.0.1:{slurm_cluster.ctld_port}" in addrs, listeners
    assert f"127.0.0.1:{slurm_cluster.slurmd_port}" in addrs, listeners
    for proto, addr, proc in listeners:
        host = addr.rsplit(":", 1)[0]
        assert host == "127.0.0.1", f"{proc} listens on {proto} {addr}"
    # munged has only its private Unix socket, and Slurm authenticates through it.
    assert not [entry for entry in listeners if "munged" in entry[2]]
    config = slurm_cluster.run("scontrol", "show", "config").stdout
    assert f"socket={slurm_cluster.munge_socket}" in config
    assert slurm_cluster.env["SLURM_CONF"] == str(slurm_cluster.conf_path)


def test_completed_job(slurm_cluster: SlurmCluster, job_dir: Path) -> None:
    out = job_dir / "ok.out"
    job_id = slurm_cluster.sbatch("-o", str(out), "--wrap", "echo fine")
    assert job_id.isdigit()
    assert slurm_cluster.wait_job(job_id) == "COMPLETED"
    shown = slurm_cluster.run("scontrol", "show", "job", job_id).stdout
    assert "JobState=COMPLETED" in shown
    assert "ExitCode=0:0" in shown
    assert out.read_text() == "fine\n"


def test_failed_job_exit_code_and_output(slurm_cluster: SlurmCluster, job_dir: Path) -> None:
    out = job_dir / "fail.out"
    # Plain clients, as a launcher would call them: only SLURM_CONF added.
    env = {**os.environ, **slurm_cluster.env}
    res = subprocess.run(
        ["sbatch", "--parsable", "-o", str(out), "--wrap", "echo hello; exit 3"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    job_id = res.stdout.strip()
    assert job_id.isdigit(), res
    deadline = time.monotonic() + 60
    state = ""
    while state not in ("COMPLETED", "FAILED"):
        assert time.monotonic() < deadline, f"job {job_id} still {state!r}"
        time.sleep(0.2)
        state = subprocess.run(
            ["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    assert state == "FAILED"
    shown = subprocess.run(
        ["scontrol", "show", "job", job_id], env=env, capture_output=True, text=True, timeout=30
    ).stdout
    assert "JobState=FAILED" in shown
    assert "ExitCode=3:0" in shown
    assert "hello" in out.read_text()
    assert slurm_cluster.show_job(job_id)["Reason"] == "NonZeroExitCode"


def test_scancel_kills_a_sleeping_job(slurm_cluster: SlurmCluster, job_dir: Path) -> None:
    pid_file = job_dir / "sleep.pid"
    job_id = slurm_cluster.sbatch(
        "-o", str(job_dir / "sleep.out"), "--wrap", f"sleep 100 & echo $! > {pid_file}; wait"
    )
    wait_for(
        lambda: pid_file.exists() and pid_file.read_text().strip() != "",
        "the job to start",
        interval=0.1,
    )
    sleep_pid = int(pid_file.read_text())
    assert _running(sleep_pid, "sleep")
    assert slurm_cluster.job_state(job_id) == "RUNNING"
    slurm_cluster.run("scancel", job_id)
    assert slurm_cluster.wait_job(job_id) == "CANCELLED"
    wait_for(
        lambda: not _running(sleep_pid, "sleep"),
        "the sleep process to go",
        timeout=15,
        interval=0.1,
    )
    assert "JobState=CANCELLED" in slurm_cluster.run("scontrol", "show", "job", job_id).stdout


SCRIPT_TRAPPING_TERM = """\
#!/bin/bash
D={d}
bash -c 'trap "echo TERM > $0/child.sig; exit 0" TERM; touch $0/child.ready
         while true; do sleep 0.1; done' "$D" &
trap 'echo TERM > $D/script.sig; exit 0' TERM
touch $D/script.ready
while true; do wait; done
"""


def test_scancel_sends_sigterm_to_script_and_children(
    slurm_cluster: SlurmCluster, job_dir: Path
) -> None:
    script = job_dir / "trap.sh"
    script.write_text(SCRIPT_TRAPPING_TERM.format(d=job_dir))
    job_id = slurm_cluster.sbatch("-o", str(job_dir / "trap.out"), str(script))
    wait_for(
        lambda: (job_dir / "script.ready").exists() and (job_dir / "child.ready").exists(),
        "the traps to be set",
        interval=0.1,
    )
    slurm_cluster.run("scancel", job_id)
    assert slurm_cluster.wait_job(job_id) == "CANCELLED"
    wait_for(
        lambda: (job_dir / "child.sig").exists(),
        "the child to get SIGTERM",
        timeout=10,
        interval=0.1,
    )
    assert (job_dir / "script.sig").read_text() == "TERM\n"
    assert (job_dir / "child.sig").read_text() == "TERM\n"


@pytest.mark.timeout(180)
@pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason()))
def test_stop_leaves_no_process_behind() -> None:
    """A second, private cluster: stop() must end the daemons and every job process,
    including one that ignores SIGTERM and escaped slurmstepd's process tree."""
    base = short_tmp_dir()
    try:
        with SlurmCluster(base) as cluster:
            assert cluster.startup_seconds is not None and cluster.startup_seconds < 60
            daemons = dict(cluster.pids)
            pid_file = base / "orphan.pid"
            # The batch script exits at once and leaves an orphan that ignores TERM.
            job_id = cluster.sbatch(
                "-o",
                str(base / "orphan.out"),
                "--wrap",
                f"(trap '' TERM; exec sleep 300) & echo $! > {pid_file}",
            )
            assert cluster.wait_job(job_id) == "COMPLETED"
            orphan = int(pid_file.read_text())
            running = cluster.sbatch("-o", "/dev/null", "--wrap", "sleep 300")
            wait_for(
                lambda: cluster.job_state(running) == "RUNNING",
                "the second job to run",
                interval=0.1,
            )
        for name, pid in daemons.items():
            assert not _running(pid, name), f"{name} ({pid}) still running"
        assert not _running(orphan, "sleep"), "a job process outlived the cluster"
        assert not cluster._job_processes()
    finally:
        shutil.rmtree(base, ignore_errors=True)
