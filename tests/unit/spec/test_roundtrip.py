"""save_project_files: every field round-trips, the user's text survives, errors change nothing."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import msgspec
import pytest

from trainee.errors import ConfigError
from trainee.spec import (
    AdvancedSpec,
    ArgSpec,
    ArgStyle,
    DataSpec,
    Environment,
    Goal,
    LaunchSpec,
    MetricSource,
    MetricSpec,
    MetricsSpec,
    OutputSpec,
    ParamSpec,
    ParamType,
    ProjectFileSpec,
    RunSpec,
    SecurityMode,
    SignalSourceSpec,
    SignalType,
    TuningFileSpec,
    load_project,
    load_project_file,
    load_tuning_file,
    save_project_files,
    struct_to_yaml_data,
)

from .conftest import readme_example, tree_hash, write


def full_project() -> ProjectFileSpec:
    """A project.yaml with every field set away from its default."""
    return ProjectFileSpec(
        version=1,
        data=(DataSpec(path="data", flag="--data-root"), DataSpec(path="data/train.csv")),
        launch=LaunchSpec(
            environment=Environment.CONDA,
            env_name="trainer",
            command=("python", "train.py", "--fast"),
            baseline_config="configs/base.yaml",
            args=(
                ArgSpec(flag="--seed", value=7),
                ArgSpec(flag="--amp"),
                ArgSpec(flag="trainer.precision", value="bf16"),
                ArgSpec(flag="--ratio", value=0.5),
                ArgSpec(flag="--det", value=True),
            ),
            arg_style=ArgStyle.EQUALS,
        ),
        run=RunSpec(
            max_rounds=7,
            timeout_minutes=12.5,
            fixed_args=(ArgSpec(flag="--max-iter", value=1000),),
        ),
        output=OutputSpec(config_path="output.root"),
        metrics=MetricsSpec(
            specs=(
                MetricSpec(
                    name="val_loss",
                    source=MetricSource.STDOUT_REGEX,
                    key_or_pattern=r"val_loss=(?P<value>-?\d+(?:\.\d+)?)",
                    goal=Goal.MIN,
                    required=True,
                ),
                MetricSpec(
                    name="acc",
                    source=MetricSource.LOG_REGEX,
                    key_or_pattern=r"acc: (\d+\.\d+)",
                    goal=Goal.MAX,
                ),
                MetricSpec(
                    name="f1",
                    source=MetricSource.LOG_FILE_REGEX,
                    key_or_pattern=r"f1 (?P<value>[0-9.]+) # eval",
                    path="{round_dir}/eval.log",
                    goal=Goal.MAX,
                ),
                MetricSpec(
                    name="eval/bleu",
                    source=MetricSource.JSONL,
                    key_or_pattern="eval.bleu",
                    path="{outputs_dir}/metrics.jsonl",
                    goal=Goal.MAX,
                ),
                MetricSpec(
                    name="summary_loss",
                    source=MetricSource.WANDB_SUMMARY,
                    key_or_pattern="loss",
                    path=".trainee/wandb/**/wandb-summary.json",
                ),
            ),
            prompt="Prefer val_loss.\nBreak ties on acc: higher wins.",
        ),
        advanced=AdvancedSpec(
            security_mode=SecurityMode.UNSAFE,
            working_dir="data",
            heartbeat_interval_sec=2.5,
            signal_sources=(
                SignalSourceSpec(type=SignalType.STDOUT),
                SignalSourceSpec(type=SignalType.STDERR),
                SignalSourceSpec(type=SignalType.LOG_FILE_MTIME, paths=(".trainee/logs/*.log",)),
                SignalSourceSpec(type=SignalType.HEARTBEAT_FILE, paths=("{trainee_dir}/hb.json",)),
            ),
            log_paths=(".trainee/logs/**/*.log", "{session_dir}/round-*.log"),
            wandb_enabled=True,
            tuning_prompt="Change one thing at a time: it's cheaper.",
            shell_command="bash run.sh --config {config_path} {extra_args}",
        ),
    )


def full_tuning() -> TuningFileSpec:
    """A tuning.yaml using every param field and every source/type."""
    return TuningFileSpec(
        version=1,
        params=(
            ParamSpec(
                name="lr",
                flag="--lr",
                type=ParamType.FLOAT,
                default=0.001,
                min_value=0.00001,
                max_value=0.01,
                log=True,
                description="step size",
            ),
            ParamSpec(
                name="opt_lr",
                config_path="optimizer.lr",
                type=ParamType.FLOAT,
                min_value=0.0001,
                max_value=10.0,
            ),
            ParamSpec(name="epochs", override="+trainer.epochs", type=ParamType.INT, default=3),
            ParamSpec(name="amp", flag="--use-amp", type=ParamType.BOOL, default=False),
            ParamSpec(
                name="optimizer",
                override="optimizer",
                type=ParamType.CHOICE,
                choices=("adam", "sgd", "lion"),
                default="adam",
            ),
            ParamSpec(
                name="batch", flag="--batch", type=ParamType.CHOICE, choices=(16, 32, 0.5, True)
            ),
        ),
    )


def replace_at(struct: Any, path: tuple[str | int, ...], value: Any) -> Any:
    """``struct`` with the field at ``path`` set to ``value`` (Structs and tuples)."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        items = list(struct)
        items[head] = replace_at(items[head], rest, value)
        return tuple(items)
    return msgspec.structs.replace(struct, **{head: replace_at(getattr(struct, head), rest, value)})


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    removed = [d for d in diff if d.startswith("-") and not d.startswith("---")]
    added = [d for d in diff if d.startswith("+") and not d.startswith("+++")]
    return removed, added


def files(root: Path) -> tuple[Path, Path]:
    return root / ".trainee" / "project.yaml", root / ".trainee" / "tuning.yaml"


def test_every_field_round_trips_through_a_new_file(project: Path) -> None:
    save_project_files(project, full_project(), full_tuning())
    pfile, tfile = files(project)
    assert load_project_file(pfile) == full_project()
    assert load_tuning_file(tfile) == full_tuning()
    spec = load_project(project)
    assert spec.to_project_file() == full_project()
    assert spec.to_tuning_file() == full_tuning()
    # every non-default field is written
    text = pfile.read_text()
    for key in (
        "env_name",
        "arg_style",
        "heartbeat_interval_sec",
        "wandb_enabled",
        "shell_command",
    ):
        assert f"{key}:" in text


EDITS: list[tuple[str, tuple[str | int, ...], Any]] = [
    ("project", ("launch", "env_name"), "other"),
    ("project", ("launch", "arg_style"), ArgStyle.SPACE),
    ("project", ("launch", "command", 2), "--slow"),
    ("project", ("launch", "baseline_config"), "./configs/base.yaml"),
    ("project", ("launch", "args", 0, "value"), 8),
    ("project", ("launch", "args", 0, "flag"), "--rng-seed"),
    ("project", ("launch", "args", 3, "value"), 0.25),
    ("project", ("launch", "args", 4, "value"), False),
    ("project", ("data", 0, "flag"), "--data"),
    ("project", ("data", 1, "path"), "data"),
    ("project", ("run", "max_rounds"), 9),
    ("project", ("run", "timeout_minutes"), 30.0),
    ("project", ("run", "fixed_args", 0, "value"), 2000),
    ("project", ("output", "config_path"), "logging.dir"),
    ("project", ("metrics", "specs", 0, "name"), "valid_loss"),
    ("project", ("metrics", "specs", 0, "goal"), Goal.MAX),
    ("project", ("metrics", "specs", 0, "required"), False),
    ("project", ("metrics", "specs", 1, "source"), MetricSource.STDOUT_REGEX),
    ("project", ("metrics", "specs", 1, "key_or_pattern"), r"accuracy: (\d+)"),
    ("project", ("metrics", "specs", 3, "path"), "{outputs_dir}/m.jsonl"),
    ("project", ("advanced", "security_mode"), SecurityMode.GUARDED),
    ("project", ("advanced", "working_dir"), "."),
    ("project", ("advanced", "heartbeat_interval_sec"), 10.0),
    ("project", ("advanced", "signal_sources", 2, "paths", 0), ".trainee/x/*.log"),
    ("project", ("advanced", "log_paths", 0), ".trainee/other/*.log"),
    ("project", ("advanced", "wandb_enabled"), False),
    ("project", ("advanced", "tuning_prompt"), "one param per round"),
    ("project", ("advanced", "shell_command"), "bash go.sh {extra_args}"),
    ("tuning", ("params", 0, "name"), "learning_rate"),
    ("tuning", ("params", 0, "flag"), "--learning-rate"),
    ("tuning", ("params", 0, "default"), 0.002),
    ("tuning", ("params", 0, "min_value"), 0.0001),
    ("tuning", ("params", 0, "max_value"), 0.05),
    ("tuning", ("params", 0, "log"), False),
    ("tuning", ("params", 0, "description"), "the step size of Adam"),
    ("tuning", ("params", 1, "config_path"), "fit.term_weights.theta"),
    ("tuning", ("params", 2, "override"), "trainer.max_epochs"),
    ("tuning", ("params", 3, "type"), ParamType.CHOICE),
    ("tuning", ("params", 4, "choices", 1), "adamw"),
]


@pytest.mark.parametrize(("which", "path", "value"), EDITS, ids=lambda v: str(v))
def test_changing_one_field_rewrites_one_line(
    project: Path, which: str, path: tuple[str | int, ...], value: Any
) -> None:
    save_project_files(project, full_project(), full_tuning())
    pfile, tfile = files(project)
    ptext, ttext = pfile.read_text(), tfile.read_text()
    prj, tun = full_project(), full_tuning()
    if which == "project":
        prj = replace_at(prj, path, value)
    else:
        tun = replace_at(tun, path, value)
    if path == ("params", 3, "type"):
        tun = replace_at(tun, ("params", 3, "choices"), (False, True))

    save_project_files(project, prj, tun)

    assert load_project_file(pfile) == prj
    assert load_tuning_file(tfile) == tun
    target, before = (pfile, ptext) if which == "project" else (tfile, ttext)
    other, other_before = (tfile, ttext) if which == "project" else (pfile, ptext)
    assert other.read_text() == other_before
    removed, added = changed_lines(before, target.read_text())
    if path == ("params", 3, "type"):
        assert removed == ["-    type: bool"]
        assert added == ["+    type: choice", "+    choices:", "+      - false", "+      - true"]
    elif path == ("metrics", "specs", 0, "goal"):
        assert (removed, added) == ([], ["+      goal: max"])  # min was left out as the default
    else:
        assert len(removed) == 1 and len(added) == 1, (removed, added)


COMMENTED = """\
# Trainee project config (hand-written)
version: 1

data:
  - path: data        # the CSVs
    flag: --data-root

launch:
  environment: system # python from PATH
  command:
    - python
    - train.py
  baseline_config: "configs/base.yaml"

run:
  max_rounds: 3       # keep it short
  timeout_minutes: 60

# how we judge a round
metrics:
  specs:
    - name: val_loss
      source: stdout_regex
      key_or_pattern: 'val_loss=(?P<value>-?\\d+(?:\\.\\d+)?)'
      goal: min
  prompt: 'Use val_loss.'

advanced:
  security_mode: guarded
  log_paths:
    - '{trainee_dir}/logs/*.log'
# end of file"""


def test_comments_key_order_and_quoting_survive_a_one_field_change(project: Path) -> None:
    pfile = write(project / ".trainee" / "project.yaml", COMMENTED)
    spec = load_project(project)
    bumped = replace_at(spec.to_project_file(), ("run", "max_rounds"), 5)

    save_project_files(project, bumped, spec.to_tuning_file())

    after = pfile.read_text()
    removed, added = changed_lines(COMMENTED, after)
    assert removed == ["-  max_rounds: 3       # keep it short"]
    assert added == ["+  max_rounds: 5       # keep it short"]
    assert not after.endswith("\n")  # the missing trailing newline stays missing
    # tuning.yaml did not exist; it is created with no params
    assert files(project)[1].read_text() == "version: 1\nparams: []\n"


def test_readme_example_survives_a_save_byte_for_byte(project: Path) -> None:
    pfile = write(project / ".trainee" / "project.yaml", readme_example("project.yaml"))
    tfile = write(project / ".trainee" / "tuning.yaml", readme_example("tuning.yaml"))
    before = tree_hash(project)
    inodes = (pfile.stat().st_ino, tfile.stat().st_ino)
    spec = load_project(project)

    save_project_files(project, spec.to_project_file(), spec.to_tuning_file())

    assert tree_hash(project) == before
    assert (pfile.stat().st_ino, tfile.stat().st_ino) == inodes  # not rewritten at all


def test_only_the_changed_file_is_written(project: Path) -> None:
    save_project_files(project, full_project(), full_tuning())
    pfile, tfile = files(project)
    t_ino = tfile.stat().st_ino
    save_project_files(project, replace_at(full_project(), ("run", "max_rounds"), 2), full_tuning())
    assert tfile.stat().st_ino == t_ino
    assert load_project_file(pfile).run.max_rounds == 2


def test_new_files_omit_defaults(project: Path) -> None:
    prj = ProjectFileSpec(launch=LaunchSpec(command=("python", "train.py")))
    save_project_files(project, prj, TuningFileSpec())
    pfile, tfile = files(project)
    assert pfile.read_text() == "version: 1\nlaunch:\n  command:\n    - python\n    - train.py\n"
    assert tfile.read_text() == "version: 1\nparams: []\n"
    assert struct_to_yaml_data(prj) == {"version": 1, "launch": {"command": ["python", "train.py"]}}


def test_adding_and_removing_sections_and_items_keeps_other_comments(project: Path) -> None:
    pfile = write(project / ".trainee" / "project.yaml", COMMENTED)
    tfile = write(
        project / ".trainee" / "tuning.yaml",
        """\
        version: 1
        params:
          # the learning rate
          - name: lr
            flag: --lr   # argparse flag
            type: float
          # from the config
          - name: opt_lr
            config_path: optimizer.lr
            type: float
        """,
    )
    spec = load_project(project)
    prj = spec.to_project_file()
    prj = replace_at(prj, ("launch", "environment"), Environment.CONDA)
    prj = replace_at(prj, ("launch", "env_name"), "ml")
    prj = replace_at(prj, ("output",), OutputSpec(config_path="output.root"))
    prj = replace_at(prj, ("data",), ())
    tun = spec.to_tuning_file()
    tun = msgspec.structs.replace(
        tun,
        params=(
            tun.params[0],
            ParamSpec(name="bs", flag="--bs", type=ParamType.INT, default=32, min_value=1),
        ),
    )

    save_project_files(project, prj, tun)

    assert load_project_file(pfile) == prj
    assert load_tuning_file(tfile) == tun
    ptext, ttext = pfile.read_text(), tfile.read_text()
    assert "  environment: conda  # python from PATH\n  env_name: ml\n" in ptext
    assert "data: []\n\nlaunch:\n" in ptext
    # the new section goes after run:, and the comment introducing metrics: stays with it
    assert (
        "  timeout_minutes: 60\noutput:\n  config_path: output.root\n\n"
        "# how we judge a round\nmetrics:\n"
    ) in ptext
    assert "max_rounds: 3       # keep it short" in ptext
    assert ptext.endswith("    - '{trainee_dir}/logs/*.log'\n# end of file")
    assert "flag: --lr   # argparse flag" in ttext
    assert "opt_lr" not in ttext


def test_saving_over_a_broken_file_replaces_it(project: Path) -> None:
    pfile = write(project / ".trainee" / "project.yaml", "launch: [\n")
    save_project_files(project, full_project(), full_tuning())
    assert load_project_file(pfile) == full_project()


SAVE_ERRORS: list[tuple[str, Any, Any, str, str, str]] = [
    (
        "schema",
        replace_at(full_project(), ("run", "max_rounds"), 0),
        full_tuning(),
        "project.yaml",
        "run.max_rounds",
        "expected `int` >= 1",
    ),
    (
        "conda-without-env",
        replace_at(full_project(), ("launch", "env_name"), None),
        full_tuning(),
        "project.yaml",
        "launch.env_name",
        "required when launch.environment is conda",
    ),
    (
        "baseline-duplicate",
        full_project(),
        replace_at(full_tuning(), ("params", 1, "default"), 0.5),
        "tuning.yaml",
        "params[1].default",
        "do not duplicate baseline defaults",
    ),
    (
        "guarded-path",
        replace_at(
            replace_at(full_project(), ("advanced", "security_mode"), SecurityMode.GUARDED),
            ("advanced", "log_paths", 0),
            "logs/*.log",
        ),
        full_tuning(),
        "project.yaml",
        "advanced.log_paths[0]",
        "outside .trainee/",
    ),
    (
        "nul-in-argv",
        replace_at(full_project(), ("launch", "command", 1), "train\x00.py"),
        full_tuning(),
        "project.yaml",
        "launch.command[1]",
        "contains a NUL byte",
    ),
    (
        "choice-default",
        full_project(),
        replace_at(full_tuning(), ("params", 4, "default"), "rmsprop"),
        "tuning.yaml",
        "params[4].default",
        "is not one of the choices",
    ),
]


@pytest.mark.parametrize(
    ("case", "prj", "tun", "file", "field", "reason"), SAVE_ERRORS, ids=[c[0] for c in SAVE_ERRORS]
)
def test_invalid_save_changes_nothing(
    project: Path, case: str, prj: Any, tun: Any, file: str, field: str, reason: str
) -> None:
    save_project_files(project, full_project(), full_tuning())
    before = tree_hash(project)
    with pytest.raises(ConfigError) as info:
        save_project_files(project, prj, tun)
    err = info.value
    assert err.file == str(project / ".trainee" / file)
    assert (err.field or "") == field
    assert err.reason is not None and reason in err.reason
    if field:
        text = (project / ".trainee" / file).read_text()
        assert err.line is not None and 1 <= err.line <= text.count("\n") + 1
    assert tree_hash(project) == before


def test_save_reports_lines_of_the_text_it_would_write(project: Path) -> None:
    save_project_files(project, full_project(), full_tuning())
    bad = replace_at(full_project(), ("advanced", "shell_command"), "bash x.sh")
    with pytest.raises(ConfigError) as info:
        save_project_files(project, bad, full_tuning())
    lines = (project / ".trainee" / "project.yaml").read_text().splitlines()
    assert info.value.line is not None
    assert lines[info.value.line - 1].strip().startswith("shell_command:")
