"""The bundled example projects under examples/ train for real.

Every test runs an example's train.py as a real subprocess (``sys.executable``)
and reads what it prints and writes. They check what the demo and the end-to-end
tests rely on: a seed repeats exactly, the learning rate moves the metric, the
metric has an interior optimum in the learning rate and in the regularisation
weight, a known better setting beats the baseline, and each example's
.trainee/ config agrees with its train.py.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from abc import ABC, abstractmethod
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml  # type: ignore[import-untyped]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
FINAL = re.compile(r"^final val_loss=(\S+)$", re.M)
_run_ids = count()


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    cwd: Path

    @property
    def val_loss(self) -> float:
        """The final val_loss; nan for a diverged run."""
        assert self.returncode == 0, self.stderr
        found = FINAL.findall(self.stdout)
        assert len(found) == 1, self.stdout[-500:]
        return float(found[0])

    @property
    def metric_lines(self) -> list[str]:
        return [line for line in self.stdout.splitlines() if "val_loss=" in line]


class Example(ABC):
    """How to launch one example with a few knobs changed."""

    name: str
    lr_key: str  # the knob holding the learning rate
    reg_key: str  # the knob holding the regularisation weight
    epoch_line: re.Pattern[str]  # one per-epoch stdout line; group 1 is the epoch
    baseline: Mapping[str, float]  # knobs for the shipped baseline
    tuned: Mapping[str, float]  # knobs for a known better setting
    lr_grid: list[float]
    reg_grid_lr: float  # the learning rate used for the regularisation sweep
    reg_grid: list[float]

    def __init__(self, workdir: Path) -> None:
        self.root = EXAMPLES / self.name
        self.workdir = workdir

    @abstractmethod
    def run(self, **knobs: float | int) -> Run:
        """Run train.py once in a fresh folder with ``knobs`` changed."""

    def many(self, settings: list[dict[str, float]]) -> list[float]:
        """Final val_loss for each setting (nan counts as worst), two at a time."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            runs = list(pool.map(lambda knobs: self.run(**knobs), settings))
        return [r.val_loss if math.isfinite(r.val_loss) else math.inf for r in runs]

    def _fresh_dir(self) -> Path:
        path = self.workdir / f"run-{next(_run_ids)}"
        path.mkdir()
        return path


class MlpFlags(Example):
    name = "mlp-flags"
    lr_key = "lr"
    reg_key = "weight_decay"
    epoch_line = re.compile(r"^epoch=(\d+) loss=\d+\.\d{5} val_loss=\d+\.\d{5}$")
    baseline = {"lr": 1e-3, "weight_decay": 1e-5}  # train.py's defaults
    tuned = {"lr": 1e-2, "weight_decay": 3e-3}
    lr_grid = [1e-4, 1e-3, 1e-2, 1e-1]
    reg_grid_lr = 1e-2  # weight decay only pays off once the lr is high enough to overfit
    reg_grid = [1e-6, 1e-4, 3e-3, 1e-1]

    def run(self, **knobs: float | int) -> Run:
        cwd = self._fresh_dir()
        argv = [sys.executable, str(self.root / "train.py"), "--out", str(cwd / "out")]
        for key, value in knobs.items():
            argv += ["--" + key.replace("_", "-"), str(value)]
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)
        return Run(proc.returncode, proc.stdout, proc.stderr, cwd)


class YamlConfig(Example):
    name = "yaml-config"
    lr_key = "optimizer.lr"
    reg_key = "loss.weights.l2"
    epoch_line = re.compile(r"^epoch (\d+) train_loss=\d+\.\d{5} val_loss=\d+\.\d{5}$")
    baseline: Mapping[str, float] = {}  # configs/base.yaml as shipped
    tuned = {"optimizer.lr": 1e-2, "loss.weights.l2": 1e-3}
    lr_grid = [1e-3, 1e-2, 1e-1, 3e-1]
    reg_grid_lr = 0.1  # the baseline lr
    reg_grid = [1e-6, 1e-4, 1e-2, 1e-1]

    def base_config(self) -> dict[str, Any]:
        loaded: dict[str, Any] = yaml.safe_load((self.root / "configs/base.yaml").read_text())
        return loaded

    def run(self, **knobs: float | int) -> Run:
        cwd = self._fresh_dir()
        config = self.base_config()
        config["output"]["root"] = "outputs/run"  # relative: resolved against the cwd
        for dotted, value in knobs.items():
            *parents, leaf = dotted.split(".")
            node = config
            for key in parents:
                node = node[key]
            assert leaf in node, dotted
            node[leaf] = value
        (cwd / "config.yaml").write_text(yaml.safe_dump(config))
        argv = [sys.executable, str(self.root / "train.py"), "--config", "config.yaml"]
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60)
        return Run(proc.returncode, proc.stdout, proc.stderr, cwd)


EXAMPLE_TYPES = [MlpFlags, YamlConfig]


@pytest.fixture(params=EXAMPLE_TYPES, ids=lambda cls: cls.name)
def example(request: pytest.FixtureRequest, tmp_path: Path) -> Example:
    cls: type[Example] = request.param
    return cls(tmp_path)


def _default_lr(example: Example) -> float:
    if isinstance(example, YamlConfig):
        return float(example.base_config()["optimizer"]["lr"])
    return MlpFlags.baseline["lr"]


def _interior(values: list[float]) -> tuple[bool, str]:
    best = min(range(len(values)), key=values.__getitem__)
    shown = ", ".join(f"{v:.5f}" for v in values)
    return 0 < best < len(values) - 1, shown


# -- tests -----------------------------------------------------------------------


def test_same_seed_prints_the_same_metrics(example: Example) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(lambda _: _seeded_run(example, 3), range(2))
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    epochs = [m for line in a.metric_lines if (m := example.epoch_line.match(line))]
    assert len(epochs) >= 10, a.stdout[:500]
    assert [int(m.group(1)) for m in epochs] == list(range(1, len(epochs) + 1))
    assert a.metric_lines == b.metric_lines
    assert math.isfinite(a.val_loss)


def _seeded_run(example: Example, seed: int) -> Run:
    key = "seed" if isinstance(example, MlpFlags) else "train.seed"
    return example.run(**{key: seed})


def test_a_different_seed_gives_different_metrics(example: Example) -> None:
    with ThreadPoolExecutor(max_workers=2) as pool:
        a, b = pool.map(lambda seed: _seeded_run(example, seed), [0, 1])
    assert a.val_loss != b.val_loss


def test_learning_rate_three_times_either_way_moves_the_metric(example: Example) -> None:
    lr = _default_lr(example)
    base, low, high = example.many([{}, {example.lr_key: lr / 3}, {example.lr_key: lr * 3}])
    for changed in (low, high):
        assert abs(changed - base) / base > 0.01, (base, low, high)


def test_learning_rate_has_an_interior_optimum(example: Example) -> None:
    values = example.many([{example.lr_key: lr} for lr in example.lr_grid])
    inside, shown = _interior(values)
    assert inside, f"lr grid {example.lr_grid} gave {shown}"
    assert min(values[0], values[-1]) > 1.02 * min(values), shown


def test_regularisation_weight_has_an_interior_optimum(example: Example) -> None:
    values = example.many(
        [{example.lr_key: example.reg_grid_lr, example.reg_key: w} for w in example.reg_grid]
    )
    inside, shown = _interior(values)
    assert inside, f"{example.reg_key} grid {example.reg_grid} gave {shown}"
    assert min(values[0], values[-1]) > 1.02 * min(values), shown


def test_a_tuned_setting_beats_the_baseline_by_ten_percent(example: Example) -> None:
    baseline, tuned = example.many([dict(example.baseline), dict(example.tuned)])
    assert tuned < 0.9 * baseline, (baseline, tuned)


def test_mlp_flags_out_writes_weights_and_metrics(tmp_path: Path) -> None:
    run = MlpFlags(tmp_path).run(epochs=7)
    out = run.cwd / "out"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["final"]["val_loss"] == pytest.approx(run.val_loss, abs=1e-5)
    assert [h["epoch"] for h in metrics["history"]] == list(range(1, 8))
    with np.load(out / "weights.npz") as weights:
        assert weights["w1"].shape == (2, 64)
        assert weights["w2"].shape == (64, 1)


def test_mlp_flags_diverging_run_prints_nan_and_exits_zero(tmp_path: Path) -> None:
    run = MlpFlags(tmp_path).run(lr=1e200, epochs=5)
    assert run.returncode == 0
    assert "val_loss=nan" in run.metric_lines[0]
    assert math.isnan(run.val_loss)
    assert json.loads((run.cwd / "out/metrics.json").read_text())["final"]["val_loss"] is None


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [("--lr", "-1", "--lr must be a positive number"), ("--epochs", "0", "--epochs")],
)
def test_mlp_flags_rejects_bad_flags(tmp_path: Path, flag: str, value: str, message: str) -> None:
    script = EXAMPLES / "mlp-flags/train.py"
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(script), flag, value, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not out.exists()


def test_yaml_config_writes_jsonl_and_log_under_output_root(tmp_path: Path) -> None:
    example = YamlConfig(tmp_path)
    run = example.run(**{"train.epochs": 6})
    out = run.cwd / "outputs/run"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == list(range(1, 7))
    steps_per_epoch = math.ceil(example.base_config()["data"]["n_samples"] / 10)
    assert [r["step"] for r in records] == [steps_per_epoch * e for e in range(1, 7)]
    last = records[-1]
    assert set(last) == {"epoch", "step", "train_loss", "val_loss", "val"}
    assert last["val"]["mse"] == last["val_loss"]
    assert last["val_loss"] == pytest.approx(run.val_loss, abs=1e-5)
    log_lines = (out / "train.log").read_text().splitlines()
    assert [x for x in log_lines if example.epoch_line.match(x)] == [
        x for x in run.metric_lines if example.epoch_line.match(x)
    ]
    assert (out / "weights.npz").is_file()


def test_yaml_config_diverging_run_writes_null_and_exits_zero(tmp_path: Path) -> None:
    run = YamlConfig(tmp_path).run(**{"optimizer.lr": 5.0})
    assert run.returncode == 0
    assert math.isnan(run.val_loss)
    lines = (run.cwd / "outputs/run/metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["val_loss"] is None


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("optimizer", "lr", "fast"), "optimizer.lr must be a number > 0, got 'fast'"),
        (("optimizer", "name", "lbfgs"), "optimizer.name must be one of sgd, momentum, adam"),
        (("train", "epoch", 5), "unknown field train.epoch"),
    ],
)
def test_yaml_config_rejects_bad_fields(
    tmp_path: Path, edit: tuple[str, str, object], message: str
) -> None:
    example = YamlConfig(tmp_path)
    config = example.base_config()
    config["output"]["root"] = str(tmp_path / "out")
    section, key, value = edit
    config[section][key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run(
        [sys.executable, str(example.root / "train.py"), "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert f"{path}: {message}" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_mlp_flags_trainee_config_matches_the_script(tmp_path: Path) -> None:
    root = EXAMPLES / "mlp-flags"
    project = yaml.safe_load((root / ".trainee/project.yaml").read_text())
    tuning = yaml.safe_load((root / ".trainee/tuning.yaml").read_text())
    help_text = subprocess.run(
        [sys.executable, str(root / "train.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    flags = [a["flag"] for a in project["run"]["fixed_args"]]
    flags += [d["flag"] for d in project["data"]]
    flags += [p["flag"] for p in tuning["params"]]
    for flag in flags:
        assert flag in help_text
    for data in project["data"]:
        assert (root / data["path"]).is_dir()
    for param in tuning["params"]:
        assert param["min_value"] <= param["default"] <= param["max_value"], param
    (spec,) = project["metrics"]["specs"]
    run = MlpFlags(tmp_path).run(epochs=3)
    matches = [
        m for line in run.stdout.splitlines() if (m := re.search(spec["key_or_pattern"], line))
    ]
    assert [float(m.group("value")) for m in matches] == [run.val_loss]


def test_yaml_config_trainee_config_matches_the_baseline(tmp_path: Path) -> None:
    root = EXAMPLES / "yaml-config"
    project = yaml.safe_load((root / ".trainee/project.yaml").read_text())
    tuning = yaml.safe_load((root / ".trainee/tuning.yaml").read_text())
    base = yaml.safe_load((root / project["launch"]["baseline_config"]).read_text())

    def lookup(dotted: str) -> Any:
        node: Any = base
        for key in dotted.split("."):
            assert isinstance(node, dict) and key in node, dotted
            node = node[key]
        return node

    assert isinstance(lookup(project["output"]["config_path"]), str)
    for param in tuning["params"]:
        assert param["min_value"] <= float(lookup(param["config_path"])) <= param["max_value"]
    (spec,) = project["metrics"]["specs"]
    assert spec["source"] == "jsonl"
    assert spec["path"].startswith("{outputs_dir}/")
    run = YamlConfig(tmp_path).run(**{"train.epochs": 4})
    written = run.cwd / "outputs/run" / spec["path"].removeprefix("{outputs_dir}/")
    last = json.loads(written.read_text().splitlines()[-1])
    assert last[spec["key_or_pattern"]] == pytest.approx(run.val_loss, abs=1e-5)
    (log_glob,) = project["advanced"]["log_paths"]
    assert list((run.cwd / "outputs/run").glob(log_glob.removeprefix("{outputs_dir}/")))


def test_yaml_config_reads_exponent_floats_without_a_dot(tmp_path: Path) -> None:
    """YAML 1.2 writers (trainee uses ruamel) emit ``1e-06``; PyYAML reads it as a string."""
    example = YamlConfig(tmp_path)
    text = (example.root / "configs/base.yaml").read_text()
    assert "l2: 0.0001 " in text
    text = text.replace("l2: 0.0001 ", "l2: 1e-06 ").replace("epochs: 60", "epochs: 3")
    text = text.replace("root: outputs/base", f"root: {tmp_path / 'out'}")
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    proc = subprocess.run(
        [sys.executable, str(example.root / "train.py"), "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "l2=1e-06" in (tmp_path / "out/train.log").read_text()


@pytest.mark.parametrize("cls", EXAMPLE_TYPES, ids=lambda cls: cls.name)
def test_trainee_config_compiles(cls: type[Example]) -> None:
    from trainee.spec import load_project

    spec = load_project(EXAMPLES / cls.name)
    keys = {t.key for t in spec.tunables}
    assert {"--lr", "optimizer.lr"} & keys
    assert {"--weight-decay", "loss.weights.l2"} & keys
    assert spec.run.max_rounds == 6
    assert [m.name for m in spec.metrics.specs] == ["val_loss"]
