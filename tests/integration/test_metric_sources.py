"""The tensorboard and csv sources read while a real training process runs.

fit.py (tests/integration/sources_project.py) runs as a real subprocess in step mode:
the test lets it train one epoch at a time and, while the process is still running,
polls the round's extractor exactly as the session runner does between heartbeats.
Each epoch's TensorBoard scalar and summary.csv row must be there before the next
epoch starts, and the final read at the end adds nothing twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.integration.sources_project import expected_val_loss, write_project
from tests.support.extras import require
from trainee.launch.layout import ProjectLayout
from trainee.metrics import Extractor
from trainee.spec import load_project

require("tensorboard")


def test_tensorboard_and_csv_points_arrive_epoch_by_epoch(tmp_path: Path) -> None:
    root = write_project(tmp_path / "proj")
    spec = load_project(root)
    rnd = ProjectLayout.for_root(root, env={}).session(1).round(1)
    rnd.outputs.mkdir(parents=True)
    extractor = Extractor(
        spec.metrics.specs, placeholders=rnd.placeholders(), project_root=str(root)
    )
    params = {"n_embd": 96, "n_head": 8, "batch_size": 8, "grad_accum": 4}
    env = {**os.environ, "TRAINEE_ROUND_DIR": str(rnd.dir), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "fit.py", "--step", "--epochs", "3"]
    argv += [f"--{k}={v}" for k, v in params.items()]
    with subprocess.Popen(
        argv, cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            for epoch in range(3):
                proc.stdin.write("\n")
                proc.stdin.flush()
                printed = []
                for line in proc.stdout:
                    printed.append(line)
                    if line.startswith(f"epoch {epoch} written"):
                        break
                assert proc.poll() is None  # still training
                extractor.feed_output("".join(printed))
                points = {p.name: p for p in extractor.poll_files()}
                want = expected_val_loss(params, epoch)
                assert set(points) == {"val_loss", "eval_top1"}, epoch
                # TensorBoard keeps scalars as float32
                assert points["val_loss"].value == float(np.float32(want))
                assert points["val_loss"].step == epoch
                assert points["val_loss"].source == "tensorboard"
                assert points["eval_top1"].value == round(100 - 50 * want, 4)
                assert points["eval_top1"].step == epoch
                assert extractor.poll_files() == []  # nothing new until the next epoch
            proc.stdin.close()
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    assert extractor.read_files() == []  # everything was read while it ran
    result = extractor.result()
    last = expected_val_loss(params, 2)
    assert result.finals == {
        "val_loss": float(np.float32(last)),
        "eval_top1": round(100 - 50 * last, 4),
        "printed_val_loss": last,
        "loss": float(f"{last * 0.9:.6f}"),  # the built-in training loss of the output
    }
    assert result.primary == "val_loss" and result.warnings == []
    assert len([p for p in result.points if p.name == "val_loss"]) == 3


def test_doctor_tries_the_file_sources_on_the_last_finished_round(tmp_path: Path) -> None:
    from trainee.session.doctor import check_metrics_on_last_log

    root = write_project(tmp_path / "proj")
    layout = ProjectLayout.for_root(root, env={})
    rnd = layout.session(1).round(2)
    env = {**os.environ, "TRAINEE_ROUND_DIR": str(rnd.dir)}
    run = subprocess.run(
        [sys.executable, "fit.py", "--epochs", "2"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rnd.log.parent.mkdir(parents=True)
    rnd.log.write_text(run.stdout)
    rnd.exit_file.parent.mkdir(parents=True, exist_ok=True)
    rnd.exit_file.write_text('{"returncode": 0}')
    check = check_metrics_on_last_log(load_project(root))
    assert check.status == "pass", check
    assert check.detail == (
        "on session-0001/round-0002.log: matched eval_top1, loss, printed_val_loss, val_loss"
    )
    # a tag the files do not hold fails, naming what was found; a goal against the name warns
    yaml = root / ".trainee" / "project.yaml"
    text = yaml.read_text()
    yaml.write_text(text.replace("key_or_pattern: val/loss", "key_or_pattern: eval/loss"))
    check = check_metrics_on_last_log(load_project(root))
    assert check.status == "fail"
    assert "no value for val_loss" in check.detail
    assert (
        "tag 'eval/loss' not found in 1 event file(s) (scalar tags seen: train/loss, val/loss)"
        in check.detail
    )
    yaml.write_text(text.replace('summary.csv", goal: max', 'summary.csv", goal: min'))
    check = check_metrics_on_last_log(load_project(root))
    assert check.status == "warn"
    assert check.detail.endswith("eval_top1 has goal min but its name says max")
