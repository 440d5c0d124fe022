"""Loading good files: the spec's examples, defaults, the compiled ProjectSpec."""

from __future__ import annotations

import ast
from pathlib import Path

import msgspec
import pytest

from trainee.errors import ConfigError
from trainee.spec import (
    ArgStyle,
    Environment,
    Goal,
    LaunchSpec,
    MetricSource,
    ParamSource,
    ParamSpec,
    ParamType,
    ProjectFileSpec,
    ProjectSpec,
    SecurityMode,
    SignalType,
    TuningFileSpec,
    check_project,
    load_project,
)

from .conftest import readme_example, write

REPO = Path(__file__).resolve().parents[3]


def test_readme_examples_load_exactly_as_written(project: Path) -> None:
    write(project / ".trainee" / "project.yaml", readme_example("project.yaml"))
    write(project / ".trainee" / "tuning.yaml", readme_example("tuning.yaml"))

    spec = load_project(project)

    assert spec.project_root == str(project)
    assert spec.trainee_dir == str(project / ".trainee")
    assert spec.baseline_config == str(project / "configs" / "base.yaml")
    assert spec.working_dir == str(project)
    assert spec.data[0].path == "data" and spec.data[0].flag == "--data-root"
    assert spec.launch.environment is Environment.CONDA
    assert spec.launch.env_name == "trainer"
    assert spec.launch.command == ("python", "train.py")
    assert spec.launch.args[0].flag == "--seed" and spec.launch.args[0].value == 7
    assert spec.launch.arg_style is ArgStyle.SPACE
    assert spec.run.max_rounds == 3
    assert spec.run.timeout_minutes == 60.0
    assert spec.run.fixed_args[0].value == 1000
    assert spec.output.config_path == "output.root"
    (metric,) = spec.metrics.specs
    assert metric.source is MetricSource.STDOUT_REGEX and metric.goal is Goal.MIN
    assert metric.required is True
    assert metric.key_or_pattern == r"val_loss=(?P<value>-?\d+(?:\.\d+)?)"
    assert spec.metrics.prompt.startswith("Use val_loss")
    assert spec.advanced.security_mode is SecurityMode.GUARDED
    assert [s.type for s in spec.advanced.signal_sources] == [
        SignalType.STDOUT,
        SignalType.LOG_FILE_MTIME,
    ]
    assert spec.advanced.log_paths == (".trainee/logs/**/*.log", ".trainee/runs/**/*.log")
    assert spec.advanced.heartbeat_interval_sec == 5.0
    assert spec.advanced.wandb_enabled is False

    lr, theta = spec.tunables
    assert (lr.name, lr.source, lr.key, lr.baseline) == ("lr", ParamSource.FLAG, "--lr", 0.001)
    assert (lr.min_value, lr.max_value) == (0.00001, 0.01)
    assert theta.source is ParamSource.CONFIG_PATH
    assert theta.key == "fit.term_weights.theta"
    assert theta.baseline == 5.0 and isinstance(theta.baseline, float)
    assert theta.param.default is None
    assert spec.tunable("theta_weight") is theta


def test_minimal_project_gets_the_documented_defaults(project: Path) -> None:
    write(project / ".trainee" / "project.yaml", "launch:\n  command: [python, train.py]\n")
    spec = load_project(project)
    assert spec.version == 1
    assert spec.launch.environment is Environment.SYSTEM
    assert spec.run.max_rounds == 3
    assert spec.run.timeout_minutes == 60.0
    assert spec.advanced.security_mode is SecurityMode.GUARDED
    assert spec.advanced.working_dir == "."
    assert spec.advanced.heartbeat_interval_sec == 5.0
    assert spec.advanced.wandb_enabled is False
    assert spec.baseline_config is None
    assert spec.tunables == ()  # tuning.yaml missing = no params


def test_project_spec_is_frozen_and_encodes(project: Path) -> None:
    write(project / ".trainee" / "project.yaml", readme_example("project.yaml"))
    write(project / ".trainee" / "tuning.yaml", readme_example("tuning.yaml"))
    spec = load_project(project)
    with pytest.raises(AttributeError):
        spec.run = spec.run  # type: ignore[misc]
    decoded = msgspec.json.decode(msgspec.json.encode(spec), type=ProjectSpec)
    assert decoded == spec
    assert spec.to_project_file() == ProjectFileSpec(
        data=spec.data,
        launch=spec.launch,
        run=spec.run,
        output=spec.output,
        metrics=spec.metrics,
        advanced=spec.advanced,
    )
    assert spec.to_tuning_file().params == tuple(t.param for t in spec.tunables)


def test_tunable_kinds_and_normalized_values(project: Path) -> None:
    write(
        project / ".trainee" / "project.yaml",
        "launch:\n  command: [python, train.py]\n  baseline_config: configs/base.yaml\n",
    )
    write(
        project / ".trainee" / "tuning.yaml",
        """\
        params:
          - name: lr
            override: optimizer.lr
            type: float
            default: 1
            min_value: 0
            max_value: 2
          - name: layers
            config_path: model.layers
            type: int
            min_value: 1
            max_value: 8
            default: 4
          - name: dropout
            config_path: model.dropout
            type: bool
          - name: opt
            config_path: optimizer.name
            type: choice
            choices: [adam, sgd]
            description: which optimizer
          - name: wd
            flag: --wd
            type: float
            log: true
            min_value: 0.000001
            max_value: 0.1
        """,
    )
    spec = load_project(project)
    lr, layers, dropout, opt, wd = spec.tunables
    assert lr.source is ParamSource.OVERRIDE and lr.key == "optimizer.lr"
    assert lr.baseline == 1.0 and isinstance(lr.baseline, float)
    assert isinstance(lr.min_value, float) and isinstance(lr.max_value, float)
    assert layers.baseline == 4 and isinstance(layers.baseline, int)
    assert dropout.baseline is True and dropout.type is ParamType.BOOL
    assert opt.baseline == "adam" and opt.choices == ("adam", "sgd")
    assert opt.description == "which optimizer"
    assert wd.baseline is None and wd.log is True


def test_check_project_on_structs_reports_without_lines(project: Path) -> None:
    write(project / "configs" / "base.yaml", "a: 1\n")
    project_file = msgspec.convert(
        {"launch": {"command": ["python"], "environment": "conda"}}, ProjectFileSpec
    )
    with pytest.raises(ConfigError) as info:
        check_project(project, project_file, TuningFileSpec())
    assert info.value.line is None
    assert info.value.field == "launch.env_name"
    assert str(info.value) == (
        f"{project / '.trainee' / 'project.yaml'}: launch.env_name: "
        "required when launch.environment is conda"
    )


def test_check_project_runs_schema_checks_on_structs_built_in_code(project: Path) -> None:
    bad = ProjectFileSpec(launch=LaunchSpec(command=("python",), environment="nope"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        check_project(project, bad, TuningFileSpec())
    assert info.value.field == "launch.environment"
    assert info.value.reason == ("invalid value 'nope'; expected one of: system, uv, venv, conda")
    tuning = TuningFileSpec(params=(ParamSpec(name="x", flag="--x", type="float", max_value=True),))  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        check_project(project, ProjectFileSpec(launch=LaunchSpec(command=("p",))), tuning)
    assert info.value.field == "params[0].max_value"
    assert info.value.file == str(project / ".trainee" / "tuning.yaml")


def test_a_json_baseline_config_feeds_config_backed_params(project: Path) -> None:
    (project / "configs" / "base.json").write_text(
        '{"optimizer": {"lr": 0.1, "betas": [0.9, 0.99]}, "output": {"dir": "out"}}'
    )
    write(
        project / ".trainee" / "project.yaml",
        "launch:\n  command: [python, train.py]\n  baseline_config: configs/base.json\n"
        "output:\n  config_path: output.dir\n",
    )
    write(
        project / ".trainee" / "tuning.yaml",
        "params:\n  - name: lr\n    config_path: optimizer.lr\n    type: float\n"
        "  - name: beta2\n    config_path: optimizer.betas.1\n    type: float\n",
    )
    spec = load_project(project)
    assert spec.baseline_config == str(project / "configs" / "base.json")
    assert [t.baseline for t in spec.tunables] == [0.1, 0.99]


@pytest.mark.parametrize("name", ["mlp-flags", "yaml-config"])
def test_the_repository_examples_load(name: str) -> None:
    root = REPO / "examples" / name
    spec = load_project(root)
    assert spec.tunables


@pytest.mark.parametrize("module", ["__init__", "files", "compile", "args"])
def test_only_yamlio_imports_ruamel_at_import_time(module: str) -> None:
    """ruamel (and yamlio) may only be imported inside functions of the light modules."""
    source = (REPO / "trainee" / "spec" / f"{module}.py").read_text()
    tree = ast.parse(source)
    top_level: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            top_level += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            top_level.append(node.module)
    assert not [m for m in top_level if m.startswith("ruamel") or m.endswith("yamlio")]
    assert "ruamel" not in "".join(top_level)
