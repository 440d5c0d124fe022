"""examples/lr-cliff trains for real and falls off its learning-rate cliff.

Each test runs the example's train.py as a real subprocess (``sys.executable``) for a
few epochs and reads its output with the project's own metric pattern: below the cliff
the validation loss falls epoch by epoch, above it the loss blows up (past the prune
threshold, then to inf/nan) and the script keeps printing to its last epoch, as a plain
training loop does, so only ``run.prune`` saves that compute. The project's own
``run.prune`` (threshold + median) is applied to the real series with trainee's pruner.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import regex

from trainee.research.prune import decide
from trainee.spec import load_project
from trainee.spec.files import ThresholdRule

ROOT = Path(__file__).resolve().parents[2] / "examples" / "lr-cliff"


def run(tmp_path: Path, *flags: str) -> list[float]:
    """The val_loss of each epoch the run printed, read with the project's pattern."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *flags],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    (spec,) = load_project(ROOT).metrics.specs
    pattern = regex.compile(spec.key_or_pattern)
    values = [
        float(m.group("value")) for line in proc.stdout.splitlines() if (m := pattern.search(line))
    ]
    assert proc.stdout.rstrip().splitlines()[-1].startswith("final val_loss=")
    return values


def series(values: list[float]) -> tuple[dict[str, list[tuple[int, float]]], dict[str, str]]:
    """The running round's points (epoch = step) and its non-finite value, as the session
    feeds them to the pruner."""
    points = [(i, v) for i, v in enumerate(values, 1) if math.isfinite(v)]
    bad = next((v for v in values if not math.isfinite(v)), None)
    return {"val_loss": points}, ({"val_loss": repr(bad)} if bad is not None else {})


def test_one_real_epoch_prints_one_finite_point(tmp_path: Path) -> None:
    (value,) = run(tmp_path, "--epochs", "1")
    assert math.isfinite(value) and 0 < value < 2


def test_below_the_cliff_the_loss_falls_and_no_rule_prunes_it(tmp_path: Path) -> None:
    values = run(tmp_path, "--epochs", "4")  # the baseline: lr 0.001, momentum 0.9
    assert len(values) == 4 and all(math.isfinite(v) for v in values)
    assert values[-1] < values[0]
    prune = load_project(ROOT).run.prune
    assert prune is not None
    running, bad = series(values)
    assert (
        decide(prune, primary="val_loss", goals={"val_loss": "min"}, running=running, nonfinite=bad)
        is None
    )


def test_above_the_cliff_it_diverges_keeps_going_and_the_threshold_rule_prunes_it(
    tmp_path: Path,
) -> None:
    values = run(tmp_path, "--epochs", "5", "--lr", "0.3", "--momentum", "0.9")
    assert len(values) == 5  # no NaN check in the loop: every epoch is printed
    prune = load_project(ROOT).run.prune
    assert prune is not None
    (bound,) = [r.above for r in prune.rules if isinstance(r, ThresholdRule)]
    assert bound is not None
    assert all(not math.isfinite(v) or v > bound for v in values), values
    assert not math.isfinite(values[-1])
    running, bad = series(values)
    found = decide(
        prune, primary="val_loss", goals={"val_loss": "min"}, running=running, nonfinite=bad
    )
    assert found is not None and found.rule == "threshold", found


def test_the_cliff_is_in_the_effective_step_lr_over_one_minus_momentum(tmp_path: Path) -> None:
    """The same lr that diverges with momentum 0.9 trains without momentum."""
    values = run(tmp_path, "--epochs", "3", "--lr", "0.1", "--momentum", "0")
    assert all(math.isfinite(v) and v < 1 for v in values), values
    diverged = run(tmp_path, "--epochs", "3", "--lr", "0.1", "--momentum", "0.9")
    assert not all(math.isfinite(v) and v < 1 for v in diverged), diverged


def test_the_trainee_config_compiles_with_its_tunables_and_rules() -> None:
    spec = load_project(ROOT)
    assert [t.name for t in spec.tunables] == ["lr", "momentum", "weight_decay"]
    assert [(t.name, t.baseline) for t in spec.tunables] == [
        ("lr", 0.001),
        ("momentum", 0.9),
        ("weight_decay", 0.0001),
    ]
    assert spec.run.prune is not None
    assert [type(r).__name__ for r in spec.run.prune.rules] == ["ThresholdRule", "MedianRule"]
    help_text = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    for flag in ("--lr", "--momentum", "--weight-decay", "--epochs", "--seed"):
        assert flag in help_text
