"""Rounds on a real single-node Slurm and a real Ray head (both started by the tests on
loopback), end to end: the real CLI and daemon, each engine's own client, the round log
on the shared disk. Every case runs on both engines."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.project import (
    FAIL_LR,
    HOLD_LR,
    client_env,
    make_project,
    round_log,
    rpc,
    set_backend,
    start_session,
)
from tests.cluster.ray_fixtures import ray_cluster  # noqa: F401
from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import Daemon, copy_example, run_cli
from tests.support.loop import (
    OK,
    check_outputs,
    llm_env,
    plan,
    read_ledgers,
    wait_finished,
    wait_until,
)
from tests.support.processes import assert_no_training_left

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

RAY_FINAL = {"SUCCEEDED": "completed", "FAILED": "failed", "STOPPED": "cancelled"}
SLURM_FINAL = {"COMPLETED": "completed", "FAILED": "failed", "CANCELLED": "cancelled"}


@dataclass
class Engine:
    """One cluster engine as the tests see it."""

    name: str
    backend: dict[str, Any]
    env: dict[str, str]
    state: Callable[[str], str]
    """The job's state: completed, failed, cancelled, running, or the engine's own word."""
    jobs_of: Callable[[Path], int]
    """How many jobs the engine has for this round's job script."""

    def wait_final(self, job_id: str, timeout: float = 60.0) -> str:
        import time

        deadline = time.monotonic() + timeout
        state = self.state(job_id)
        while state not in ("completed", "failed", "cancelled") and time.monotonic() < deadline:
            time.sleep(0.2)
            state = self.state(job_id)
        return state


def _slurm(cluster: Any) -> Engine:
    def state(job_id: str) -> str:
        raw = cluster.job_state(job_id)
        return SLURM_FINAL.get(raw, raw.lower())

    def jobs_of(script: Path) -> int:
        listed = cluster.run("squeue", "-h", "-t", "all", "-o", "%o", check=False).stdout
        return listed.split().count(str(script / "job.sbatch"))

    backend = {"type": "slurm", "partition": "debug", "cpus": 1, "poll_interval_sec": 0.3}
    return Engine("slurm", backend, dict(cluster.env), state, jobs_of)


def _ray(cluster: Any) -> Engine:
    client = cluster.client()

    def state(job_id: str) -> str:
        raw = str(client.get_job_status(job_id).value)
        return RAY_FINAL.get(raw, raw.lower())

    def jobs_of(folder: Path) -> int:
        return sum(str(folder / "job.sh") in (j.entrypoint or "") for j in client.list_jobs())

    backend = {"type": "ray", "address": cluster.address, "cpus": 1, "poll_interval_sec": 0.3}
    return Engine("ray", backend, {}, state, jobs_of)


@pytest.fixture(params=["slurm", "ray"])
def engine(request: pytest.FixtureRequest) -> Engine:
    if request.param == "slurm":
        return _slurm(request.getfixturevalue("slurm_cluster"))
    return _ray(request.getfixturevalue("ray_cluster"))


def env_for(daemon: Daemon, engine: Engine, fake: FakeLLM | None = None) -> dict[str, str]:
    base = llm_env(daemon.env, fake) if fake is not None else daemon.env
    return client_env(base, engine.env)


def control_dir(project: Path, index: int) -> Path:
    """Where the round's job script is (the control folder, out of the job's reach)."""
    return project / ".trainee" / "control" / "session-0001" / f"round-{index:04d}"


def held_round_running(project: Path, index: int) -> Any:
    def check(state: dict[str, Any]) -> bool:
        current = state["current_round"]
        return (
            bool(current)
            and current["index"] == index
            and current["status"] == "running"
            and "step 3 " in round_log(project, index)
        )

    return check


def test_the_example_runs_by_changing_only_the_backend(
    module_daemon: Daemon, engine: Engine, tmp_path: Path
) -> None:
    """mlp-flags, guarded (bwrap on the node), random search: the same rounds, params and
    metrics as on the local backend, and ledgers of the same shape."""
    local = copy_example("mlp-flags", tmp_path / "local")
    remote = copy_example("mlp-flags", tmp_path / engine.name)
    set_backend(remote, engine.backend)
    env = env_for(module_daemon, engine)
    for project in (local, remote):
        start_session(project, env, "--policy", "random", "--max-rounds", "3")
        state = wait_finished(env, project, timeout=180)
        assert state["session"]["status"] == "finished", state["session"]
        check_outputs(project, state)
    local_csv, local_jsonl = read_ledgers(local)
    remote_csv, remote_jsonl = read_ledgers(remote)
    assert list(local_csv[0]) == list(remote_csv[0])
    assert [sorted(r) for r in local_jsonl] == [sorted(r) for r in remote_jsonl]
    for a, b in zip(local_jsonl, remote_jsonl, strict=True):
        assert a["status"] == b["status"] == "completed"
        assert a["params"] == b["params"]
        assert a["primary_metric"] == pytest.approx(b["primary_metric"], rel=1e-9)
    assert {r["backend"] for r in remote_jsonl} == {engine.name}
    assert all(engine.state(r["job_id"]) == "completed" for r in remote_jsonl)
    script = next(control_dir(remote, 1).glob("job.*")).read_text()
    assert "bwrap" in script
    assert_no_training_left(remote)


def test_a_failing_job_fails_its_round_with_the_log_tail(
    module_daemon: Daemon, engine: Engine, tmp_path: Path
) -> None:
    # a folder name sbatch's #SBATCH parser would split or cut short unescaped
    project = make_project(tmp_path / "my proj#2", engine.backend, max_rounds=2)
    with FakeLLM([OK, plan({"lr": FAIL_LR})]) as fake:
        env = env_for(module_daemon, engine, fake)
        env["MY_API_KEY"] = "sk-not-for-the-dashboard"
        start_session(project, env, "--policy", "llm")
        state = wait_finished(env, project, timeout=120)
    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed", "failed"]
    assert rounds[1]["returncode"] == 3
    got = rpc(env, "runs_get", {"project_root": str(project), "run_id": 2})
    assert any("CUDA out of memory" in line for line in got["round"]["failure_tail"])
    assert engine.state(rounds[1]["job_id"]) == "failed"
    assert state["session"]["status"] == "finished"
    # Slurm takes the round's environment from sbatch (never written into the script);
    # Ray would show a runtime_env on its dashboard, so secret-named variables stay home
    sent = engine.name == "slurm"
    assert f"has MY_API_KEY={sent}" in round_log(project, 1)
    for script in control_dir(project, 1).glob("job.s*"):  # job.sbatch or job.sh
        assert "sk-not-for-the-dashboard" not in script.read_text()
        assert script.stat().st_mode & 0o077 == 0 or engine.name == "ray"


def test_stopping_the_session_cancels_the_job(
    module_daemon: Daemon, engine: Engine, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "p", engine.backend)
    with FakeLLM([OK, plan({"lr": HOLD_LR})]) as fake:
        env = env_for(module_daemon, engine, fake)
        start_session(project, env, "--policy", "llm")
        wait_until(env, project, held_round_running(project, 2), timeout=90, what="round 2")
        stopped = run_cli("stop", "session-0001", "--project-root", str(project), env=env)
        assert stopped.returncode == 0, stopped.stderr
        state = wait_finished(env, project, timeout=90)
    assert state["session"]["status"] == "stopped"
    round2 = state["rounds"][1]
    assert round2["status"] == "stopped"
    assert engine.wait_final(round2["job_id"]) == "cancelled"
    # SIGTERM once, then the job's own time to save: its last words reach the round log
    log = round_log(project, 2)
    assert log.count("stop requested: saving") == 1 and "checkpoint saved" in log
    assert_no_training_left(project)


def test_a_round_over_its_timeout_is_cancelled_as_timed_out(
    module_daemon: Daemon, engine: Engine, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "p", engine.backend, max_rounds=2, timeout_minutes=0.05)
    with FakeLLM([OK, plan({"lr": HOLD_LR})]) as fake:
        env = env_for(module_daemon, engine, fake)
        start_session(project, env, "--policy", "llm")
        state = wait_finished(env, project, timeout=120)
    round2 = state["rounds"][1]
    assert round2["status"] == "timed_out"
    assert engine.wait_final(round2["job_id"]) == "cancelled"
    assert "step 3 " in round_log(project, 2)
    assert_no_training_left(project)


def test_two_candidates_run_at_once(module_daemon: Daemon, engine: Engine, tmp_path: Path) -> None:
    project = make_project(tmp_path / "p", engine.backend, max_rounds=3, parallel=2)
    (project / "hold").unlink()
    with FakeLLM([OK, {"content": _plans(0.2, 0.05)}]) as fake:
        env = env_for(module_daemon, engine, fake)
        start_session(project, env, "--policy", "llm")
        state = wait_finished(env, project, timeout=120)
    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed"] * 3
    assert [r["batch"] for r in rounds] == [0, 1, 1]
    a, b = rounds[1], rounds[2]
    assert a["job_id"] != b["job_id"]
    assert a["started_at"] < b["ended_at"] and b["started_at"] < a["ended_at"]
    assert state["session"]["best_round"] == 3


def test_a_restarted_daemon_readopts_the_running_job(
    module_daemon: Daemon, engine: Engine, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "p", engine.backend, max_rounds=2)
    with FakeLLM([OK, plan({"lr": HOLD_LR})]) as fake:
        env = env_for(module_daemon, engine, fake)
        start_session(project, env, "--policy", "llm")
        before = wait_until(
            env, project, held_round_running(project, 2), timeout=90, what="round 2"
        )["current_round"]
        module_daemon.stop(signal.SIGKILL)
        assert engine.state(before["job_id"]) == "running"
        restarted = Daemon(runtime=module_daemon.runtime, env=module_daemon.env)
        try:
            assert restarted.start().startswith("READY"), restarted.log
            wait_until(
                env,
                project,
                lambda s: s["running"] and "re-adopting" in restarted.log,
                timeout=60,
                what="the session to resume",
            )
            (project / "hold").unlink()
            state = wait_finished(env, project, timeout=120)
        finally:
            restarted.stop()
            module_daemon.proc = None
            assert module_daemon.start().startswith("READY"), module_daemon.log
    round2 = state["rounds"][1]
    assert round2["status"] == "completed" and round2["job_id"] == before["job_id"]
    assert round2["attempt"] == 0
    assert engine.jobs_of(control_dir(project, 2)) == 1  # re-adopted, not submitted again
    log = round_log(project, 2)
    assert log.count("start lr=0.3") == 1 and "final val_loss" in log


def _plans(*lrs: float) -> str:
    return json.dumps(
        {
            "plans": [
                {
                    "hypothesis": f"lr {lr}",
                    "change_summary": f"lr -> {lr}",
                    "params": {"lr": lr},
                    "expected": "val_loss decreases",
                    "stop": False,
                    "stop_reason": "",
                }
                for lr in lrs
            ]
        }
    )


def test_doctor_asks_the_engine_and_names_a_wrong_setting(
    module_daemon: Daemon, engine: Engine, tmp_path: Path
) -> None:
    project = make_project(tmp_path / "p", engine.backend)
    env = env_for(module_daemon, engine)

    def backend_check() -> dict[str, Any]:
        result = run_cli("doctor", str(project), "--skip-provider-test", "--json", env=env)
        checks = {c["name"]: c for c in result.json()["checks"]}
        return checks["backend"]

    good = backend_check()
    assert good["status"] == "pass", good
    assert good["detail"].startswith(engine.name)
    wrong = {"partition": "nope"} if engine.name == "slurm" else {"address": "http://127.0.0.1:9"}
    set_backend(project, {**engine.backend, **wrong})
    bad = backend_check()
    assert bad["status"] == "fail", bad
    assert ("nope" if engine.name == "slurm" else "127.0.0.1:9") in bad["detail"]
    assert bad["fix"]


def test_queue_time_does_not_count_against_the_timeout(
    module_daemon: Daemon, engine: Engine, tmp_path: Path
) -> None:
    """Three candidates of 4 s on 2 CPUs with a 6 s timeout: the third waits in the
    engine's queue until a CPU frees (about 4 s), then runs 4 s. Counted from its
    submission it would time out; counted from when it runs, it completes."""
    project = make_project(
        tmp_path / "p", engine.backend, max_rounds=4, parallel=3, timeout_minutes=0.1
    )
    (project / "hold").unlink()
    with FakeLLM([OK, {"content": _plans(0.5, 0.55, 0.6)}]) as fake:
        env = env_for(module_daemon, engine, fake)
        start_session(project, env, "--policy", "llm")
        state = wait_finished(env, project, timeout=120)
    rounds = state["rounds"]
    assert [r["status"] for r in rounds] == ["completed"] * 4, rounds
    assert [r["batch"] for r in rounds] == [0, 1, 1, 1]
    last = max(rounds[1:], key=lambda r: r["ended_at"])
    first_end = min(r["ended_at"] for r in rounds[1:])
    assert last["ended_at"] - last["started_at"] > 6  # submitted with the others, ran later
    assert last["ended_at"] > first_end + 2  # it waited for a CPU: the step took two turns
