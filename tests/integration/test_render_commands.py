"""Rendered rounds run for real: argv order and styles, environments, shell templates and
the environment a real child sees."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.unit.launch.projects import make_project, round_of
from trainee.launch.layout import RoundLayout
from trainee.launch.render import RenderedRound, render_round
from trainee.launch.sandbox import wrap
from trainee.spec import ProjectSpec

PY_DIR = str(Path(sys.executable).parent)
SHOW_ENV = (
    "import json, os, sys\n"
    "print(json.dumps({'argv': sys.argv[1:], 'exe': sys.executable, 'cwd': os.getcwd(),"
    " 'env': dict(os.environ)}))\n"
)

FIVE = """\
version: 1
data:
  - path: data
    flag: --data-root
launch:
  environment: {environment}
  command: [{python}, show.py]
  baseline_config: configs/base.yaml
  arg_style: {style}
  args:
    - flag: --seed
      value: 7
    - flag: --verbose
    - flag: trainer.devices
      value: 2
    - flag: --name
      value: two words
run:
  fixed_args:
    - flag: --epochs
      value: 200
    - flag: --shuffle
      value: true
output:
  config_path: output.root
advanced:
  security_mode: unsafe
"""

TUNING = """\
version: 1
params:
  - name: lr
    flag: --lr
    type: float
    default: 0.001
  - name: momentum
    config_path: optimizer.momentum
    type: float
  - name: amp
    flag: --amp
    type: bool
    default: false
  - name: opt
    override: optimizer.name
    type: choice
    choices: [adam, sgd, "two words"]
    default: adam
  - name: layers
    override: +model.layers
    type: int
"""

BASE = "output:\n  root: outputs/base\noptimizer:\n  momentum: 0.9\n"


def five(root: Path, *, environment: str = "system", style: str = "space") -> ProjectSpec:
    return make_project(
        root,
        FIVE.format(environment=environment, python="python", style=style),
        TUNING,
        {"show.py": SHOW_ENV, "configs/base.yaml": BASE, "data/a.csv": "1\n"},
    )


def base_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{PY_DIR}:{env.get('PATH', os.defpath)}"
    env.update(extra)
    return env


def run(rendered: RenderedRound) -> dict[str, Any]:
    proc = subprocess.run(
        rendered.argv,
        env=rendered.env,
        cwd=rendered.cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    out: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return out


def expected_args(spec: ProjectSpec, rnd: RoundLayout, style: str) -> list[str]:
    root = Path(spec.project_root)
    if style == "space":
        return [
            "--config",
            str(rnd.config),
            "--seed",
            "7",
            "--verbose",
            "trainer.devices=2",
            "--name",
            "two words",
            "--data-root",
            str(root / "data"),
            "--epochs",
            "200",
            "--shuffle",
            "--lr",
            "0.0003",
            "--amp",
            "optimizer.name='two words'",
            "+model.layers=4",
        ]
    return [
        f"--config={rnd.config}",
        "--seed=7",
        "--verbose",
        "trainer.devices=2",
        "--name=two words",
        f"--data-root={root / 'data'}",
        "--epochs=200",
        "--shuffle=True",
        "--lr=0.0003",
        "--amp=True",
        "optimizer.name='two words'",
        "+model.layers=4",
    ]


PARAMS: dict[str, Any] = {"lr": 3e-4, "amp": True, "opt": "two words", "layers": 4}


@pytest.mark.parametrize("style", ["space", "equals"])
def test_all_five_groups_reach_the_script_in_order(tmp_path: Path, style: str) -> None:
    spec = five(tmp_path, style=style)
    rnd = round_of(spec)
    rendered = render_round(spec, rnd, PARAMS, base_env=base_env())
    seen = run(rendered)
    assert seen["argv"] == expected_args(spec, rnd, style)
    assert seen["cwd"] == str(tmp_path)
    # the display line is the same command
    assert shlex.split(rendered.display) == list(rendered.argv)
    # config-backed params go into the round config, never argv
    assert "momentum" not in " ".join(seen["argv"])


def test_config_backed_params_land_in_the_round_config(tmp_path: Path) -> None:
    spec = five(tmp_path)
    rnd = round_of(spec)
    rendered = render_round(spec, rnd, {"momentum": 0.5}, base_env=base_env())
    assert rendered.config_path == str(rnd.config)
    assert (
        rnd.config.read_text() == f"output:\n  root: {rnd.outputs}\noptimizer:\n  momentum: 0.5\n"
    )


def test_bools_in_space_style_are_bare_flags_or_absent(tmp_path: Path) -> None:
    spec = five(tmp_path)
    seen = run(render_round(spec, round_of(spec), {"amp": False}, base_env=base_env()))
    assert "--amp" not in seen["argv"]
    assert "--shuffle" in seen["argv"]


def test_venv_runs_the_projects_own_python(tmp_path: Path) -> None:
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").symlink_to(sys.executable)
    for python in ("python", "python3"):
        spec = make_project(
            tmp_path,
            FIVE.format(environment="venv", python=python, style="space"),
            TUNING,
            {"show.py": SHOW_ENV, "configs/base.yaml": BASE, "data/a.csv": "1\n"},
        )
        rnd = round_of(spec)
        # PATH without the test's python: only the venv prefix can find it
        rendered = render_round(spec, rnd, PARAMS, base_env={"PATH": "/usr/bin:/bin"})
        assert rendered.argv[0] == str(venv_bin / "python")
        seen = run(rendered)
        assert seen["exe"] == str(venv_bin / "python")
        assert seen["argv"] == expected_args(spec, rnd, "space")


@pytest.mark.parametrize(
    ("environment", "prefix"),
    [
        ("uv", ["uv", "run", "python", "show.py"]),
        ("conda\n  env_name: ml", ["conda", "run", "--no-capture-output", "-n", "ml"]),
    ],
)
def test_uv_and_conda_prefixes(tmp_path: Path, environment: str, prefix: list[str]) -> None:
    spec = five(tmp_path, environment=environment)
    rnd = round_of(spec)
    rendered = render_round(spec, rnd, PARAMS, base_env=base_env())
    argv = list(rendered.argv)
    assert argv[: len(prefix)] == prefix
    assert argv[-len(expected_args(spec, rnd, "space")) :] == expected_args(spec, rnd, "space")


SHELL = """\
version: 1
launch:
  command: [python, show.py]
  baseline_config: configs/base.yaml
  args:
    - flag: --note
      value: "it's $HOME; `true`"
advanced:
  security_mode: unsafe
  working_dir: sub dir
  shell_command: >-
    printf '%s\\n' {project_root} {working_dir} {trainee_dir} {session_id}
    {round_index} {session_dir} {round_dir} {config_path} "$0" > "$TRAINEE_ROUND_DIR/vars.txt"
    && exec python ../show.py {extra_args}
"""


def test_shell_command_runs_via_sh_with_every_variable(tmp_path: Path) -> None:
    root = tmp_path / "my project"
    spec = make_project(
        root,
        SHELL,
        TUNING,
        {"show.py": SHOW_ENV, "configs/base.yaml": BASE, "sub dir/keep": ""},
    )
    rnd = round_of(spec, session=4, index=11)
    rendered = render_round(spec, rnd, {"lr": 0.5, "opt": "sgd"}, base_env=base_env())
    assert rendered.argv[:2] == ("/bin/sh", "-c")
    assert rendered.display == rendered.argv[2]
    seen = run(rendered)
    trainee = root / ".trainee"
    assert (rnd.dir / "vars.txt").read_text().splitlines() == [
        str(root),
        str(root / "sub dir"),
        str(trainee),
        "session-0004",
        "11",
        str(trainee / "artifacts" / "session-0004"),
        str(rnd.dir),
        str(rnd.config),
        "/bin/sh",
    ]
    assert seen["argv"] == [
        "--config",
        str(rnd.config),
        "--note",
        "it's $HOME; `true`",
        "--lr",
        "0.5",
        "optimizer.name=sgd",
    ]
    assert seen["cwd"] == str(root / "sub dir")


def test_the_child_sees_trainee_vars_cache_redirects_and_the_callers_path(tmp_path: Path) -> None:
    spec = five(tmp_path)
    rnd = round_of(spec, session=3, index=2)
    env = base_env(
        NOTIFY_SOCKET="/run/systemd/notify",
        WATCHDOG_USEC="30000000",
        WATCHDOG_PID="1",
        LISTEN_FDS="2",
        LISTEN_PID="1",
        LISTEN_FDNAMES="a:b",
        TRAINEE_SOCKET="/run/user/0/trainee/trainee.sock",
        HOME="/root",
        HF_HOME="/somewhere/hf",
        MY_SETTING="kept",
    )
    env.pop("PYTHONUNBUFFERED", None)
    seen = run(render_round(spec, rnd, {}, base_env=env))["env"]
    trainee = tmp_path / ".trainee"
    assert seen["PATH"] == env["PATH"]
    assert seen["MY_SETTING"] == "kept"
    assert seen["PYTHONUNBUFFERED"] == "1"
    assert {k: v for k, v in seen.items() if k.startswith("TRAINEE_")} == {
        "TRAINEE_SESSION_ID": "session-0003",
        "TRAINEE_ROUND_INDEX": "2",
        "TRAINEE_SESSION_DIR": str(trainee / "artifacts" / "session-0003"),
        "TRAINEE_ROUND_DIR": str(rnd.dir),
        "TRAINEE_CONFIG_PATH": str(rnd.config),
    }
    cache = trainee / "cache"
    names = {"HOME": "home", "XDG_CACHE_HOME": "xdg", "HF_HOME": "hf"}
    names |= {"TORCH_HOME": "torch", "MPLCONFIGDIR": "mpl", "WANDB_DIR": "wandb"}
    for var, name in names.items():
        assert seen[var] == str(cache / name)
        assert (cache / name).is_dir()
    for var in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID"):
        assert var not in seen
    assert "LISTEN_FDNAMES" not in seen


def test_guarded_round_runs_with_the_same_args_and_env(tmp_path: Path) -> None:
    spec = five(tmp_path)
    rnd = round_of(spec)
    rendered = render_round(spec, rnd, PARAMS, base_env=base_env(), security_mode="guarded")
    seen = run(wrap(rendered, spec, rnd, network=False))
    assert seen["argv"] == expected_args(spec, rnd, "space")
    assert seen["env"]["HOME"] == str(tmp_path / ".trainee" / "cache" / "home")
    assert seen["env"]["PATH"] == base_env()["PATH"]
