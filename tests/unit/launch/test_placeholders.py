"""The ``{...}`` variables in argument values, output.flag, launch.env, shell_command and
Hydra's config style: filled in exactly where the contract says, everything else as written."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from trainee.launch.render import build_argv, build_env, build_shell_text, render_round
from trainee.spec import expand
from trainee.spec.args import render_override_value
from trainee.spec.placeholders import placeholders_in

from .projects import make_project, round_of

VALUES = {"outputs_dir": "/o", "round_dir": "/r"}


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("{outputs_dir}", "/o"),
        ("out={outputs_dir}/ckpt", "out=/o/ckpt"),
        ("{{outputs_dir}}", "{outputs_dir}"),  # the documented literal
        ("${oc.env:TRAINEE_ROUND_DIR}", "${oc.env:TRAINEE_ROUND_DIR}"),
        ("${oc.env:X,{outputs_dir}}", "${oc.env:X,{outputs_dir}}"),  # inside ${...}: as written
        ("${a.${b}}/{round_dir}", "${a.${b}}//r"),
        ('{"a": {"b": 1}}', '{"a": {"b": 1}}'),
        ("{unknown} {{unknown}}", "{unknown} {{unknown}}"),
        ("{outputs_dir}${HOME}{round_dir}", "/o${HOME}/r"),
        ("x${", "x${"),
    ],
)
def test_expand_fills_known_names_only(text: str, expanded: str) -> None:
    assert expand(text, VALUES) == expanded


def test_placeholders_in_skips_literals_and_interpolations() -> None:
    assert placeholders_in("{a} {{b}} ${c} ${d.{e}} {f}") == ["a", "f"]


def test_hydra_interpolations_pass_unquoted() -> None:
    assert render_override_value("${oc.env:HOME}") == "${oc.env:HOME}"
    assert render_override_value("${oc.env:HOME}/out") == "${oc.env:HOME}/out"
    assert render_override_value("${x} y") == "'${x} y'"


FLAGS = """\
version: 1
data:
  - path: data
    flag: --data
launch:
  command: [python, train.py]
  baseline_config: base.yaml
  config_flag: --cfg
  args:
    - flag: --name
      value: "run {session_id}/{round_index}"
  env:
    OMP_NUM_THREADS: 1
    NO_COLOR: true
    CKPT: "{outputs_dir}/ckpt"
    LITERAL: "{{outputs_dir}}"
run:
  fixed_args:
    - flag: --log-dir
      value: "{round_dir}/logs"
    - flag: --keep
      value: "${HOME}"
output:
  flag: -o
advanced:
  security_mode: unsafe
"""


def test_flag_style_fills_values_and_passes_the_outputs_folder(tmp_path: Path) -> None:
    spec = make_project(tmp_path, FLAGS, files={"base.yaml": "a: 1\n", "data/x": ""})
    rnd = round_of(spec, session=2, index=3)
    assert build_argv(spec, rnd, {}) == [
        "python",
        "train.py",
        "--cfg",
        str(rnd.config),
        "--name",
        "run session-0002/3",
        "--data",
        str(tmp_path / "data"),
        "--log-dir",
        f"{rnd.dir}/logs",
        "--keep",
        "${HOME}",
        "-o",
        str(rnd.outputs),
    ]
    env = build_env(spec, rnd, {"OMP_NUM_THREADS": "8", "PATH": "/bin"}, create=False)
    assert env["OMP_NUM_THREADS"] == "1" and env["NO_COLOR"] == "true"
    assert env["CKPT"] == f"{rnd.outputs}/ckpt" and env["LITERAL"] == "{outputs_dir}"
    assert env["TRAINEE_ROUND_DIR"] == str(rnd.dir) and env["PATH"] == "/bin"


HYDRA = """\
version: 1
launch:
  command: [python, app.py]
  baseline_config: conf/config.yaml
  config_style: hydra
  args:
    - flag: model
      value: mlp
run:
  fixed_args:
    - flag: +trainer.log_dir
      value: "${oc.env:TRAINEE_ROUND_DIR}/logs"
advanced:
  security_mode: unsafe
"""

HYDRA_TUNING = """\
version: 1
params:
  - name: lr
    override: optimizer.lr
    type: float
    default: 0.1
  - name: extra
    override: ++trainer.extra
    type: int
    default: 2
"""


def test_hydra_style_passes_config_path_name_dir_and_its_output_folders(tmp_path: Path) -> None:
    files = {"conf/config.yaml": "defaults:\n  - model: mlp\n", "conf/model/mlp.yaml": "w: 1\n"}
    spec = make_project(tmp_path, HYDRA, HYDRA_TUNING, files)
    rnd = round_of(spec)
    assert build_argv(spec, rnd, {"lr": 0.5})[2:] == [
        "--config-path",
        str(rnd.dir),
        "--config-name",
        "config",
        "--config-dir",
        str(tmp_path / "conf"),
        "model=mlp",
        "+trainer.log_dir=${oc.env:TRAINEE_ROUND_DIR}/logs",
        f"hydra.run.dir={rnd.outputs}",
        f"hydra.sweep.dir={rnd.outputs}",
        "optimizer.lr=0.5",
        "++trainer.extra=2",
    ]


def test_hydra_output_flag_or_an_explicit_run_dir_is_passed_once(tmp_path: Path) -> None:
    text = HYDRA.replace("advanced:", "output:\n  flag: hydra.run.dir\nadvanced:")
    spec = make_project(tmp_path, text, files={"conf/config.yaml": "a: 1\n"})
    argv = build_argv(spec, round_of(spec), {})
    assert [a for a in argv if a.startswith("hydra.")] == [
        f"hydra.run.dir={round_of(spec).outputs}",
        f"hydra.sweep.dir={round_of(spec).outputs}",
    ]


SHELL = """\
version: 1
advanced:
  security_mode: unsafe
  shell_command: >-
    OUT={outputs_dir}; echo "${{HOME}} ${HOME} {unknown} {{outputs_dir}}" &&
    exec python train.py --out "$OUT" {extra_args}
"""


def test_shell_command_without_launch_command(tmp_path: Path) -> None:
    spec = make_project(tmp_path / "a b", SHELL)
    rnd = round_of(spec)
    text = build_shell_text(spec, rnd, {})
    assert text == (
        f"OUT={shlex.quote(str(rnd.outputs))}; "
        'echo "${{HOME}} ${HOME} {unknown} {outputs_dir}" &&'
        ' exec python train.py --out "$OUT" '
    )
    assert render_round(spec, rnd, {}, base_env={}, write_config=False).argv[2] == text
