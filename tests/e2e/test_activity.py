"""Activity is passive: a heartbeat file keeps a silent round 'active', and nothing is killed."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.daemon import Daemon, run_cli
from tests.support.loop import SESSION, call, wait_finished, wait_until

pytestmark = pytest.mark.e2e

TRAIN = """\
import json, os, time
beat = os.path.join(os.environ["TRAINEE_ROUND_DIR"], "heartbeat.json")
for i in range(12):  # silent for ~2.4 s: only the heartbeat file shows it is alive
    with open(beat + ".tmp", "w") as fh:
        json.dump({"ts": time.time()}, fh)
    os.replace(beat + ".tmp", beat)
    time.sleep(0.2)
print("loss=0.5", flush=True)
"""


def _project(tmp_path: Path) -> Path:
    root = tmp_path / "quiet"
    (root / ".trainee").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN)
    project = {
        "version": 1,
        "launch": {"command": ["python", "train.py"]},
        "run": {"max_rounds": 1, "timeout_minutes": 1},
        "advanced": {
            "security_mode": "unsafe",
            "heartbeat_interval_sec": 0.2,
            "signal_sources": [{"type": "heartbeat_file", "paths": ["{round_dir}/heartbeat.json"]}],
        },
    }
    (root / ".trainee" / "project.yaml").write_text(json.dumps(project))
    return root


def test_a_heartbeat_file_updates_activity_of_a_silent_round(
    daemon: Daemon, tmp_path: Path
) -> None:
    root = _project(tmp_path)
    started = run_cli("run", str(root), "--policy", "random", "--detach", env=daemon.env)
    assert started.returncode == 0, started.stderr
    t0 = time.time()
    running = wait_until(
        daemon.env,
        root,
        lambda s: (
            s["current_round"] is not None
            and (s["current_round"].get("last_activity_at") or 0) > t0 + 0.5
        ),
        timeout=30,
        what="a heartbeat to count as activity while the round prints nothing",
    )
    assert running["current_round"]["status"] == "running"
    assert running["current_round"]["idle_for"] < 2.0
    final = wait_finished(daemon.env, root)
    assert final["rounds"][0]["status"] == "completed"  # activity never stops a round
    events = call(daemon.env, "events_list", {"since": 0, "session": SESSION})["events"]
    beats = [e for e in events if e["kind"] == "activity" and e["data"]["project"] == str(root)]
    assert beats, "activity events from the heartbeat file"
