"""The Ray harness, and the Ray Jobs API behaviour a launcher backend relies on.

Each test pins one fact about Ray 2.x's Jobs API (``ray.job_submission``) as seen
against a real head started by ``RayCluster`` on loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.ray_fixtures import ray_cluster  # noqa: F401
from tests.cluster.ray_harness import VENV_BIN, RayCluster, available

pytestmark = pytest.mark.cluster

TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def new_id(name: str) -> str:
    return f"t-{name}-{uuid.uuid4().hex[:8]}"


def wait_status(client: Any, sid: str, until: set[str], timeout: float = 60) -> list[str]:
    """Poll ``get_job_status`` until one of ``until``; returns the distinct statuses seen."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        status = client.get_job_status(sid)
        if not seen or seen[-1] != status:
            seen.append(status)
        if status in until:
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"job {sid} still {status} after {timeout}s (seen {seen})")
        time.sleep(0.05)


@pytest.fixture
def client(ray_cluster: RayCluster) -> Any:  # noqa: F811
    return ray_cluster.client()


def test_failed_job_reports_exit_code_message_and_logs(client: Any) -> None:
    sid = new_id("fail")
    entrypoint = "python -c 'print(1); import sys; sys.exit(3)'"
    got = client.submit_job(
        entrypoint=entrypoint,
        submission_id=sid,
        runtime_env={"env_vars": {"TRAY_PROBE": "x"}},
        entrypoint_num_cpus=1,
    )
    assert got == sid

    seen = wait_status(client, sid, TERMINAL)
    assert seen[-1] == "FAILED"
    assert set(seen) <= {"PENDING", "RUNNING", "FAILED"}

    info = client.get_job_info(sid)
    assert info.status == "FAILED"
    assert info.status.is_terminal()
    assert info.driver_exit_code == 3
    assert info.message.startswith("Job entrypoint command failed with exit code 3")
    assert info.error_type == "JOB_ENTRYPOINT_COMMAND_ERROR"
    assert info.submission_id == sid
    assert info.job_id is None  # only set when the driver calls ray.init()
    assert info.entrypoint == entrypoint
    assert info.runtime_env == {"env_vars": {"TRAY_PROBE": "x"}}
    assert info.start_time is not None and info.end_time is not None
    assert info.end_time >= info.start_time > 1e12  # milliseconds since the epoch

    logs = client.get_job_logs(sid)
    assert "1" in logs.splitlines()
    # Ray writes lines of its own into the same log, around the entrypoint's output.
    assert f"Running entrypoint for job {sid}: {entrypoint}" in logs
    assert "Runtime env is setting up." in logs
    # The failure message carries the log tail too.
    assert "\n1\n" in info.message


def test_succeeded_job_duplicate_id_and_unknown_id(client: Any) -> None:
    sid = new_id("ok")
    client.submit_job(entrypoint="echo hi", submission_id=sid)
    assert wait_status(client, sid, TERMINAL)[-1] == "SUCCEEDED"
    info = client.get_job_info(sid)
    assert info.driver_exit_code == 0
    assert info.message == "Job finished successfully."
    assert info.error_type is None
    assert "hi" in client.get_job_logs(sid).splitlines()

    # A submission id is never reused, even after the job ended.
    with pytest.raises(RuntimeError, match=f"Job with submission_id {sid} already exists"):
        client.submit_job(entrypoint="true", submission_id=sid)

    unknown = new_id("unknown")
    for call in (client.get_job_info, client.get_job_status, client.get_job_logs):
        with pytest.raises(RuntimeError, match=f"status code 404: Job {unknown} does not exist"):
            call(unknown)
    with pytest.raises(RuntimeError, match="status code 404"):
        client.stop_job(unknown)

    assert client.stop_job(sid) is False  # already terminal
    assert sid in {job.submission_id for job in client.list_jobs()}


def test_stop_job_sleep(client: Any, ray_cluster: RayCluster) -> None:  # noqa: F811
    sid = new_id("stop")
    client.submit_job(entrypoint="sleep 100", submission_id=sid)
    wait_status(client, sid, {"RUNNING"} | TERMINAL)
    start = time.monotonic()
    assert client.stop_job(sid) is True
    assert wait_status(client, sid, TERMINAL, timeout=30)[-1] == "STOPPED"
    assert time.monotonic() - start < 10
    info = client.get_job_info(sid)
    assert info.driver_exit_code is None
    assert info.message == "Job was intentionally stopped."
    assert info.error_type is None
    assert client.stop_job(sid) is False
    assert not [c for c in ray_cluster.processes().values() if "sleep 100" in c]


SIGNAL_PROBE = """
import signal, sys, time
out = sys.argv[1]
def note(text):
    with open(out, "a") as f:
        f.write(f"{time.time():.3f} {text}\\n")
signal.signal(signal.SIGTERM, lambda s, f: note("SIGTERM"))  # and keep running
signal.signal(signal.SIGINT, lambda s, f: note("SIGINT"))
note("ready")
while True:
    time.sleep(0.05)
"""


def test_stop_job_sends_sigterm_then_sigkill_after_grace(
    client: Any,
    ray_cluster: RayCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(SIGNAL_PROBE)
    out = tmp_path / "signals.txt"
    sid = new_id("grace")
    client.submit_job(
        entrypoint=f"exec python {probe} {out}",
        submission_id=sid,
        # Read by the job's supervisor: seconds between the stop signal and SIGKILL.
        runtime_env={"env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": "1"}},
    )
    deadline = time.monotonic() + 60
    while not (out.exists() and "ready" in out.read_text()):
        assert time.monotonic() < deadline, client.get_job_logs(sid)
        time.sleep(0.05)
    start = time.monotonic()
    assert client.stop_job(sid) is True
    assert wait_status(client, sid, TERMINAL, timeout=30)[-1] == "STOPPED"
    elapsed = time.monotonic() - start
    assert 0.9 < elapsed < 8, elapsed  # the probe ignores SIGTERM: killed after ~1 s
    lines = [line.split()[1] for line in out.read_text().splitlines()]
    assert lines == ["ready", "SIGTERM"]
    assert not [c for c in ray_cluster.processes().values() if str(probe) in c]


ENV_PROBE = """
import json, os, sys
parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read().split(b"\\0")[0].decode()
print("PROBE " + json.dumps({"cwd": os.getcwd(), "exe": sys.executable, "parent": parent,
                             "env": dict(os.environ)}))
"""


def _probe(logs: str) -> dict[str, Any]:
    line = next(line for line in logs.splitlines() if line.startswith("PROBE "))
    return json.loads(line[len("PROBE ") :])


def test_entrypoint_shell_cwd_and_environment(
    client: Any,
    ray_cluster: RayCluster,  # noqa: F811
    tmp_path: Path,
) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(ENV_PROBE)
    sid = new_id("env")
    client.submit_job(
        # /bin/sh -c: `$0` is the shell, `cd ... && exec ...` works.
        entrypoint=f"echo shell=$0; pwd; cd {tmp_path} && exec python {probe}",
        submission_id=sid,
        runtime_env={"env_vars": {"TRAY_PROBE": "x y"}},
    )
    assert wait_status(client, sid, TERMINAL)[-1] == "SUCCEEDED"
    logs = client.get_job_logs(sid)
    lines = logs.splitlines()
    assert "shell=/bin/sh" in lines
    # Before the `cd`: the raylet's cwd, i.e. where `ray start` ran (the base dir here).
    assert str(ray_cluster.base_dir) in lines
    got = _probe(logs)
    assert got["cwd"] == str(tmp_path)
    # `exec` replaced the shell (the title is `ray::JobSupervisor` or `...JobSupervisor.run`)
    assert str(got["parent"]).startswith("ray::JobSupervisor"), got
    assert got["exe"] == str(VENV_BIN / "python")  # PATH is the head's: venv first
    env = got["env"]
    # env_vars extend the head's environment; Ray adds a few of its own.
    assert env["TRAY_PROBE"] == "x y"
    assert env["PATH"] == ray_cluster.env["PATH"]
    assert env["HOME"] == os.environ["HOME"]
    assert env["RAY_ADDRESS"] == ray_cluster.gcs_address
    assert env["PYTHONUNBUFFERED"] == "1"
    assert "RAY_JOB_CONFIG_JSON_ENV_VAR" in env

    # A variable in env_vars replaces the head's value; ${VAR} expands the head's.
    sid = new_id("path")
    client.submit_job(
        entrypoint='echo "P=$PATH"; echo "H=$TRAY_HOME"',
        submission_id=sid,
        runtime_env={"env_vars": {"PATH": "/x/bin:${PATH}", "TRAY_HOME": "${HOME}/y"}},
    )
    assert wait_status(client, sid, TERMINAL)[-1] == "SUCCEEDED"
    lines = client.get_job_logs(sid).splitlines()
    assert f"P=/x/bin:{ray_cluster.env['PATH']}" in lines
    assert f"H={os.environ['HOME']}/y" in lines


TALKER = """
import time
for i in range(12):
    print(f"line {i}", flush=True)
    if i == 8:
        print("partial-", end="", flush=True)
        time.sleep(1.5)
        print("rest", flush=True)
    time.sleep(0.2)
print("bye", flush=True)
"""


def test_tail_job_logs_from_a_thread(client: Any, tmp_path: Path) -> None:
    talker = tmp_path / "talker.py"
    talker.write_text(TALKER)
    sid = new_id("tail")
    client.submit_job(entrypoint=f"python {talker}", submission_id=sid)
    wait_status(client, sid, {"RUNNING"} | TERMINAL)
    time.sleep(1)  # start late: tailing still begins at the top of the log

    result: dict[str, Any] = {}

    async def follow() -> None:
        chunks = []
        async for chunk in client.tail_job_logs(sid):
            chunks.append(chunk)
        result["chunks"] = chunks
        result["status"] = client.get_job_status(sid)

    def run() -> None:
        try:
            asyncio.run(follow())  # a loop of its own, not the main thread's
        except BaseException as exc:
            result["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not thread.is_alive()
    assert "error" not in result, result["error"]
    # The generator ends by itself once the job is over.
    assert result["status"] == "SUCCEEDED"
    chunks = result["chunks"]
    assert "Runtime env is setting up." in chunks[0]
    assert "".join(chunks) == client.get_job_logs(sid)
    # Chunks are batches of whole lines (up to 10), except a line still being written.
    assert all(len(c.splitlines()) <= 10 for c in chunks)
    assert len(chunks) >= 2


def test_job_outlives_the_client_process(ray_cluster: RayCluster) -> None:  # noqa: F811
    sid = new_id("orphan")
    code = (
        "import os, signal\n"
        "from ray.job_submission import JobSubmissionClient\n"
        # No address: RAY_API_SERVER_ADDRESS from cluster.env.
        "JobSubmissionClient(verify=False).submit_job("
        f"entrypoint='sleep 2; echo survived', submission_id={sid!r})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=ray_cluster.env, timeout=60)
    assert proc.returncode == -9
    client = ray_cluster.client()
    assert client.get_job_status(sid) in {"PENDING", "RUNNING"}
    assert wait_status(client, sid, TERMINAL)[-1] == "SUCCEEDED"
    assert "survived" in client.get_job_logs(sid).splitlines()


def test_listens_on_loopback_only(client: Any, ray_cluster: RayCluster) -> None:  # noqa: F811
    sid = new_id("net")
    client.submit_job(entrypoint="sleep 3", submission_id=sid)
    wait_status(client, sid, {"RUNNING"} | TERMINAL)  # workers and a job are up too
    sockets = ray_cluster.listening_sockets()
    ports = {port for _, _, _, port in sockets}
    assert ray_cluster.dashboard_port in ports
    assert int(ray_cluster.gcs_address.rsplit(":", 1)[1]) in ports
    procs = ray_cluster.processes()
    wild = [(addr, port, procs.get(pid, "?")[:60]) for pid, _, addr, port in sockets]
    assert all(addr == "127.0.0.1" for addr, _, _ in wild), wild
    client.stop_job(sid)


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


@pytest.mark.timeout(300)
def test_stop_leaves_no_process_behind() -> None:
    """A second cluster beside the session's: own ports; stop() kills job leftovers too."""
    if not available():
        pytest.skip("ray[default] is not installed in this venv")
    base = Path(tempfile.mkdtemp(prefix="tray-", dir="/tmp"))
    cluster = RayCluster(base)
    try:
        cluster.start()
        client = cluster.client()
        sid = new_id("leftover")
        # A double-forked child escapes Ray's own stop_job; stop() must still get it.
        client.submit_job(entrypoint="(sleep 301 &); exec sleep 302", submission_id=sid)
        wait_status(client, sid, {"RUNNING"} | TERMINAL)
        deadline = time.monotonic() + 30
        while not any("sleep 301" in c for c in cluster.processes().values()):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        pids = set(cluster.processes())
        assert len(pids) > 5
    finally:
        cluster.stop()
    assert cluster.processes() == {}
    assert [pid for pid in pids if _alive(pid)] == []
    shutil.rmtree(base, ignore_errors=True)
