"""Red team, control files: a job that forges or poisons files in its reach never makes
the daemon record a false result, run past its budget, freeze, or copy a hidden file.

Each case is a real daemon running guarded (or, where said, unsafe) rounds whose
training script is the attack. The daemon must stay up and answer other clients within
a bound, the result must be the job's real one, and nothing outside the job's
workspace may change.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from tests.faults.helpers import assert_no_orphans, node
from tests.security.sandbox_helpers import (
    answers_within,
    control,
    findings,
    make_probe_project,
    refused,
    set_orders,
    workspace,
)

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed"),
]

FORGED_EXIT = {
    "returncode": 0,
    "signal": None,
    "timed_out": False,
    "stopped": False,
    "started_at": 1.0,
    "ended_at": 2.0,
    "duration_sec": 1.0,
    "error": None,
}
FORGED_STATE = {"pid": 1, "start_time": 1, "child_pid": 1, "started_at": 1.0, "argv": ["x"]}
CLUSTER_FILES = {
    "job.json": json.dumps({"backend": "local", "pid": 1, "start_time": 1}),
    "cancel.json": json.dumps({"reason": "stopped", "at": 1.0}),
    "job-exit-code": "0\n",
    "job-started": "1e18",
}


def test_a_forged_exit_record_never_makes_a_running_job_completed(tmp_path: Path) -> None:
    """The job writes a perfect exit.json (and monitor.json and the cluster files) in its
    workspace and keeps running: before, it was recorded as completed, became the best
    round and ran on after the session. Now the forged files are just files: the round
    runs until its timeout, and nothing of it is left afterwards."""
    forged = {
        "exit.json": json.dumps(FORGED_EXIT),
        "monitor.json": json.dumps(FORGED_STATE),
        **CLUSTER_FILES,
    }
    root = tmp_path / "proj"
    orders = {
        "*": {
            "write_files": forged,
            "try": {"control": ["write", str(control(root) / "exit.json")]},
            "hold_sec": 120,
        }
    }
    project = make_probe_project(root, orders, timeout_minutes=0.05)
    with node() as n:
        n.start_session(project, mode="guarded")
        n.wait(project, lambda s: bool(s["rounds"]) and s["rounds"][0]["status"] == "running")
        assert answers_within(n, 10)
        state = n.wait_finished(project, timeout=60)
    rnd = state["rounds"][0]
    assert rnd["status"] == "timed_out", rnd
    assert rnd["primary_metric"] is None and state["session"]["best_round"] is None
    assert refused(findings(project)["control"])  # the control folder is out of reach
    for name, text in forged.items():
        assert (workspace(project) / name).read_text() == text  # only ever the job's own
    real = json.loads((control(project) / "exit.json").read_text())
    assert real["timed_out"] is True and real["token"] == rnd["launch_token"]
    assert_no_orphans(project)


def test_a_forged_stop_never_lifts_the_budget(tmp_path: Path) -> None:
    """Before, ``"stopped": true`` in a forged exit.json made a 3-round session run 118
    rounds (stopped rounds do not count). Now each round's real result counts."""
    orders = {"*": {"write_files": {"exit.json": json.dumps({**FORGED_EXIT, "stopped": True})}}}
    project = make_probe_project(tmp_path / "proj", orders, max_rounds=3)
    with node() as n:
        n.start_session(project, mode="guarded")
        state = n.wait_finished(project, timeout=90)
    assert state["session"]["stop_reason"] == "max_rounds"
    assert [r["status"] for r in state["rounds"]] == ["completed"] * 3
    assert_no_orphans(project)


def test_fifos_devices_links_and_huge_files_in_reach_are_warnings_never_a_hang(
    tmp_path: Path,
) -> None:
    """The job leaves a FIFO as its exit.json and monitor.json, its heartbeat file and a
    tailed log; a W&B summary of a gigabyte; a metrics file linked to the daemon's own
    config.json (provider keys) and one linked out of the project; symlink loops where
    the metric and log globs search. The daemon keeps
    answering, the round's result is the job's own, and no byte of the hidden files
    lands anywhere the next round could read."""
    orders: dict[str, object] = {}
    project = make_probe_project(
        tmp_path / "proj",
        orders,
        metrics_extra=(
            "    - name: leaked\n"
            "      source: jsonl\n"
            "      key_or_pattern: api_key\n"
            "      path: '{outputs_dir}/**/*.json*'\n"
            "    - name: leaked_keys\n"
            "      source: jsonl\n"
            "      key_or_pattern: api_key\n"
            "      path: '{outputs_dir}/keys/config.json'\n"
            "    - name: leaked_host\n"
            "      source: jsonl\n"
            "      key_or_pattern: api_key\n"
            "      path: '{outputs_dir}/host/host-file.jsonl'\n"
            "    - name: summary\n"
            "      source: wandb_summary\n"
            "      key_or_pattern: val_loss\n"
            "      path: '{outputs_dir}/wandb-summary.json'\n"
        ),
        advanced_extra=(
            "  log_paths: ['{trainee_dir}/logs/**/*.log']\n"
            "  heartbeat_interval_sec: 0.2\n"
            "  signal_sources:\n"
            "    - type: heartbeat_file\n"
            "      paths: ['{trainee_dir}/logs/heartbeat.json']\n"
        ),
    )
    with node() as n:
        home = Path(n.env["HOME"])
        (home / ".trainee").mkdir(parents=True, exist_ok=True)
        secret = home / ".trainee" / "config.json"
        secret.write_text('{"api_key": "sk-SECRET-config", "val_loss": 0.01}\n')
        outside = tmp_path / "host"
        outside.mkdir()
        (outside / "host-file.jsonl").write_text('{"api_key": "sk-SECRET-host"}\n')
        ws = workspace(project)
        logs = project / ".trainee" / "logs"
        set_orders(
            project,
            {
                "*": {
                    "try": {
                        "exit_fifo": ["fifo", str(ws / "exit.json")],
                        "state_fifo": ["fifo", str(ws / "monitor.json")],
                        "beat_fifo": ["fifo", str(logs / "heartbeat.json")],
                        "log_fifo": ["fifo", str(logs / "train.log")],
                        "huge": ["big", [str(ws / "outputs" / "wandb-summary.json"), 1 << 30]],
                        "to_config": ["symlink", [str(ws / "outputs" / "a.jsonl"), str(secret)]],
                        "to_home": ["symlink", [str(ws / "outputs" / "keys"), str(secret.parent)]],
                        "to_host": ["symlink", [str(ws / "outputs" / "host"), str(outside)]],
                        # link loops: glob's ** would explode on them (2^depth paths)
                        "loop_a": ["symlink", [str(ws / "outputs" / "loop-a"), "."]],
                        "loop_b": ["symlink", [str(ws / "outputs" / "loop-b"), "."]],
                        "loop_c": ["symlink", [str(logs / "loop-c"), "."]],
                        "loop_d": ["symlink", [str(logs / "loop-d"), "."]],
                    },
                    "hold_sec": 1.5,
                }
            },
        )
        n.start_session(project, mode="guarded")
        n.wait(project, lambda s: bool(s["rounds"]) and s["rounds"][0]["status"] == "running")
        while n.state(project)["running"]:
            assert answers_within(n, 5), "the daemon answers while the files are there"
            time.sleep(0.2)
        state = n.wait_finished(project, timeout=60)
        assert answers_within(n, 5)
    got = findings(project)
    assert all(got[k] == "ok" for k in ("exit_fifo", "huge", "to_config", "to_home")), got
    rnd = state["rounds"][0]
    assert rnd["status"] == "completed" and rnd["primary_metric"] == 0.5, rnd
    assert not {"leaked", "leaked_keys", "leaked_host", "summary"} & set(rnd["finals"])
    warnings = "\n".join(rnd["warnings"])
    assert "a.jsonl: a symlink: not followed" in warnings, warnings
    assert "keys/config.json: leads to trainee's private" in warnings, warnings
    assert "host/host-file.jsonl: leads outside" in warnings, warnings
    assert "larger than" in warnings, warnings
    # nothing of the hidden files anywhere the job or the next round could read
    everything = [
        *(p for p in (project / ".trainee").rglob("*") if p.is_file() and not p.is_symlink()),
    ]
    for path in everything:
        if path.stat().st_size > 50 << 20 or path.name.startswith("runtime.sqlite3"):
            continue
        data = path.read_bytes()
        assert b"sk-SECRET" not in data, path
    assert_no_orphans(project)


def test_unsafe_mode_a_fifo_in_the_control_folder_is_no_hang(tmp_path: Path) -> None:
    """Unsafe mode gives the job the user's rights: it can reach the control folder and
    puts a FIFO where its exit.json goes. The daemon keeps answering, skips it with a
    warning, and takes the monitor's real record when the round ends (the monitor
    replaces the FIFO atomically)."""
    orders: dict[str, object] = {}
    project = make_probe_project(tmp_path / "proj", orders, mode="unsafe")
    set_orders(
        project,
        {"*": {"try": {"fifo": ["fifo", str(control(project) / "exit.json")]}, "hold_sec": 1.5}},
    )
    with node() as n:
        n.start_session(project, mode="unsafe")
        n.wait(project, lambda s: bool(s["rounds"]) and s["rounds"][0]["status"] == "running")
        while n.state(project)["running"]:
            assert answers_within(n, 5)
            time.sleep(0.2)
        state = n.wait_finished(project, timeout=60)
        log = n.log
    assert findings(project)["fifo"] == "ok"
    rnd = state["rounds"][0]
    assert rnd["status"] == "completed" and rnd["primary_metric"] == 0.5, rnd
    assert "not a regular file" in log
    assert_no_orphans(project)
