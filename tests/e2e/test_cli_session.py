"""Session commands as a user types them inside a project: run, logs, report, attach, stop, resume."""

from __future__ import annotations

import json
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, copy_example, run_cli
from tests.support.loop import wait_until
from tests.support.processes import assert_no_training_left

pytestmark = pytest.mark.e2e


def _wait_session(daemon: Daemon, project: Path, session: str) -> dict[str, object]:
    deadline = time.monotonic() + 60
    while True:
        got = run_cli("call", "loop_get", "--input", json.dumps({"session": session}),
                      env=daemon.env, cwd=project)  # fmt: skip
        state = got.json()
        if not state["running"] or time.monotonic() > deadline:
            return state
        select.select([], [], [], 0.1)


def test_logs_report_and_attach_from_inside_the_project(daemon: Daemon, tmp_path: Path) -> None:
    project = copy_example("mlp-flags", tmp_path)
    live = run_cli(
        "run", "--policy", "random", "--max-rounds", "2", "--unsafe", env=daemon.env, cwd=project
    )
    assert live.returncode == 0, live.stderr
    assert "report:" in live.stdout
    # piped, the view is plain lines: no job output (it is in the round logs), a status
    # line after each round, no "None" for a missing value
    assert "epoch=" not in live.stdout and "None" not in live.stdout
    assert re.search(r"^   \[round 2/2 · \d+s · best val_loss .*\]$", live.stdout, re.M), (
        live.stdout
    )

    state = json.loads(run_cli("call", "loop_get", env=daemon.env, cwd=project).stdout)
    research = json.loads(
        (project / ".trainee/artifacts/session-0001/research_state.json").read_text()
    )
    assert research["recent_rounds"] == [
        {"round": r["index"], "status": r["status"], "diff": r["diff"],
         "metric": r["primary_metric"], "verdict": r["verdict"]}
        for r in state["rounds"]
    ]  # fmt: skip

    listed = run_cli("--json", "sessions", env=daemon.env, cwd=project)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == run_cli("sessions", "--json", env=daemon.env, cwd=project).stdout
    (entry,) = listed.json()["sessions"]
    best = next(r for r in state["rounds"] if r["index"] == state["session"]["best_round"])
    assert entry["id"] == "session-0001" and entry["rounds"] == 2 and entry["metric"] == "val_loss"
    assert (entry["status"], entry["stop_reason"]) == ("finished", "max_rounds")
    assert entry["best_metric"] == best["primary_metric"]
    assert entry["baseline_metric"] == state["rounds"][0]["primary_metric"]
    assert entry["duration_sec"] == pytest.approx(
        state["session"]["finished_at"] - state["session"]["created_at"]
    )
    table = run_cli("sessions", env=daemon.env, cwd=project).stdout
    assert re.search(r"^session-0001\s+finished\s+max_rounds\s+2/2\s+\S+", table, re.M), table
    status = run_cli("status", env=daemon.env, cwd=project)
    assert "sessions: none running" in status.stdout
    assert f"latest sessions of {project}" not in status.stdout  # a table title: terminals only
    assert re.search(r"^session-0001\s+finished\s", status.stdout, re.M), status.stdout

    nothing = run_cli("stop", env=daemon.env, cwd=project)
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stdout == (
        f"nothing to stop: no session is running in {project}; "
        "the latest, session-0001 is finished (max_rounds)\n"
    )
    unknown = run_cli("stop", "session-0042", env=daemon.env, cwd=project)
    assert unknown.returncode == 4, unknown.stdout + unknown.stderr
    logs = run_cli("logs", "session-0001", env=daemon.env, cwd=project)  # the latest round: 2
    log2 = project / ".trainee" / "artifacts" / "session-0001" / "round-0002.log"
    assert logs.returncode == 0 and logs.stdout == log2.read_text()
    follow = run_cli("logs", "-f", "session-0001", "1", env=daemon.env, cwd=project, timeout=60)
    assert follow.returncode == 0  # a finished session: follows round 1 into round 2, then ends
    log1 = log2.with_name("round-0001.log").read_text()
    assert follow.stdout.startswith(f"==> round 1 <==\n{log1}\n==> round 2 <==\n{log2.read_text()}")
    assert re.search(
        r"\n\n==> session-0001 finished \(max_rounds\); best round \d <==\n$", follow.stdout
    )
    missing = run_cli("logs", "session-0001", "7", env=daemon.env, cwd=project)
    assert missing.returncode == 4 and "no round 7" in missing.stderr

    out = tmp_path / "r.md"
    report = run_cli("report", "session-0001", "--output", str(out), env=daemon.env, cwd=project)
    assert report.returncode == 0, report.stderr
    assert out.read_text().startswith("# Trainee report — session-0001")
    bad = run_cli(
        "report", "session-0001", "--output", "/nonexistent/r.md", env=daemon.env, cwd=project
    )
    assert bad.returncode == 2 and "--output /nonexistent/r.md: cannot write it" in bad.stderr

    attach = run_cli("attach", "session-0001", env=daemon.env, cwd=project)
    assert attach.returncode == 0 and "is not running: finished (max_rounds)" in attach.stdout
    unknown = run_cli("attach", "session-0042", env=daemon.env, cwd=project, timeout=30)
    assert unknown.returncode == 4
    call = run_cli("call", "project_get", env=daemon.env, cwd=project)  # project_root from the cwd
    assert call.returncode == 0 and call.json()["project_root"] == str(project)


def test_stop_then_resume_reruns_the_baseline_and_takes_new_options(
    daemon: Daemon, tmp_path: Path
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    # rounds hold while the file exists, so the test decides when round 1 may end
    hold = project / "hold"
    hold.write_text("")
    (project / "held.py").write_text(
        "import os, runpy, sys, time\n"
        f"while os.path.exists({str(hold)!r}):\n    time.sleep(0.05)\n"
        "sys.argv[0] = 'train.py'\nrunpy.run_path('train.py', run_name='__main__')\n"
    )
    config = project / ".trainee" / "project.yaml"
    config.write_text(config.read_text().replace("- train.py", "- held.py"))

    started = run_cli("run", "--policy", "random", "--max-rounds", "2", "--unsafe", "--detach",
                      env=daemon.env, cwd=project)  # fmt: skip
    assert started.returncode == 0, started.stderr
    wait_until(daemon.env, project, lambda s: s["current_round"] is not None
               and s["current_round"]["status"] == "running", what="round 1 to run")  # fmt: skip
    stop = run_cli("stop", env=daemon.env, cwd=project)
    assert stop.returncode == 0, stop.stderr
    assert re.search(r"^stopped session-0001: round 1 stopped after \d+\.\d s$", stop.stdout, re.M)
    hold.unlink()
    second = run_cli(
        "run", "--policy", "random", "--detach", "--unsafe", env=daemon.env, cwd=project
    )
    assert second.returncode == 0
    # a resume while another session runs on the project is refused
    refused = run_cli("run", "--resume", "session-0001", "--detach", env=daemon.env, cwd=project)
    assert refused.returncode == 5 and "already running" in refused.stderr
    _wait_session(daemon, project, "session-0002")
    resumed = subprocess.run(
        [sys.executable, "-m", "trainee", "run", "--resume", "session-0001", "--max-rounds", "3"],
        env=daemon.env, cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "round 2" in resumed.stdout  # the live view follows the resumed run, not the old end
    state = _wait_session(daemon, project, "session-0001")
    rounds = state["rounds"]
    assert state["session"]["max_rounds"] == 3
    assert rounds[0]["status"] == "stopped"
    assert rounds[1]["diff"] == {}, "the stopped baseline runs again before any decision"
    assert state["session"]["baseline_round"] == 2, json.dumps(state, indent=1)[:3000]
    assert len([r for r in rounds if r["status"] == "completed"]) == 3
    assert_no_training_left(project)
