"""The per-round config differs from the baseline only in the rewritten fields."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest
import yaml  # type: ignore[import-untyped]

from trainee.errors import InvalidParams
from trainee.launch.render import build_argv, build_env, config_diff
from trainee.launch.roundconfig import (
    resolve_params,
    round_config_path,
    round_config_text,
    write_round_config,
)
from trainee.spec import ProjectSpec, Value

from .projects import make_project, round_of

COMMENTED = """\
# Baseline config: every comment, quote and blank line must survive.

defaults:
  - model: mlp          # hydra-style list
  - _self_

output:
  root: 'outputs/base'  # rewritten per round
  keep: "yes"

data:
  path: ${oc.env:DATA_ROOT,/data}/train   # interpolation stays as written
  cache: ${hydra:runtime.cwd}/cache

optimizer:
  name: adam            # sgd | adam
  lr: 0.001             # tuned
  betas: [0.9, 0.999]
  momentum: 0           # an int in the file, a float param
  weight_decay: 1.0e-4

loss:
  weights:
    l2: 0.0001          # tuned (becomes an exponent float)
    smooth: 0.0

train:
  epochs: 60
  amp: false
  seed: 0               # last line has no newline"""

PROJECT = """\
version: 1
launch:
  command: [python, train.py]
  baseline_config: configs/{name}
output:
  config_path: output.root
advanced:
  security_mode: unsafe
"""

TUNING = """\
version: 1
params:
  - name: lr
    config_path: optimizer.lr
    type: float
  - name: momentum
    config_path: optimizer.momentum
    type: float
  - name: l2
    config_path: loss.weights.l2
    type: float
  - name: opt
    config_path: optimizer.name
    type: choice
    choices: [adam, sgd]
  - name: amp
    config_path: train.amp
    type: bool
  - name: epochs
    config_path: train.epochs
    type: int
  - name: wd
    flag: --wd
    type: float
"""


def project(root: Path, text: str = COMMENTED, name: str = "base.yaml") -> ProjectSpec:
    return make_project(root, PROJECT.format(name=name), TUNING, {f"configs/{name}": text})


def changed_lines(old: str, new: str) -> list[tuple[str, str]]:
    """(old, new) of every line that differs; the line count must not change."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    assert len(old_lines) == len(new_lines), "".join(difflib.unified_diff(old_lines, new_lines))
    return [(a, b) for a, b in zip(old_lines, new_lines, strict=True) if a != b]


def test_commented_yaml_differs_only_in_the_rewritten_fields(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec)
    params: dict[str, Value | None] = {
        "lr": 0.05,
        "l2": 1e-06,
        "opt": "sgd",
        "amp": True,
        "epochs": 80,
        "wd": 0.3,
    }
    path = write_round_config(spec, rnd, params)
    assert path == rnd.config
    new = rnd.config.read_text()
    assert changed_lines(COMMENTED, new) == [
        # the long path overruns the comment column: ruamel keeps one space
        (
            "  root: 'outputs/base'  # rewritten per round",
            f"  root: '{rnd.outputs}' # rewritten per round",
        ),
        ("  name: adam            # sgd | adam", "  name: sgd             # sgd | adam"),
        ("  lr: 0.001             # tuned", "  lr: 0.05              # tuned"),
        (
            "    l2: 0.0001          # tuned (becomes an exponent float)",
            "    l2: 1.0e-06         # tuned (becomes an exponent float)",
        ),
        ("  epochs: 60", "  epochs: 80"),
        ("  amp: false", "  amp: true"),
    ]
    assert not new.endswith("\n")
    assert rnd.outputs.is_dir()


def test_round_config_reads_back_the_same_in_yaml_1_1_loaders(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec)
    write_round_config(spec, rnd, {"lr": 2e-05, "l2": 1e-06, "momentum": 1e16})
    data = yaml.safe_load(rnd.config.read_text())  # PyYAML: YAML 1.1, like many scripts
    assert data["optimizer"]["lr"] == 2e-05
    assert data["loss"]["weights"]["l2"] == 1e-06
    assert data["optimizer"]["momentum"] == 1e16
    assert data["output"]["root"] == str(rnd.outputs)
    assert data["data"]["path"] == "${oc.env:DATA_ROOT,/data}/train"
    assert data["data"]["cache"] == "${hydra:runtime.cwd}/cache"
    assert data["output"]["keep"] == "yes"
    assert list(data) == ["defaults", "output", "data", "optimizer", "loss", "train"]


def test_an_unchanged_value_keeps_its_spelling(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec)
    write_round_config(spec, rnd, {"momentum": 0.0, "lr": 0.001})
    assert changed_lines(COMMENTED, rnd.config.read_text()) == [
        (
            "  root: 'outputs/base'  # rewritten per round",
            f"  root: '{rnd.outputs}' # rewritten per round",
        ),
    ]


def test_a_changed_float_param_is_written_as_a_float(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec)
    write_round_config(spec, rnd, {"momentum": 1})
    assert "  momentum: 1.0         # an int in the file, a float param" in (
        rnd.config.read_text().splitlines()
    )


def test_no_params_copies_the_baseline_with_only_the_output_rewritten(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec)
    write_round_config(spec, rnd, {})
    assert rnd.config.read_text() == COMMENTED.replace(
        "root: 'outputs/base'  #", f"root: '{rnd.outputs}' #"
    )


def test_without_output_config_path_the_copy_is_byte_identical(tmp_path: Path) -> None:
    spec = make_project(
        tmp_path,
        PROJECT.format(name="base.yaml").replace("output:\n  config_path: output.root\n", ""),
        files={"configs/base.yaml": COMMENTED},
    )
    rnd = round_of(spec)
    assert write_round_config(spec, rnd, {}) == rnd.config
    assert rnd.config.read_bytes() == (tmp_path / "configs" / "base.yaml").read_bytes()


def test_no_baseline_config_writes_nothing(tmp_path: Path) -> None:
    spec = make_project(tmp_path, "version: 1\nlaunch:\n  command: [python, train.py]\n")
    rnd = round_of(spec)
    assert write_round_config(spec, rnd, {}) is None
    assert not rnd.dir.exists()


def test_the_write_is_atomic_and_leaves_no_temp_files(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec)
    write_round_config(spec, rnd, {"lr": 0.2})
    write_round_config(spec, rnd, {"lr": 0.3})
    assert sorted(p.name for p in rnd.dir.iterdir()) == ["config.yaml", "outputs"]
    assert "  lr: 0.3               # tuned" in rnd.config.read_text().splitlines()


def test_a_bad_value_writes_nothing(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec)
    with pytest.raises(InvalidParams, match=r"param 'epochs': must be an integer, got 2\.5"):
        write_round_config(spec, rnd, {"epochs": 2.5})
    with pytest.raises(InvalidParams, match="unknown param 'lrr'"):
        write_round_config(spec, rnd, {"lrr": 0.1})
    assert not rnd.dir.exists()


def test_resolve_params_fills_in_baselines_in_tuning_order(tmp_path: Path) -> None:
    spec = project(tmp_path)
    assert resolve_params(spec, {"epochs": 70, "wd": 2}) == {
        "lr": 0.001,
        "momentum": 0.0,
        "l2": 0.0001,
        "opt": "adam",
        "amp": False,
        "epochs": 70,
        "wd": 2.0,
    }


JSON_BASE = """{
  "output": {"root": "outputs/base"},
  "optimizer": {"name": "adam", "lr": 0.001, "momentum": 0},
  "loss": {"weights": {"l2": 0.0001, "smooth": 0.0}},
  "train": {"epochs": 60, "amp": false, "seed": 0}
}
"""


def test_json_baseline_stays_json(tmp_path: Path) -> None:
    spec = project(tmp_path, JSON_BASE, name="base.json")
    rnd = round_of(spec)
    path = write_round_config(spec, rnd, {"lr": 0.05, "l2": 1e-06, "amp": True, "opt": "sgd"})
    assert path == rnd.dir / "config.json" == round_config_path(spec, rnd)
    data = json.loads(path.read_text())
    assert data == {
        "output": {"root": str(rnd.outputs)},
        "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0},
        "loss": {"weights": {"l2": 1e-06, "smooth": 0.0}},
        "train": {"epochs": 60, "amp": True, "seed": 0},
    }
    assert list(data["optimizer"]) == ["name", "lr", "momentum"]
    assert build_argv(spec, rnd, {})[2:4] == ["--config", str(path)]
    assert build_env(spec, rnd, {}, create=False)["TRAINEE_CONFIG_PATH"] == str(path)


def test_a_dry_run_diffs_the_config_without_writing_it(tmp_path: Path) -> None:
    spec = project(tmp_path)
    rnd = round_of(spec)
    text = round_config_text(spec, rnd, {"epochs": 90})
    assert text is not None
    diff = config_diff(tmp_path / "configs" / "base.yaml", rnd.config, text=text)
    assert [line for line in diff.splitlines() if line[:1] in "+-"] == [
        f"--- {tmp_path / 'configs' / 'base.yaml'}",
        f"+++ {rnd.config}",
        "-  root: 'outputs/base'  # rewritten per round",
        f"+  root: '{rnd.outputs}' # rewritten per round",
        "-  epochs: 60",
        "+  epochs: 90",
    ]
    assert not rnd.dir.exists()
