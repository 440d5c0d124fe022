"""Table-driven bad inputs: each names file, line, field and reason, and changes nothing.

A case's expected line is the line of its ``#<`` marker unless given explicitly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from trainee.errors import ConfigError
from trainee.spec import load_project, load_project_file, load_tuning_file

from .conftest import marked_line, tree_hash, write

MIN = """\
version: 1
launch:
  command: [python, train.py]
"""

WITH_BASE = """\
version: 1
launch:
  command: [python, train.py]
  baseline_config: configs/base.yaml
"""


@dataclass(frozen=True)
class Bad:
    id: str
    field: str | None
    reason: str
    project: str = MIN
    tuning: str | None = None
    file: str = ".trainee/project.yaml"
    line: int | None = None
    setup: Callable[[Path], None] | None = None
    raw: bytes | None = None


def _outside_link(name: str, target_kind: str = "file") -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        outside = root.parent / f"outside-{name}"
        if target_kind == "file":
            outside.write_text("a: 1\n")
        else:
            outside.mkdir()
        (root / name).symlink_to(outside)

    return setup


def _write_base(text: str) -> Callable[[Path], None]:
    def setup(root: Path) -> None:
        (root / "configs" / "base.yaml").write_text(text)

    return setup


T = ".trainee/tuning.yaml"

CASES: list[Bad] = [
    # -- project.yaml: schema ---------------------------------------------------------------
    Bad(
        "unknown-top-key",
        "lauch",
        "unknown key 'lauch'; did you mean 'launch'?",
        "version: 1\nlauch:  #<\n  command: [python]\n",
    ),
    Bad(
        "unknown-nested-key",
        "run.max_round",
        "did you mean 'max_rounds'?",
        MIN + "run:\n  max_round: 3  #<\n",
    ),
    Bad(
        "unknown-key-no-close-match",
        "advanced.zzz",
        "unknown key 'zzz'; expected one of: security_mode, working_dir",
        MIN + "advanced:\n  zzz: 1  #<\n",
    ),
    Bad(
        "version-2",
        "version",
        "unsupported version 2; must be 1",
        "version: 2  #<\nlaunch:\n  command: [python]\n",
    ),
    Bad(
        "missing-launch",
        "launch.command",
        "missing required field",
        "version: 1\n",
        line=1,
    ),
    Bad(
        "missing-command",
        "launch.command",
        "missing required field",
        "version: 1\nlaunch:  #<\n  environment: uv\n",
    ),
    Bad(
        "empty-command",
        "launch.command",
        "length >= 1",
        "version: 1\nlaunch:\n  command: []  #<\n",
    ),
    Bad(
        "command-empty-string",
        "launch.command[1]",
        "length >= 1",
        "version: 1\nlaunch:\n  command:\n    - python\n    - ''  #<\n",
    ),
    Bad(
        "max-rounds-zero",
        "run.max_rounds",
        "expected `int` >= 1, got 0",
        MIN + "run:\n  max_rounds: 0  #<\n",
    ),
    Bad(
        "max-rounds-string",
        "run.max_rounds",
        "expected `int`, got `str` ('three')",
        MIN + "run:\n  max_rounds: three  #<\n",
    ),
    Bad(
        "timeout-negative",
        "run.timeout_minutes",
        "expected `float` > 0.0",
        MIN + "run:\n  timeout_minutes: -5  #<\n",
    ),
    Bad(
        "timeout-infinite",
        "run.timeout_minutes",
        "must be a finite number > 0",
        MIN + "run:\n  timeout_minutes: .inf  #<\n",
    ),
    Bad(
        "heartbeat-zero",
        "advanced.heartbeat_interval_sec",
        "> 0.0",
        MIN + "advanced:\n  heartbeat_interval_sec: 0  #<\n",
    ),
    Bad(
        "environment-enum",
        "launch.environment",
        "invalid value 'condaa'; expected one of: system, uv, venv, conda (did you mean 'conda'?)",
        MIN + "  environment: condaa  #<\n",
    ),
    Bad(
        "arg-style-enum",
        "launch.arg_style",
        "expected one of: space, equals",
        MIN + "  arg_style: colon  #<\n",
    ),
    Bad(
        "security-mode-enum",
        "advanced.security_mode",
        "expected one of: guarded, unsafe",
        MIN + "advanced:\n  security_mode: paranoid  #<\n",
    ),
    Bad(
        "wandb-enabled-not-bool",
        "advanced.wandb_enabled",
        "expected `bool`, got `str`",
        MIN + "advanced:\n  wandb_enabled: sometimes  #<\n",
    ),
    Bad(
        "args-not-a-list",
        "launch.args",
        "expected `array`, got `object`",
        MIN + "  args:  #<\n    flag: --seed\n",
    ),
    Bad(
        "arg-value-mapping",
        "launch.args[0].value",
        "| str | null`, got `object`",
        MIN + "  args:\n    - flag: --seed\n      value: {a: 1}  #<\n",
    ),
    Bad(
        "signal-type-enum",
        "advanced.signal_sources[1].type",
        "expected one of: stdout, stderr, log_file_mtime, heartbeat_file",
        MIN + "advanced:\n  signal_sources:\n    - type: stdout\n    - type: socket  #<\n",
    ),
    Bad(
        "metric-source-enum",
        "metrics.specs[0].source",
        "expected one of: stdout_regex, log_regex, log_file_regex, jsonl, wandb_summary, "
        "tensorboard, csv",
        MIN + "metrics:\n  specs:\n    - name: acc\n      source: stdout  #<\n"
        "      key_or_pattern: 'acc=(\\d+)'\n",
    ),
    Bad(
        "metric-goal-enum",
        "metrics.specs[0].goal",
        "invalid value 'minimize'; expected one of: min, max",
        MIN + "metrics:\n  specs:\n    - name: acc\n      source: stdout_regex\n"
        "      key_or_pattern: 'acc=(\\d+)'\n      goal: minimize  #<\n",
    ),
    # -- project.yaml: cross-field ----------------------------------------------------------
    Bad(
        "conda-needs-env-name",
        "launch.env_name",
        "required when launch.environment is conda",
        "version: 1\nlaunch:  #<\n  environment: conda\n  command: [python]\n",
    ),
    Bad(
        "env-name-without-conda",
        "launch.env_name",
        "only used with environment: conda (environment is uv)",
        MIN + "  environment: uv\n  env_name: trainer  #<\n",
    ),
    Bad(
        "baseline-missing",
        "launch.baseline_config",
        "'configs/nope.yaml' does not exist",
        MIN + "  baseline_config: configs/nope.yaml  #<\n",
    ),
    Bad(
        "baseline-dotdot",
        "launch.baseline_config",
        "'../base.yaml' escapes the project",
        MIN + "  baseline_config: ../base.yaml  #<\n",
    ),
    Bad(
        "baseline-absolute-outside",
        "launch.baseline_config",
        "'/etc/hostname' is outside the project",
        MIN + "  baseline_config: /etc/hostname  #<\n",
    ),
    Bad(
        "baseline-symlink-escape",
        "launch.baseline_config",
        "through a symlink, outside the project",
        MIN + "  baseline_config: linked.yaml  #<\n",
        setup=_outside_link("linked.yaml"),
    ),
    Bad(
        "baseline-is-a-directory",
        "launch.baseline_config",
        "'configs' is not a file",
        MIN + "  baseline_config: configs  #<\n",
    ),
    Bad(
        "baseline-broken-yaml",
        None,
        "invalid YAML",
        WITH_BASE,
        file="configs/base.yaml",
        line=2,
        setup=_write_base("a: 1\nb: [1,\n"),
    ),
    Bad(
        "data-missing",
        "data[1].path",
        "'datasets' does not exist",
        MIN + "data:\n  - path: data\n  - path: datasets  #<\n",
    ),
    Bad(
        "data-dotdot",
        "data[0].path",
        "'data/../../x' escapes the project",
        MIN + "data:\n  - path: data/../../x  #<\n",
    ),
    Bad(
        "data-symlink-escape",
        "data[0].path",
        "through a symlink",
        MIN + "data:\n  - path: bigdata  #<\n",
        setup=_outside_link("bigdata", "dir"),
    ),
    Bad(
        "working-dir-missing",
        "advanced.working_dir",
        "'src' does not exist",
        MIN + "advanced:\n  working_dir: src  #<\n",
    ),
    Bad(
        "output-needs-baseline",
        "output.config_path",
        "needs launch.baseline_config to be set",
        MIN + "output:\n  config_path: output.root  #<\n",
    ),
    Bad(
        "output-key-not-in-baseline",
        "output.config_path",
        "'output.dir' not found in the baseline config configs/base.yaml",
        WITH_BASE + "output:\n  config_path: output.dir  #<\n",
    ),
    Bad(
        "output-key-is-a-mapping",
        "output.config_path",
        "is not a single value",
        WITH_BASE + "output:\n  config_path: optimizer  #<\n",
    ),
    Bad(
        "regex-does-not-compile",
        "metrics.specs[0].key_or_pattern",
        "invalid regex: missing ), unterminated subpattern",
        MIN + "metrics:\n  specs:\n    - name: acc\n      source: stdout_regex\n"
        "      key_or_pattern: 'acc=(\\d+'  #<\n",
    ),
    Bad(
        "regex-without-group",
        "metrics.specs[0].key_or_pattern",
        "needs a named group (?P<value>...) or at least one capture group",
        MIN + "metrics:\n  specs:\n    - name: acc\n      source: log_regex\n"
        "      key_or_pattern: 'acc=\\d+'  #<\n",
    ),
    Bad(
        "duplicate-metric",
        "metrics.specs[1].name",
        "duplicate metric name 'acc'",
        MIN + "metrics:\n  specs:\n    - name: acc\n      source: stdout_regex\n"
        "      key_or_pattern: 'acc=(\\d+)'\n    - name: acc  #<\n      source: stdout_regex\n"
        "      key_or_pattern: 'acc2=(\\d+)'\n",
    ),
    Bad(
        "jsonl-needs-path",
        "metrics.specs[0].path",
        "required for source jsonl",
        MIN + "metrics:\n  specs:\n    - name: acc  #<\n      source: jsonl\n"
        "      key_or_pattern: eval.acc\n",
    ),
    Bad(
        "stdout-regex-takes-no-path",
        "metrics.specs[0].path",
        "not used by source stdout_regex; remove it",
        MIN + "metrics:\n  specs:\n    - name: acc\n      source: stdout_regex\n"
        "      key_or_pattern: 'acc=(\\d+)'\n      path: .trainee/x.log  #<\n",
    ),
    Bad(
        "guarded-metric-path-outside-trainee",
        "metrics.specs[0].path",
        "'outputs/metrics.jsonl' is outside .trainee/; in guarded mode",
        MIN + "advanced:\n  scratch_cwd: false\nmetrics:\n  specs:\n    - name: acc\n"
        "      source: jsonl\n      key_or_pattern: acc\n      path: outputs/metrics.jsonl  #<\n",
    ),
    Bad(
        "guarded-log-path-outside-trainee",
        "advanced.log_paths[1]",
        "'logs/**/*.log' is outside .trainee/",
        MIN + "advanced:\n  scratch_cwd: false\n  log_paths:\n    - .trainee/logs/*.log\n"
        "    - logs/**/*.log  #<\n",
    ),
    Bad(
        "guarded-signal-path-outside-trainee",
        "advanced.signal_sources[0].paths[0]",
        "'heartbeat.json' is outside .trainee/",
        MIN + "advanced:\n  scratch_cwd: false\n  signal_sources:\n    - type: heartbeat_file\n"
        "      paths:\n        - heartbeat.json  #<\n",
    ),
    Bad(
        "glob-dotdot-after-wildcard",
        "advanced.log_paths[0]",
        "'..' is not allowed after a glob",
        MIN + "advanced:\n  log_paths:\n    - .trainee/*/../../../etc/*.log  #<\n",
    ),
    Bad(
        "unsafe-log-path-escapes",
        "advanced.log_paths[0]",
        "'../elsewhere/*.log' escapes the project",
        MIN + "advanced:\n  security_mode: unsafe\n  log_paths:\n    - ../elsewhere/*.log  #<\n",
    ),
    Bad(
        "unknown-path-placeholder",
        "advanced.log_paths[0]",
        "unknown placeholder {round} in '{round}/train.log'",
        MIN + "advanced:\n  log_paths:\n    - '{round}/train.log'  #<\n",
    ),
    Bad(
        "signal-file-type-needs-paths",
        "advanced.signal_sources[0].paths",
        "signal type log_file_mtime needs paths",
        MIN + "advanced:\n  signal_sources:\n    - type: log_file_mtime  #<\n",
    ),
    Bad(
        "stdout-signal-takes-no-paths",
        "advanced.signal_sources[0].paths",
        "signal type stdout takes no paths",
        MIN + "advanced:\n  signal_sources:\n    - type: stdout\n      paths: [.trainee/a]  #<\n",
    ),
    Bad(
        "shell-command-without-extra-args",
        "advanced.shell_command",
        "must contain {extra_args}",
        MIN + "advanced:\n  shell_command: 'bash run.sh {config_path}'  #<\n",
    ),
    Bad(
        "command-needed-without-shell-command",
        "launch.command",
        "may be left out only when advanced.shell_command is set",
        "version: 1\nlaunch:  #<\n  environment: uv\nadvanced:\n  working_dir: .\n",
    ),
    Bad(
        "env-trainee-name",
        "launch.env.TRAINEE_ROUND_DIR",
        "the TRAINEE_* variables are set by trainee for each round",
        MIN + "  env:\n    TRAINEE_ROUND_DIR: /tmp/x  #<\n",
    ),
    Bad(
        "env-bad-name",
        "launch.env.2FAST",
        "'2FAST' is not an environment variable name",
        MIN + "  env:\n    2FAST: 1  #<\n",
    ),
    Bad(
        "extra-args-in-an-arg",
        "run.fixed_args[0].value",
        "{extra_args} is filled in only in advanced.shell_command",
        MIN + "run:\n  fixed_args:\n    - flag: --x\n      value: '{extra_args}'  #<\n",
    ),
    Bad(
        "output-flag-also-a-fixed-arg",
        "output.flag",
        "'-o' is also set by run.fixed_args[0]; give the outputs folder in one place",
        MIN + "run:\n  fixed_args:\n    - flag: -o\n      value: out\noutput:\n  flag: -o  #<\n",
    ),
    Bad(
        "output-flag-is-a-tunable",
        "params[0].flag",
        "param 'out': '--out' is already set by output.flag",
        MIN + "output:\n  flag: --out\n",
        tuning="params:\n  - name: out\n    flag: --out  #<\n    type: choice\n"
        "    choices: [a, b]\n",
        file=T,
    ),
    Bad(
        "config-flag-with-hydra",
        "launch.config_flag",
        "not used with config_style hydra",
        WITH_BASE + "  config_style: hydra\n  config_flag: --cfg  #<\n",
    ),
    Bad(
        "config-flag-without-baseline",
        "launch.config_flag",
        "passes launch.baseline_config, which is not set",
        MIN + "  config_flag: --cfg  #<\n",
    ),
    Bad(
        "hydra-flag-tunable",
        "params[0].flag",
        "with launch.config_style hydra the tunables are overrides",
        MIN + "  config_style: hydra\n",
        tuning="params:\n  - name: lr\n    flag: --lr  #<\n    type: float\n",
        file=T,
    ),
    Bad(
        "hydra-run-dir-tunable",
        "params[0].override",
        "'hydra.run.dir' is already set by config_style hydra",
        MIN + "  config_style: hydra\n",
        tuning="params:\n  - name: d\n    override: hydra.run.dir  #<\n    type: choice\n"
        "    choices: [a, b]\n",
        file=T,
    ),
    # -- tuning.yaml ------------------------------------------------------------------------
    Bad(
        "param-type-enum",
        "params[0].type",
        "invalid value 'double'; expected one of: float, int, bool, choice",
        tuning="params:\n  - name: lr\n    flag: --lr\n    type: double  #<\n",
        file=T,
    ),
    Bad(
        "param-unknown-key",
        "params[1].min_val",
        "did you mean 'min_value'?",
        tuning="params:\n  - name: a\n    flag: --a\n    type: float\n"
        "  - name: b\n    flag: --b\n    type: float\n    min_val: 1  #<\n",
        file=T,
    ),
    Bad(
        "param-two-sources",
        "params[0].config_path",
        "param 'lr': exactly one of flag, config_path, override is required (got flag and "
        "config_path)",
        WITH_BASE,
        tuning="params:\n  - name: lr\n    flag: --lr\n    config_path: optimizer.lr  #<\n"
        "    type: float\n",
        file=T,
    ),
    Bad(
        "param-no-source",
        "params[0]",
        "param 'lr': exactly one of flag, config_path, override is required (got none)",
        tuning="params:\n  - name: lr  #<\n    type: float\n",
        file=T,
    ),
    Bad(
        "param-min-above-max",
        "params[0].min_value",
        "param 'lr': min_value 0.5 > max_value 0.1",
        tuning="params:\n  - name: lr\n    flag: --lr\n    type: float\n    min_value: 0.5  #<\n"
        "    max_value: 0.1\n",
        file=T,
    ),
    Bad(
        "param-default-below-min",
        "params[0].default",
        "param 'lr': default 1e-06 < min_value 1e-05",
        tuning="params:\n  - name: lr\n    flag: --lr\n    type: float\n    default: 0.000001  #<\n"
        "    min_value: 0.00001\n",
        file=T,
    ),
    Bad(
        "int-param-float-default",
        "params[0].default",
        "param 'bs': must be an integer, got 16.5",
        tuning="params:\n  - name: bs\n    flag: --bs\n    type: int\n    default: 16.5  #<\n",
        file=T,
    ),
    Bad(
        "bool-param-with-bounds",
        "params[0].min_value",
        "param 'amp': min_value does not apply to type bool",
        tuning="params:\n  - name: amp\n    flag: --amp\n    type: bool\n    min_value: 0  #<\n",
        file=T,
    ),
    Bad(
        "choice-without-choices",
        "params[0].choices",
        "param 'opt': type choice needs choices",
        tuning="params:\n  - name: opt  #<\n    override: optimizer\n    type: choice\n",
        file=T,
    ),
    Bad(
        "choices-need-type-choice",
        "params[0].choices",
        "param 'lr': choices need type: choice (type is float)",
        tuning="params:\n  - name: lr\n    flag: --lr\n    type: float\n    choices: [0.1, 0.01]  #<\n",
        file=T,
    ),
    Bad(
        "choice-default-not-in-choices",
        "params[0].default",
        "param 'opt': default 'sgd' is not one of the choices ['adam', 'adamw']",
        tuning="params:\n  - name: opt\n    override: optimizer\n    type: choice\n"
        "    choices: [adam, adamw]\n    default: sgd  #<\n",
        file=T,
    ),
    Bad(
        "log-scale-needs-positive-min",
        "params[0].min_value",
        "param 'lr': log scale needs values > 0, got 0.0",
        tuning="params:\n  - name: lr\n    flag: --lr\n    type: float\n    min_value: 0  #<\n"
        "    log: true\n",
        file=T,
    ),
    Bad(
        "duplicate-param-name",
        "params[1].name",
        "duplicate param name 'lr'",
        tuning="params:\n  - name: lr\n    flag: --lr\n    type: float\n"
        "  - name: lr  #<\n    flag: --lr2\n    type: float\n",
        file=T,
    ),
    Bad(
        "param-flag-is-a-fixed-arg",
        "params[0].flag",
        "param 'seed': '--seed' is already set by launch.args[0]; constant arguments are not "
        "tunable",
        MIN + "  args:\n    - flag: --seed\n      value: 7\n",
        tuning="params:\n  - name: seed\n    flag: --seed  #<\n    type: int\n",
        file=T,
    ),
    Bad(
        "config-param-needs-baseline",
        "params[0].config_path",
        "param 'lr': config-backed params need launch.baseline_config in project.yaml",
        tuning="params:\n  - name: lr\n    config_path: optimizer.lr  #<\n    type: float\n",
        file=T,
    ),
    Bad(
        "config-param-missing-in-baseline",
        "params[0].config_path",
        "param 'theta': 'fit.term_weights.phi' not found in the baseline config configs/base.yaml",
        WITH_BASE,
        tuning="params:\n  - name: theta\n    config_path: fit.term_weights.phi  #<\n"
        "    type: float\n",
        file=T,
    ),
    Bad(
        "config-param-duplicates-baseline-default",
        "params[0].default",
        "param 'lr': default 0.01 differs from 0.1 at 'optimizer.lr' in the baseline config "
        "configs/base.yaml; do not duplicate baseline defaults",
        WITH_BASE,
        tuning="params:\n  - name: lr\n    config_path: optimizer.lr\n    type: float\n"
        "    default: 0.01  #<\n",
        file=T,
    ),
    Bad(
        "config-param-wrong-type-in-baseline",
        "params[0].config_path",
        "param 'opt': baseline value 'adam' of 'optimizer.name' in configs/base.yaml is not a float",
        WITH_BASE,
        tuning="params:\n  - name: opt\n    config_path: optimizer.name  #<\n    type: float\n",
        file=T,
    ),
    Bad(
        "config-param-baseline-out-of-range",
        "params[0].config_path",
        "param 'theta': baseline value 5.0 > max_value 2.0",
        WITH_BASE,
        tuning="params:\n  - name: theta\n    config_path: fit.term_weights.theta  #<\n"
        "    type: float\n    max_value: 2.0\n",
        file=T,
    ),
    Bad(
        "output-config-path-is-tunable",
        "params[0].config_path",
        "param 'out': 'output.root' overlaps output.config_path 'output.root' of project.yaml",
        WITH_BASE + "output:\n  config_path: output.root\n",
        tuning="params:\n  - name: out\n    config_path: output.root  #<\n    type: choice\n"
        "    choices: [outputs/base, outputs/b]\n",
        file=T,
    ),
    Bad(
        "tuning-version",
        "version",
        "unsupported version 3; must be 1",
        tuning="version: 3  #<\nparams: []\n",
        file=T,
    ),
    # -- file level -------------------------------------------------------------------------
    Bad(
        "yaml-syntax-error",
        None,
        "invalid YAML",
        "version: 1\nlaunch:\n  command: [python, train.py\nrun:  #<\n  max_rounds: 3\n",
    ),
    Bad(
        "duplicate-key",
        None,
        'found duplicate key "max_rounds"',
        MIN + "run:\n  max_rounds: 3\n  max_rounds: 4  #<\n",
    ),
    Bad(
        "yaml-alias",
        None,
        "YAML aliases (*name) are not allowed",
        "version: 1\nlaunch:\n  command: &cmd [python]\n  args:\n    - flag: --x\n"
        "      value: *cmd  #<\n",
    ),
    Bad("empty-file", None, "the file is empty", "# nothing here\n\n", line=1),
    Bad(
        "top-level-list",
        None,
        "the top level must be a mapping, got a list",
        "- version: 1\n",
        line=1,
    ),
    Bad(
        "not-utf8",
        None,
        "not valid UTF-8 (byte 0xff",
        raw=b"version: 1\nlaunch:\n  command: [python, \xff]\n",
        line=3,
    ),
    Bad(
        "huge-file",
        None,
        "larger than 1048576 bytes; refusing to read it",
        raw=b"version: 1\n" + b"# padding\n" * 110_000,
    ),
    Bad(
        "control-character",
        None,
        "unacceptable character #x0007",
        raw=b"version: 1\nlaunch:\n  command: [python]\nrun: \x07\n",
        line=4,
    ),
    Bad(
        "yaml-tag",
        "launch.env_name",
        "unsupported YAML value of type TaggedScalar",
        MIN + "  env_name: !!python/name:os.system x  #<\n",
    ),
    Bad(
        "date-value",
        "metrics.prompt",
        "dates and timestamps are not supported here; quote the value",
        MIN + "metrics:\n  prompt: 2024-01-01  #<\n",
    ),
    Bad(
        "non-string-key",
        "run",
        "keys must be strings, got 1",
        MIN + "run:\n  1: 2  #<\n",
    ),
]


def _expected_line(case: Bad) -> int | None:
    if case.line is not None:
        return case.line
    if case.raw is not None:
        return None
    text = case.tuning if case.file == T else case.project
    assert text is not None
    return marked_line(text)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_is_reported_precisely_and_changes_nothing(project: Path, case: Bad) -> None:
    pfile = project / ".trainee" / "project.yaml"
    if case.raw is not None:
        pfile.write_bytes(case.raw)
    else:
        write(pfile, case.project)
    if case.tuning is not None:
        write(project / ".trainee" / "tuning.yaml", case.tuning)
    if case.setup is not None:
        case.setup(project)
    before = tree_hash(project.parent)

    with pytest.raises(ConfigError) as info:
        load_project(project)

    err = info.value
    file = str(project / case.file)
    line = _expected_line(case)
    assert err.file == file
    assert err.line == line
    assert err.field == case.field
    assert err.reason is not None and case.reason in err.reason, err.reason
    where = file if line is None else f"{file}:{line}"
    prefix = f"{where}: {case.field}: " if case.field else f"{where}: "
    assert str(err) == prefix + err.reason
    assert err.to_wire()["data"]["details"]["file"] == file
    assert tree_hash(project.parent) == before


def test_there_are_at_least_25_cases() -> None:
    assert len(CASES) >= 25
    assert len({c.id for c in CASES}) == len(CASES)


def test_missing_project_file_names_it(project: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_project(project)
    assert info.value.file == str(project / ".trainee" / "project.yaml")
    assert "run `trainee init` first" in str(info.value)


def test_missing_root_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="project root does not exist"):
        load_project(tmp_path / "nope")


def test_schema_only_loaders_skip_cross_field_checks(project: Path) -> None:
    pfile = write(project / ".trainee" / "project.yaml", MIN + "  baseline_config: nope.yaml\n")
    assert load_project_file(pfile).launch.baseline_config == "nope.yaml"
    tfile = write(project / ".trainee" / "tuning.yaml", "params:\n  - name: a\n    type: int\n")
    assert load_tuning_file(tfile).params[0].flag is None
    with pytest.raises(ConfigError) as info:
        load_tuning_file(write(project / "t2.yaml", "params:\n  - name: 1bad\n    type: int\n"))
    assert info.value.field == "params[0].name"
    assert info.value.line == 2


def test_log_path_inside_a_symlinked_trainee_dir_is_accepted(project: Path) -> None:
    # .trainee/ paths are checked against the real .trainee folder, wherever it lives
    real = project.parent / "scratch-trainee"
    (project / ".trainee").rename(real)
    (project / ".trainee").symlink_to(real)
    write(real / "project.yaml", MIN + "advanced:\n  log_paths: [.trainee/logs/*.log]\n")
    assert load_project(project).advanced.log_paths == (".trainee/logs/*.log",)


def test_alias_bomb_in_a_baseline_config_does_not_hang(project: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 30):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    lines.append("output:\n  root: out")
    (project / "configs" / "base.yaml").write_text("\n".join(lines) + "\n")
    write(project / ".trainee" / "project.yaml", WITH_BASE + "output:\n  config_path: a29\n")
    with pytest.raises(ConfigError, match="alias expansion"):
        load_project(project)


def test_project_file_that_is_a_directory_is_a_config_error(project: Path) -> None:
    (project / ".trainee" / "project.yaml").mkdir()
    with pytest.raises(ConfigError, match="is a directory, not a file"):
        load_project(project)
