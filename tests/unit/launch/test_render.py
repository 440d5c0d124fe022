"""Command rendering: environment prefixes, argument order and styles, shell templates,
the child's environment, and refusals that write nothing."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from trainee.errors import InvalidParams, LaunchError, SandboxError
from trainee.launch.render import (
    build_argv,
    build_env,
    build_shell_text,
    config_diff,
    render_round,
    shell_display,
)
from trainee.spec import ProjectSpec

from .projects import make_project, round_of

BASE = "output:\n  root: outputs/base\noptimizer:\n  lr: 0.1\n"

FIVE_GROUPS = """\
version: 1
data:
  - path: data
    flag: --data-root
  - path: extra            # no flag: not passed
launch:
  command: [python, train.py]
  baseline_config: configs/base.yaml
  arg_style: {style}
  args:
    - flag: --seed
      value: 7
    - flag: --deterministic
    - flag: trainer.devices
      value: 1
run:
  fixed_args:
    - flag: --epochs
      value: 200
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
  - name: wd
    flag: --weight-decay
    type: float
    default: 0.01
  - name: bs
    flag: --batch-size
    type: int
  - name: amp
    flag: --amp
    type: bool
    default: true
  - name: opt
    override: optimizer.name
    type: choice
    choices: [adam, sgd]
    default: adam
"""


def five_groups(root: Path, style: str = "space") -> ProjectSpec:
    return make_project(
        root,
        FIVE_GROUPS.format(style=style),
        TUNING,
        {"configs/base.yaml": BASE, "data/x.csv": "1\n", "extra/y": ""},
    )


def simple(root: Path, launch: str, tuning: str = "version: 1\nparams: []\n") -> ProjectSpec:
    return make_project(root, "version: 1\nlaunch:\n" + launch, tuning)


# -- environment prefixes --------------------------------------------------------------------


def test_system_runs_the_command_as_written(tmp_path: Path) -> None:
    spec = simple(tmp_path, "  command: [python, train.py]\n")
    assert build_argv(spec, round_of(spec), {}) == ["python", "train.py"]


def test_uv_prefixes_uv_run(tmp_path: Path) -> None:
    spec = simple(tmp_path, "  environment: uv\n  command: [python, train.py]\n")
    assert build_argv(spec, round_of(spec), {}) == ["uv", "run", "python", "train.py"]


def test_conda_runs_in_the_named_env_with_live_output(tmp_path: Path) -> None:
    spec = simple(
        tmp_path, "  environment: conda\n  env_name: trainer\n  command: [python, train.py]\n"
    )
    assert build_argv(spec, round_of(spec), {}) == [
        "conda",
        "run",
        "--no-capture-output",
        "-n",
        "trainer",
        "python",
        "train.py",
    ]


@pytest.mark.parametrize("python", ["python", "python3"])
def test_venv_replaces_python_with_the_projects_venv(tmp_path: Path, python: str) -> None:
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").write_text("")
    spec = simple(tmp_path, f"  environment: venv\n  command: [{python}, train.py]\n")
    assert build_argv(spec, round_of(spec), {}) == [
        str(tmp_path / ".venv" / "bin" / "python"),
        "train.py",
    ]


def test_venv_prefixes_other_tools_only_when_the_venv_has_them(tmp_path: Path) -> None:
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "torchrun").write_text("")
    spec = simple(tmp_path, "  environment: venv\n  command: [torchrun, train.py]\n")
    assert build_argv(spec, round_of(spec), {}) == [
        str(tmp_path / ".venv" / "bin" / "torchrun"),
        "train.py",
    ]
    other = simple(tmp_path / "b", "  environment: venv\n  command: [accelerate, launch]\n")
    assert build_argv(other, round_of(other), {}) == ["accelerate", "launch"]


def test_venv_without_a_venv_python_is_a_clear_error(tmp_path: Path) -> None:
    spec = simple(tmp_path, "  environment: venv\n  command: [python, train.py]\n")
    with pytest.raises(LaunchError, match=r"\.venv/bin/python does not exist"):
        build_argv(spec, round_of(spec), {})
    with pytest.raises(LaunchError, match=r"\.venv/bin/python does not exist"):
        render_round(spec, round_of(spec), {}, base_env={}, security_mode="guarded")
    assert sorted(p.name for p in (tmp_path / ".trainee").iterdir()) == [
        "project.yaml",
        "tuning.yaml",
    ]


# -- argument order and styles -------------------------------------------------------------


def test_all_five_groups_in_order_space_style(tmp_path: Path) -> None:
    spec = five_groups(tmp_path)
    rnd = round_of(spec)
    argv = build_argv(spec, rnd, {"bs": 32, "lr": 0.5})
    assert argv == [
        "python",
        "train.py",
        "--config",
        str(rnd.config),
        "--seed",
        "7",
        "--deterministic",
        "trainer.devices=1",
        "--data-root",
        str(tmp_path / "data"),
        "--epochs",
        "200",
        "--weight-decay",
        "0.01",
        "--batch-size",
        "32",
        "--amp",
        "optimizer.name=adam",
    ]


def test_equals_style_writes_flag_equals_value(tmp_path: Path) -> None:
    spec = five_groups(tmp_path, "equals")
    rnd = round_of(spec)
    argv = build_argv(spec, rnd, {"bs": 32, "amp": False, "opt": "sgd"})
    assert argv == [
        "python",
        "train.py",
        f"--config={rnd.config}",
        "--seed=7",
        "--deterministic",
        "trainer.devices=1",
        f"--data-root={tmp_path / 'data'}",
        "--epochs=200",
        "--weight-decay=0.01",
        "--batch-size=32",
        "--amp=False",
        "optimizer.name=sgd",
    ]


def test_param_values_are_typed_and_none_omits_the_flag(tmp_path: Path) -> None:
    spec = five_groups(tmp_path)
    argv = build_argv(spec, round_of(spec), {"wd": 1, "bs": None, "amp": False})
    tail = argv[argv.index("200") + 1 :]
    # an int for a float param reads back as a float; bs None and amp False vanish
    assert tail == ["--weight-decay", "1.0", "optimizer.name=adam"]


def test_small_floats_read_back_as_floats(tmp_path: Path) -> None:
    spec = five_groups(tmp_path)
    argv = build_argv(spec, round_of(spec), {"wd": 1e-05})
    assert argv[argv.index("--weight-decay") + 1] == "1e-5"
    assert isinstance(float(argv[argv.index("--weight-decay") + 1]), float)


# -- bad params change nothing ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"nope": 1}, r"unknown param 'nope'; tuning.yaml allows: amp, bs, lr, opt, wd"),
        ({"wd": True}, r"param 'wd': must be a number \(float\), got true"),
        ({"bs": 2.5}, r"param 'bs': must be an integer, got 2.5"),
        ({"lr": "0.1"}, r"param 'lr': must be a number \(float\), got \"0.1\""),
        ({"amp": 1}, r"param 'amp': must be true or false, got 1"),
        (
            {"opt": "rmsprop"},
            r"param 'opt': \"rmsprop\" is not one of the choices: \"adam\", \"sgd\"",
        ),
        ({"wd": float("nan")}, r"param 'wd': must be a finite number, got nan"),
    ],
)
def test_bad_params_raise_before_anything_is_written(
    tmp_path: Path, params: dict[str, object], match: str
) -> None:
    spec = five_groups(tmp_path)
    rnd = round_of(spec)
    with pytest.raises(InvalidParams, match=match):
        render_round(spec, rnd, params, base_env={})  # type: ignore[arg-type]
    assert not (tmp_path / ".trainee" / "runs").exists()
    assert not (tmp_path / ".trainee" / "cache").exists()


def test_unknown_security_mode_is_refused(tmp_path: Path) -> None:
    spec = five_groups(tmp_path)
    with pytest.raises(InvalidParams, match="unknown security mode 'yolo'"):
        render_round(spec, round_of(spec), {}, base_env={}, security_mode="yolo")


def test_guarded_refuses_a_workspace_symlinked_out_of_trainee_dir(tmp_path: Path) -> None:
    spec = five_groups(tmp_path / "proj")
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "proj" / ".trainee" / "runs").symlink_to(outside)
    with pytest.raises(SandboxError, match=r"through a symlink, outside .*--unsafe"):
        render_round(spec, round_of(spec), {}, base_env={}, security_mode="guarded")
    assert list(outside.iterdir()) == []


# -- render_round ----------------------------------------------------------------------------


def test_render_round_writes_the_config_and_passes_its_path(tmp_path: Path) -> None:
    spec = five_groups(tmp_path)
    rnd = round_of(spec)
    out = render_round(spec, rnd, {"lr": 0.25}, base_env={"PATH": "/bin"})
    assert out.config_path == str(rnd.config)
    assert rnd.config.read_text() == f"output:\n  root: {rnd.outputs}\noptimizer:\n  lr: 0.25\n"
    assert rnd.outputs.is_dir()
    assert out.cwd == str(tmp_path)
    assert out.argv[:4] == ("python", "train.py", "--config", str(rnd.config))
    assert out.display == shlex.join(out.argv)
    assert shlex.split(out.display) == list(out.argv)


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    spec = five_groups(tmp_path)
    rnd = round_of(spec)
    out = render_round(spec, rnd, {}, base_env={}, write_config=False, security_mode="guarded")
    assert out.config_path == str(rnd.config)
    assert "--config" in out.argv
    assert sorted(p.name for p in (tmp_path / ".trainee").iterdir()) == [
        "project.yaml",
        "tuning.yaml",
    ]


def test_no_baseline_config_means_no_config_path(tmp_path: Path) -> None:
    spec = simple(tmp_path, "  command: [python, train.py]\n")
    out = render_round(spec, round_of(spec), {}, base_env={}, security_mode="unsafe")
    assert out.config_path is None
    assert out.argv == ("python", "train.py")


def test_display_quotes_arguments_with_spaces(tmp_path: Path) -> None:
    assert shell_display(["python", "a b.py", "--x", "it's"]) == "python 'a b.py' --x 'it'\"'\"'s'"


# -- shell_command ---------------------------------------------------------------------------

SHELL = """\
version: 1
launch:
  command: [python, train.py]
  baseline_config: configs/base.yaml
  args:
    - flag: --name
      value: two words
advanced:
  security_mode: unsafe
  working_dir: src
  shell_command: "cd {working_dir} && run {project_root} {trainee_dir} {session_id} \
{round_index} {session_dir} {round_dir} {config_path} -- {extra_args}"
"""


def test_shell_command_fills_every_variable_shell_quoted(tmp_path: Path) -> None:
    root = tmp_path / "my project"
    spec = make_project(root, SHELL, files={"configs/base.yaml": BASE, "src/x.py": ""})
    rnd = round_of(spec, session=3, index=12)
    text = build_shell_text(spec, rnd, {})
    trainee = root / ".trainee"
    expected = [
        "cd",
        str(root / "src"),
        "&&",
        "run",
        str(root),
        str(trainee),
        "session-0003",
        "12",
        str(trainee / "artifacts" / "session-0003"),
        str(trainee / "runs" / "session-0003" / "round-0012"),
        str(trainee / "runs" / "session-0003" / "round-0012" / "config.yaml"),
        "--",
        "--config",
        str(trainee / "runs" / "session-0003" / "round-0012" / "config.yaml"),
        "--name",
        "two words",
    ]
    assert shlex.split(text) == expected
    out = render_round(spec, rnd, {}, base_env={})
    assert out.argv == ("/bin/sh", "-c", text)
    assert out.display == text
    assert out.cwd == str(root / "src")


# -- environment -----------------------------------------------------------------------------


def test_env_keeps_path_sets_trainee_vars_and_redirects_caches(tmp_path: Path) -> None:
    spec = five_groups(tmp_path)
    rnd = round_of(spec, session=2, index=5)
    base = {
        "PATH": "/opt/x/bin:/usr/bin",
        "LANG": "C.UTF-8",
        "HOME": "/root",
        "HF_HOME": "/big/hf",
        "NOTIFY_SOCKET": "/run/systemd/notify",
        "WATCHDOG_USEC": "1",
        "WATCHDOG_PID": "1",
        "LISTEN_FDS": "1",
        "LISTEN_PID": "1",
        "LISTEN_FDNAMES": "x",
        "TRAINEE_SOCKET": "/run/trainee.sock",
        "TRAINEE_DATA_DIR": "/elsewhere",
    }
    env = build_env(spec, rnd, base)
    trainee = tmp_path / ".trainee"
    cache = trainee / "cache"
    assert env == {
        "PATH": "/opt/x/bin:/usr/bin",
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "TRAINEE_SESSION_ID": "session-0002",
        "TRAINEE_ROUND_INDEX": "5",
        "TRAINEE_SESSION_DIR": str(trainee / "artifacts" / "session-0002"),
        "TRAINEE_ROUND_DIR": str(rnd.dir),
        "TRAINEE_CONFIG_PATH": str(rnd.config),
        "HOME": str(cache / "home"),
        "XDG_CACHE_HOME": str(cache / "xdg"),
        "HF_HOME": str(cache / "hf"),
        "TORCH_HOME": str(cache / "torch"),
        "MPLCONFIGDIR": str(cache / "mpl"),
        "WANDB_DIR": str(cache / "wandb"),
    }
    assert sorted(p.name for p in cache.iterdir()) == ["hf", "home", "mpl", "torch", "wandb", "xdg"]
    assert base["TRAINEE_SOCKET"] == "/run/trainee.sock"  # the caller's mapping is untouched


def test_env_without_create_makes_no_folders(tmp_path: Path) -> None:
    spec = five_groups(tmp_path)
    env = build_env(spec, round_of(spec), {}, create=False)
    assert env["HOME"] == str(tmp_path / ".trainee" / "cache" / "home")
    assert not (tmp_path / ".trainee" / "cache").exists()


# -- config diff -----------------------------------------------------------------------------


def test_config_diff_is_a_labelled_unified_diff(tmp_path: Path) -> None:
    old = tmp_path / "base.yaml"
    new = tmp_path / "round.yaml"
    old.write_text("a: 1\nb: 2  # keep\nc: 3")
    new.write_text("a: 1\nb: 5  # keep\nc: 3")
    assert config_diff(old, new) == (
        f"--- {old}\n+++ {new}\n@@ -1,3 +1,3 @@\n a: 1\n-b: 2  # keep\n+b: 5  # keep\n c: 3"
        "\n\\ No newline at end of file\n"
    )
    assert config_diff(old, old) == ""


def test_env_is_independent_of_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SOMETHING_ELSE", "1")
    spec = five_groups(tmp_path)
    env = build_env(spec, round_of(spec), {"PATH": "/x"})
    assert "SOMETHING_ELSE" not in env
    assert env["PATH"] == "/x"
    assert os.environ["SOMETHING_ELSE"] == "1"
