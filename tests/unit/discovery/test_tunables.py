"""Tunable suggestions: sources, exclusions, bounds, applying them to tuning.yaml."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainee.discovery.init import init_project
from trainee.discovery.scan import discover
from trainee.discovery.tunables import (
    ConstraintSuggestion,
    Suggestion,
    SuggestionReport,
    apply_suggestions,
    discover_tunables,
    suggest_tunables,
    suggest_tunables_report,
)
from trainee.errors import ConfigError, InvalidParams
from trainee.spec import load_project, load_project_file, load_tuning_file

from .conftest import LAYOUTS, copy_example, snapshot, write


def report_for(root: Path, limit: int = 32) -> SuggestionReport:
    project = load_project_file(root / ".trainee" / "project.yaml")
    return suggest_tunables_report(root, project, discover(root), limit=limit)


def by_name(suggestions: list[Suggestion]) -> dict[str, Suggestion]:
    return {s.name: s for s in suggestions}


def project_yaml(root: Path, body: str) -> None:
    write(root / ".trainee" / "project.yaml", body)


# -- the examples ------------------------------------------------------------------------------


def test_mlp_flags_suggestions(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    init_project(root)
    got = by_name(report_for(root).suggestions)
    assert list(got) == ["lr", "weight_decay", "batch_size", "hidden"]
    lr = got["lr"]
    assert (lr.source, lr.flag, lr.type, lr.default) == ("flag", "--lr", "float", 0.001)
    assert (lr.min_value, lr.max_value, lr.log) == (0.0001, 0.01, True)
    assert lr.reason == (
        "train.py argparse option --lr (float, default 0.001): learning-rate name -> log "
        "scale, bounds x/10..x*10"
    )
    assert lr.description == "Adam learning rate (default 1e-3)"
    bs = got["batch_size"]
    assert (bs.type, bs.default, bs.choices) == ("choice", 16, [8, 12, 16, 24, 32])  # even
    wd = got["weight_decay"]  # the README's good value 3e-3 is inside the range
    assert (wd.default, wd.min_value, wd.max_value, wd.log) == (1e-05, 1e-06, 0.1, True)


def test_yaml_config_suggestions(tmp_path: Path) -> None:
    root = copy_example("yaml-config", tmp_path)
    init_project(root, baseline_config="configs/base.yaml")
    report = report_for(root)
    got = by_name(report.suggestions)
    assert report.entrypoint == "train.py"
    assert report.baseline_config == "configs/base.yaml"
    assert {s.source for s in got.values()} == {"config"}
    assert list(got)[:4] == ["lr", "l2", "batch_size", "momentum"]
    assert (got["lr"].config_path, got["lr"].min_value, got["lr"].max_value) == (
        "optimizer.lr",
        0.01,
        1.0,
    )
    momentum = got["momentum"]
    assert (momentum.min_value, momentum.max_value, momentum.log) == (0.0, 0.99, False)
    assert momentum.description.startswith("heavy-ball momentum")
    choice = got["optimizer_name"]
    assert (choice.type, choice.choices, choice.default) == (
        "choice",
        ["sgd", "momentum", "adam"],
        "momentum",
    )
    # config-backed params never duplicate the baseline value in tuning.yaml
    assert all(s.to_param().default is None for s in got.values())
    excluded = {e.key: e.reason for e in report.excluded}
    assert "train.epochs" in excluded and "budget" in excluded["train.epochs"]
    assert "train.seed" in excluded and "--config" in excluded


# -- exclusions (table-driven) ----------------------------------------------------------------

EXCLUSION_TRAIN = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--config", default="configs/base.yaml")
p.add_argument("--lr", type=float, default=0.01)
p.add_argument("--hidden", type=int, default=64)
p.add_argument("--max-steps", type=int, default=100)
p.add_argument("--warmup-steps", type=int, default=10)
p.add_argument("--data-dir", default="data")
p.add_argument("--seed", type=int, default=0)
p.add_argument("--output-dir", default="out")
p.add_argument("--out", default="out")
p.add_argument("--log-dir", default="logs")
p.add_argument("--log-interval", type=int, default=10)
p.add_argument("--save-every", type=int, default=100)
p.add_argument("--resume", action="store_true")
p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
p.add_argument("--num-workers", type=int, default=4)
p.add_argument("--port", type=int, default=29500)
p.add_argument("--local-rank", type=int, default=0)
p.add_argument("--world-size", type=int, default=1)
p.add_argument("--wandb-project", default="x")
p.add_argument("--eval-interval", type=int, default=50)
p.add_argument("--dropout", type=float, default=0.1)
"""

EXCLUSION_CONFIG = """
optimizer:
  lr: 0.001
  momentum: 0.9
  weight_decay: 0.01
optim:
  weight_decay: 0.05
runtime:
  root: outputs/base
  scale: 2.0
model:
  width: 128
  ckpt_path: weights/best.pt
train:
  epochs: 10
  seed: 3
  batch_size: 32
data:
  noise: 0.2
"""

EXCLUSION_PROJECT = """
version: 1
data:
  - path: data
    flag: --data-dir
launch:
  command: [python, train.py]
  baseline_config: configs/base.yaml
  args:
    - flag: --hidden
      value: 32
    - flag: --momentum
      value: 0.9
    - flag: optim.weight_decay
      value: 0.05
run:
  fixed_args:
    - flag: --max-steps
      value: 100
    - flag: --warmup-steps
      value: 10
output:
  config_path: runtime.root
"""

# (candidate key, source, words expected in the reason)
EXCLUDED = [
    ("runtime.root", "config", "output.config_path"),
    ("--hidden", "flag", "launch.args[0]"),
    ("optimizer.momentum", "config", "launch.args[1]"),
    ("optim.weight_decay", "config", "launch.args[2]"),
    ("--max-steps", "flag", "run.fixed_args[0]"),
    ("--warmup-steps", "flag", "run.fixed_args[1]"),
    ("--data-dir", "flag", "data[0].flag"),
    ("--config", "flag", "config file"),
    ("--seed", "flag", "seed"),
    ("train.seed", "config", "seed"),
    ("train.epochs", "config", "budget"),
    ("--output-dir", "flag", "output"),
    ("--out", "flag", "output"),
    ("--log-dir", "flag", "logging"),
    ("--log-interval", "flag", "logging"),
    ("--save-every", "flag", "checkpointing"),
    ("--resume", "flag", "checkpointing"),
    ("--device", "flag", "hardware"),
    ("--num-workers", "flag", "parallelism"),
    ("--port", "flag", "networking"),
    ("--local-rank", "flag", "distributed"),
    ("--world-size", "flag", "distributed"),
    ("--wandb-project", "flag", "tracking"),
    ("--eval-interval", "flag", "evaluation"),
    ("model.ckpt_path", "config", "checkpointing"),
    ("data.noise", "config", "'data'"),
    ("--lr", "flag", "config also has 'lr'"),
]


@pytest.fixture
def exclusion_project(tmp_path: Path) -> Path:
    root = tmp_path / "excl"
    write(root / "train.py", EXCLUSION_TRAIN)
    write(root / "configs" / "base.yaml", EXCLUSION_CONFIG)
    (root / "data").mkdir()
    project_yaml(root, EXCLUSION_PROJECT)
    load_project(root)  # the fixture itself is a valid project
    return root.resolve()


def _keys(s: Suggestion) -> set[str]:
    return {k for k in (s.flag, s.config_path, s.override, s.name) if k}


@pytest.mark.parametrize(("key", "source", "why"), EXCLUDED, ids=[e[0] for e in EXCLUDED])
def test_never_suggested(exclusion_project: Path, key: str, source: str, why: str) -> None:
    report = report_for(exclusion_project)
    assert all(key not in _keys(s) for s in report.suggestions), key
    reasons = [e.reason for e in report.excluded if e.key == key and e.source == source]
    assert reasons, f"{key} was neither suggested nor reported as excluded"
    assert why in reasons[0]


def test_exclusion_project_still_suggests_the_real_knobs(exclusion_project: Path) -> None:
    # the exclusion table is not vacuous: the same project does yield suggestions
    got = by_name(report_for(exclusion_project).suggestions)
    assert set(got) == {"lr", "weight_decay", "batch_size", "width", "scale", "dropout"}
    assert got["lr"].config_path == "optimizer.lr"
    assert got["weight_decay"].config_path == "optimizer.weight_decay"
    assert got["dropout"].flag == "--dropout"


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_prepare_never_lists_excluded_fields(
    make_layout: Callable[[str], Path], layout: str
) -> None:
    root = make_layout(layout)
    init_project(root)
    result = discover_tunables(root, apply=True)
    assert result.skipped == []
    spec = load_project(root)
    fixed = {a.flag for a in (*spec.launch.args, *spec.run.fixed_args)}
    fixed |= {d.flag for d in spec.data if d.flag}
    for t in spec.tunables:
        assert t.param.flag not in fixed
        assert "seed" not in t.name and "dir" not in t.name and "epoch" not in t.name


# -- bounds (table-driven) ----------------------------------------------------------------------

BOUNDS: list[tuple[str, Any, str, Any, Any, bool]] = [
    # key, value, type, min, max, log
    ("lr", 0.001, "float", 0.0001, 0.01, True),
    ("learning_rate", 3e-4, "float", 3e-5, 0.003, True),
    ("weight_decay", 0.0, "float", 0.0, 0.1, False),
    ("weight_decay", 0.01, "float", 1e-05, 0.1, True),  # x/10..x*10 widened to the common range
    ("weight_decay", 0.1, "float", 1e-05, 1.0, True),
    ("dropout", 0.1, "float", 0.0, 0.5, False),
    ("dropout", 0, "float", 0.0, 0.5, False),
    ("attn_dropout", 0.7, "float", 0.0, 0.99, False),
    ("momentum", 0.9, "float", 0.0, 0.99, False),
    ("beta2", 0.999, "float", 0.99, 0.9999, False),
    ("ema_decay", 0.95, "float", 0.5, 0.995, False),
    ("hidden_size", 256, "int", 128, 512, True),
    ("num_layers", 4, "int", 2, 8, False),
    ("n_head", 1, "int", 1, 2, False),
    ("warmup_ratio", 0.1, "float", 0.0, 0.5, False),
    ("grad_clip", 1.0, "float", 0.1, 10.0, True),
    ("max_grad_norm", 0.0, "float", 0.0, 10.0, False),
    ("eps", 1e-8, "float", 1e-9, 1e-7, True),
    ("temperature", 0.07, "float", 0.007, 0.7, True),
    ("gradient_accumulation_steps", 1, "int", 1, 8, False),
    ("kl_weight", 0.5, "float", 0.05, 5.0, True),
    ("something", 2.5, "float", 0.25, 25.0, True),
    ("something", -2.0, "float", -20.0, -0.2, False),
    ("mixup_prob", 1.0, "float", 0.0, 1.0, False),  # a probability stays in 0..1
    ("count", 7, "int", 3, 14, False),
    ("flag", True, "bool", None, None, False),
]


@pytest.mark.parametrize(("key", "value", "type_", "lo", "hi", "log"), BOUNDS)
def test_bounds(
    tmp_path: Path, key: str, value: Any, type_: str, lo: Any, hi: Any, log: bool
) -> None:
    write(tmp_path / "train.py", "")
    write(tmp_path / "base.yaml", f"block:\n  {key}: {str(value).lower()}\n")
    project_yaml(tmp_path, "launch:\n  command: [python, train.py]\n  baseline_config: base.yaml\n")
    got = report_for(tmp_path).suggestions
    assert len(got) == 1, [e.reason for e in report_for(tmp_path).excluded]
    s = got[0]
    assert (s.type, s.min_value, s.max_value, s.log) == (type_, lo, hi, log)
    assert type(s.min_value) is type(s.max_value) or None in (s.min_value, s.max_value)
    assert s.reason.startswith(f"base.yaml block.{key} (")
    result = apply_suggestions(tmp_path, got)
    assert result.written == [s.name], result.skipped


def test_negative_int_default_is_not_suggested(tmp_path: Path) -> None:
    write(tmp_path / "train.py", "")
    write(tmp_path / "base.yaml", "top_k: -1\n")
    project_yaml(tmp_path, "launch:\n  command: [python, train.py]\n  baseline_config: base.yaml\n")
    report = report_for(tmp_path)
    assert report.suggestions == []
    assert "negative" in report.excluded[0].reason


def test_flag_option_ranges_narrow_bounds(make_layout: Callable[[str], Path]) -> None:
    root = make_layout("click")
    init_project(root)
    got = by_name(report_for(root).suggestions)
    assert got["batch_size"].choices == [16, 24, 32, 48]  # even, within IntRange(1, 48)
    assert "option range max 48" in got["batch_size"].reason
    assert (got["weight_decay"].min_value, got["weight_decay"].max_value) == (0.0, 0.1)
    root = make_layout("typer")
    init_project(root)
    got = by_name(report_for(root).suggestions)
    assert (got["hidden_size"].min_value, got["hidden_size"].max_value) == (128, 300)


def test_boolean_flags(make_layout: Callable[[str], Path]) -> None:
    root = make_layout("system")
    init_project(root)
    got = by_name(report_for(root).suggestions)
    # --augment defaults to true: the settable form is --no-augment
    aug = got["no_augment"]
    assert (aug.flag, aug.type, aug.default) == ("--no-augment", "bool", False)
    assert "sets augment to false" in aug.description
    assert "amp" not in got  # runtime numerics
    root = make_layout("click")
    init_project(root)
    got = by_name(report_for(root).suggestions)
    assert got["no_shuffle"].flag == "--no-shuffle"
    choice = got["optimizer"]
    assert (choice.type, choice.choices, choice.default) == ("choice", ["adam", "sgd"], "adam")


def test_configurator_bools_use_equals_style(make_layout: Callable[[str], Path]) -> None:
    root = make_layout("configurator")
    init_project(root)
    report = report_for(root)
    got = by_name(report.suggestions)
    assert list(got) == ["learning_rate", "batch_size", "dropout"]
    assert got["learning_rate"].flag == "--learning_rate"
    assert got["learning_rate"].description == "max learning rate"
    excluded = {e.key: e.reason for e in report.excluded}
    # init pins compile off on a machine without a GPU; with one it is left out as numerics
    assert any(w in excluded["--compile"] for w in ("launch.args", "runtime numerics"))
    assert "run.fixed_args" in excluded["--max_iters"]


def test_hydra_overrides(make_layout: Callable[[str], Path]) -> None:
    root = make_layout("hydra")
    init_project(root)
    report = report_for(root)
    got = by_name(report.suggestions)
    assert {s.source for s in got.values()} == {"override"}
    assert got["optimizer"].choices == ["adam", "sgd"]
    assert (got["optimizer"].override, got["optimizer"].default) == ("optimizer", "adam")
    assert got["model"].choices == ["large", "small"]
    # the group's option may change per round: its keys are ++ (add or override)
    assert got["lr"].override == "++optimizer.lr"
    assert "valid while optimizer=adam" in got["lr"].description
    assert (got["betas_1"].override, got["betas_1"].min_value) == ("++optimizer.betas.1", 0.99)
    assert got["gradient_clip_val"].override == "trainer.gradient_clip_val"
    assert got["gradient_clip_val"].description == "clip the global grad norm"
    assert got["hidden_size"].override == "++model.hidden_size"
    excluded = {e.key: e.reason for e in report.excluded}
    assert {"trainer.max_epochs", "seed", "output_dir"} <= set(excluded)
    # init put the Hydra budget into run.fixed_args as an override
    assert "run.fixed_args[0]" in excluded["trainer.max_epochs"]
    result = apply_suggestions(root, report.suggestions)
    assert result.skipped == []
    assert load_project(root).tunable("lr") is not None


def test_hydra_group_chosen_by_the_command(make_layout: Callable[[str], Path]) -> None:
    root = make_layout("hydra")
    write(
        root / "conf" / "model" / "large.yaml",
        "hidden_size: 512\nnum_layers: 8\nact: ${oc.env:ACT}\n",
    )
    project_yaml(
        root,
        "launch:\n  command: [python, train.py]\n  args:\n    - {flag: model, value: large}\n",
    )
    report = report_for(root)
    got = by_name(report.suggestions)
    excluded = {e.key: e.reason for e in report.excluded}
    # the chosen option's keys, plain (the option is pinned), never the other option's
    assert (got["hidden_size"].override, got["hidden_size"].default) == ("model.hidden_size", 512)
    assert got["num_layers"].default == 8 and "dropout" not in got
    assert "model" not in got and "the command chooses model=large" in excluded["model"]
    assert "an interpolation" in excluded["model.act"]


def test_limit_and_ranking(exclusion_project: Path) -> None:
    report = report_for(exclusion_project, limit=2)
    assert [s.name for s in report.suggestions] == ["lr", "weight_decay"]
    assert sum("beyond the limit of 2" in e.reason for e in report.excluded) == 4
    with pytest.raises(InvalidParams):
        report_for(exclusion_project, limit=0)


def test_name_clashes_get_a_parent_prefix(tmp_path: Path) -> None:
    write(tmp_path / "train.py", "")
    write(
        tmp_path / "base.yaml", "enc:\n  dropout: 0.1\ndec:\n  dropout: 0.2\nact:\n  type: relu\n"
    )
    project_yaml(tmp_path, "launch:\n  command: [python, train.py]\n  baseline_config: base.yaml\n")
    names = [s.name for s in report_for(tmp_path).suggestions]
    assert names == ["dropout", "dec_dropout"]


def test_json_baseline_and_numeric_lists(tmp_path: Path) -> None:
    write(tmp_path / "train.py", "")
    write(tmp_path / "cfg.json", '{"optim": {"lr": 0.01, "betas": [0.9, 0.98]}, "tags": ["a"]}')
    project_yaml(tmp_path, "launch:\n  command: [python, train.py]\n  baseline_config: cfg.json\n")
    got = by_name(report_for(tmp_path).suggestions)
    assert set(got) == {"lr", "betas_0", "betas_1"}
    assert got["betas_1"].config_path == "optim.betas.1"
    assert apply_suggestions(tmp_path, list(got.values())).skipped == []


def test_literal_annotation_gives_choices(tmp_path: Path) -> None:
    write(
        tmp_path / "train.py",
        """
        from dataclasses import dataclass
        from typing import Literal

        @dataclass
        class Cfg:
            activation: Literal["relu", "gelu", "tanh"] = "relu"
        """,
    )
    write(tmp_path / "base.yaml", "model:\n  activation: gelu\n  note: free text\n")
    project_yaml(tmp_path, "launch:\n  command: [python, train.py]\n  baseline_config: base.yaml\n")
    report = report_for(tmp_path)
    got = by_name(report.suggestions)
    assert got["activation"].choices == ["relu", "gelu", "tanh"]
    assert {e.key: e.reason for e in report.excluded}["model.note"] == (
        "free text without known choices"
    )


def test_no_entrypoint_match_is_a_note(tmp_path: Path) -> None:
    project_yaml(tmp_path, "launch:\n  command: [bash, run.sh]\n")
    report = report_for(tmp_path)
    assert report.suggestions == [] and report.entrypoint is None
    assert report.notes == ["no entrypoint matches launch.command; no flag suggestions"]


def test_shell_command_names_the_entrypoint(make_layout: Callable[[str], Path]) -> None:
    root = make_layout("system")
    project_yaml(
        root,
        """
        launch:
          command: [python, train.py]
        advanced:
          security_mode: unsafe
          shell_command: "cd {project_root} && python train.py {extra_args}"
        """,
    )
    assert report_for(root).entrypoint == "train.py"


# -- applying -------------------------------------------------------------------------------


def test_apply_adds_only_new_names_and_keeps_comments(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    init_project(root)
    tfile = root / ".trainee" / "tuning.yaml"
    pfile = root / ".trainee" / "project.yaml"
    project_before = pfile.read_bytes()
    write(
        tfile,
        """
        # my own notes
        version: 1
        params:
          - name: learning   # hand-picked
            flag: --lr
            type: float
            default: 0.001
        """,
    )
    suggestions = suggest_tunables(root, load_project_file(pfile), discover(root))
    result = apply_suggestions(root, suggestions)
    assert result.written == ["weight_decay", "batch_size", "hidden"]
    assert [(s.name, s.reason) for s in result.skipped] == [
        ("lr", "already in tuning.yaml as 'learning'")
    ]
    text = tfile.read_text()
    assert text.startswith("# my own notes\n")
    assert "- name: learning   # hand-picked" in text
    assert pfile.read_bytes() == project_before
    assert [p.name for p in load_tuning_file(tfile).params] == [
        "learning",
        "weight_decay",
        "batch_size",
        "hidden",
    ]
    # a second apply has nothing new and does not touch the file
    before = tfile.read_bytes()
    again = apply_suggestions(root, suggestions)
    assert again.written == [] and tfile.read_bytes() == before


def test_apply_replace(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    init_project(root)
    suggestions = suggest_tunables(
        root, load_project_file(root / ".trainee" / "project.yaml"), discover(root)
    )
    apply_suggestions(root, suggestions[:1])
    result = apply_suggestions(root, suggestions[2:], replace=True)
    assert result.written == ["batch_size", "hidden"]
    assert [t.name for t in load_project(root).tunables] == ["batch_size", "hidden"]


def test_apply_skips_a_param_the_project_rejects(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    init_project(root)
    bad = Suggestion(
        name="lr",
        source="flag",
        flag="--lr",
        type="float",
        default=0.5,
        min_value=0.0,
        max_value=0.1,
        reason="hand-made",
    )
    good = Suggestion(name="hidden", source="flag", flag="--hidden", type="int", reason="x")
    result = apply_suggestions(root, [bad, good])
    assert result.written == ["hidden"]
    assert len(result.skipped) == 1 and "max_value" in result.skipped[0].reason


def test_apply_skips_a_constraint_the_loader_would_refuse(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    init_project(root)
    hidden = Suggestion(name="hidden", source="flag", flag="--hidden", type="int", reason="x")
    batch = Suggestion(
        name="batch_size", source="flag", flag="--batch-size", type="int", default=16, reason="x"
    )
    result = apply_suggestions(
        root,
        [hidden, batch],
        constraints=[
            ConstraintSuggestion(expr="hidden % 2 == 0", reason="assert in train.py"),
            ConstraintSuggestion(expr="batch_size % 8 == 0 or batch_size == true", reason="x"),
            ConstraintSuggestion(expr="batch_size % 3 == 0", reason="x"),
        ],
    )
    assert result.written == ["hidden", "batch_size"]
    assert result.constraints == ["batch_size % 8 == 0 or batch_size == true"]
    assert [(s.name, s.reason.split(";")[0].split(" (")[0]) for s in result.skipped] == [
        ("hidden % 2 == 0", "param 'hidden' has no baseline value"),
        (
            "batch_size % 3 == 0",
            "the baseline breaks it: `batch_size % 3 == 0` does not hold for batch_size=16",
        ),
    ]
    assert load_project(root).constraints[0].text == "batch_size % 8 == 0 or batch_size == true"


def test_discover_tunables_needs_a_valid_project(tmp_path: Path) -> None:
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match="trainee init"):
        discover_tunables(tmp_path, apply=True)
    assert snapshot(tmp_path) == before


def test_discover_tunables_without_apply_writes_nothing(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    init_project(root)
    before = snapshot(root)
    result = discover_tunables(root, replace=True)
    assert [s.name for s in result.suggestions] == ["lr", "weight_decay", "batch_size", "hidden"]
    assert not result.applied and result.written == []
    assert snapshot(root) == before
    applied = discover_tunables(root, apply=True, limit=2)
    assert applied.applied and applied.written == ["lr", "weight_decay"]


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        ("something", 0.0, "no known range (default 0.0)"),
        ("warmup_steps", 0, "a schedule length tied to the training budget"),
        ("margin", 0, "no known range (default 0)"),
        ("sample_only", False, "is a mode switch"),
        ("eval_only", False, "is a mode switch"),
        ("init_from", "scratch", "names where training starts"),
        ("resume_from", "last.ckpt", "names where training starts"),
        ("mode", "train", "is a mode switch"),
        ("train", True, "whether a stage runs at all"),
        ("input_size", 784, "fixed by the data's shape"),
        ("num_classes", 10, "fixed by the data's shape"),
        ("_partial_", True, "framework directive"),
        ("min_epochs", 1, "a training budget"),
        ("accel", True, "hardware placement"),
        ("kd_temperature", 1.0, "knowledge distillation"),
    ],
)
def test_mode_switches_shapes_and_unbounded_numbers_are_left_out(
    tmp_path: Path, key: str, value: Any, why: str
) -> None:
    write(tmp_path / "train.py", "")
    write(tmp_path / "base.yaml", f"block:\n  {key}: {str(value).lower()}\n")
    project_yaml(tmp_path, "launch:\n  command: [python, train.py]\n  baseline_config: base.yaml\n")
    report = report_for(tmp_path)
    assert report.suggestions == []
    assert [e.key for e in report.excluded] == [f"block.{key}"]
    assert why in report.excluded[0].reason


def test_mode_valued_choices_are_left_out(tmp_path: Path) -> None:
    write(
        tmp_path / "train.py",
        """
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--stage", choices=["train", "eval", "predict"], default="train")
        p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
        p.parse_args()
        """,
    )
    project_yaml(tmp_path, "launch:\n  command: [python, train.py]\n")
    report = report_for(tmp_path)
    assert [s.name for s in report.suggestions] == ["optimizer"]
    assert [(e.key, e.reason) for e in report.excluded] == [
        ("--stage", "'stage' is a mode switch (values eval, predict, train)")
    ]


def test_options_of_a_feature_that_is_off_are_left_out(tmp_path: Path) -> None:
    write(
        tmp_path / "train.py",
        """
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--model-ema", action="store_true", help="keep an EMA of the weights")
        p.add_argument("--model-ema-decay", type=float, default=0.9998)
        p.add_argument("--lr", type=float, default=0.1)
        p.parse_args()
        """,
    )
    project_yaml(tmp_path, "launch:\n  command: [python, train.py]\n")
    report = report_for(tmp_path)
    assert [s.name for s in report.suggestions] == ["lr", "model_ema"]
    excluded = {e.key: e.reason for e in report.excluded}
    assert excluded == {
        "--model-ema-decay": "used only when --model-ema is on, and it is off by default"
    }


@pytest.mark.parametrize(
    ("primary", "offered"), [(None, False), ("val_loss", False), ("val_acc", True)]
)
def test_label_smoothing_only_when_the_primary_metric_is_no_loss(
    tmp_path: Path, primary: str | None, offered: bool
) -> None:
    write(tmp_path / "train.py", "")
    write(tmp_path / "base.yaml", "label_smoothing: 0.1\n")
    metrics = (
        f"metrics:\n  specs:\n    - {{name: {primary}, source: stdout_regex, "
        f"key_or_pattern: '{primary}=(?P<value>\\S+)'}}\n"
        if primary
        else ""
    )
    project_yaml(
        tmp_path, "launch:\n  command: [python, train.py]\n  baseline_config: base.yaml\n" + metrics
    )
    report = report_for(tmp_path)
    if offered:
        s = report.suggestions[0]
        assert (s.name, s.min_value, s.max_value) == ("label_smoothing", 0.0, 0.5)
    else:
        assert report.suggestions == []
        assert "label smoothing changes how the loss is computed" in report.excluded[0].reason
