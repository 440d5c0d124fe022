"""discover(): entrypoints and options, environment, data folders, config files, limits."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from trainee.discovery.scan import (
    MAX_FILES,
    Discovery,
    EntryOption,
    discover,
    entrypoint_for_command,
)
from trainee.errors import ConfigError

from .conftest import EXAMPLES, write


def options(d: Discovery) -> dict[str, EntryOption]:
    assert d.best is not None
    return {o.flag: o for o in d.best.options}


# -- the examples -------------------------------------------------------------------------


def test_mlp_flags_example() -> None:
    d = discover(EXAMPLES / "mlp-flags")
    assert d.environment == "system"
    assert "requirements.txt" in d.environment_reason
    assert d.entrypoints[0].path == "train.py"
    ep = d.entrypoints[0]
    assert ep.kind == "script" and ep.framework == "argparse"
    assert ep.command == ["python", "train.py"]
    assert ep.docstring.startswith("Train a one-hidden-layer MLP")
    opts = options(d)
    assert list(opts) == [
        "--lr",
        "--epochs",
        "--batch-size",
        "--weight-decay",
        "--hidden",
        "--seed",
        "--data-root",
        "--out",
    ]
    assert (opts["--lr"].type, opts["--lr"].default) == ("float", 0.001)
    assert (opts["--weight-decay"].type, opts["--weight-decay"].default) == ("float", 1e-5)
    assert (opts["--batch-size"].type, opts["--batch-size"].default) == ("int", 16)
    assert opts["--data-root"].type == "path"
    assert opts["--data-root"].default is None
    assert opts["--data-root"].default_source == "HERE / 'data'"
    assert [(x.flag, x.value) for x in d.fixed_limit_flags] == [("--epochs", 200)]
    assert [x.path for x in d.data_dirs] == ["data"]
    assert d.config_files == []
    assert d.readme == "README.md"
    assert "val_loss" in ep.metric_names


def test_yaml_config_example() -> None:
    d = discover(EXAMPLES / "yaml-config")
    assert d.environment == "system"
    opts = options(d)
    assert list(opts) == ["--config"]
    assert opts["--config"].required and opts["--config"].type == "path"
    assert [(c.path, c.kind) for c in d.config_files] == [("configs/base.yaml", "yaml")]
    assert "configs/" in d.config_files[0].reason
    assert d.fixed_limit_flags == []
    assert d.data_dirs == []


def test_discovery_serializes_to_json() -> None:
    d = discover(EXAMPLES / "mlp-flags")
    back = msgspec.json.decode(msgspec.json.encode(d), type=Discovery)
    assert back == d


# -- environments -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "environment", "reason", "env_name"),
    [
        ("uv_lock", "uv", "uv.lock", None),
        ("uv_tool", "uv", "[tool.uv]", None),
        ("venv", "venv", ".venv/bin/python", None),
        ("conda", "conda", "environment.yml", "trainer-env"),
        ("system", "system", "requirements.txt", None),
    ],
)
def test_environment(
    make_layout: Callable[[str], Path],
    layout: str,
    environment: str,
    reason: str,
    env_name: str | None,
) -> None:
    d = discover(make_layout(layout))
    assert d.environment == environment
    assert reason in d.environment_reason
    assert d.env_name == env_name
    # every one of these layouts has train.py at the root as the best entrypoint
    assert d.best is not None and d.best.path == "train.py"


def test_uv_lock_wins_over_venv(tmp_path: Path) -> None:
    write(tmp_path / "uv.lock")
    write(tmp_path / ".venv" / "pyvenv.cfg", "home = /usr\n")
    write(tmp_path / ".venv" / "bin" / "python")
    assert discover(tmp_path).environment == "uv"


def test_conda_file_without_name(tmp_path: Path) -> None:
    write(tmp_path / "environment.yaml", "channels: [conda-forge]\ndependencies: [numpy]\n")
    d = discover(tmp_path)
    assert (d.environment, d.env_name) == ("conda", None)
    assert any("env_name" in n for n in d.notes)


def test_conda_lock_file(tmp_path: Path) -> None:
    write(tmp_path / "conda-lock.yml", "name: locked  # from conda-lock\nversion: 1\n")
    d = discover(tmp_path)
    assert (d.environment, d.env_name) == ("conda", "locked")


def test_environment_yml_is_never_a_config_suggestion(make_layout: Callable[[str], Path]) -> None:
    d = discover(make_layout("conda"))
    assert all(c.path != "environment.yml" for c in d.config_files)


# -- entrypoint kinds and frameworks ------------------------------------------------------------


def test_argparse_details(make_layout: Callable[[str], Path]) -> None:
    d = discover(make_layout("system"))
    opts = options(d)
    assert opts["--optimizer"].choices == ["adam", "sgd"]
    assert opts["--optimizer"].type == "str"
    assert (opts["--amp"].type, opts["--amp"].default, opts["--amp"].action) == (
        "bool",
        False,
        "store_true",
    )
    aug = opts["--augment"]
    assert (aug.type, aug.default, aug.negative_flag) == ("bool", True, "--no-augment")
    assert opts["--data-dir"].default == "data"
    assert opts["--lr"].help == "learning rate"
    assert [(x.flag, x.value) for x in d.fixed_limit_flags] == [("--max-steps", 500)]


def test_click_entrypoint(make_layout: Callable[[str], Path]) -> None:
    d = discover(make_layout("click"))
    assert d.best is not None
    assert (d.best.path, d.best.framework) == ("train_click.py", "click")
    assert d.best.docstring == "Train with click."
    opts = options(d)
    lr = opts["--learning-rate"]
    assert (lr.dest, lr.type, lr.default, lr.help) == ("learning_rate", "float", 0.001, "step size")
    assert lr.flags == ["--lr", "--learning-rate"]
    bs = opts["--batch-size"]
    assert (bs.type, bs.default, bs.min_value, bs.max_value) == ("int", 32, 1, 48)
    assert opts["--optimizer"].choices == ["adam", "sgd"]
    shuffle = opts["--shuffle"]
    assert (shuffle.type, shuffle.default, shuffle.negative_flag) == ("bool", True, "--no-shuffle")
    assert opts["--data-root"].type == "path"
    wd = opts["--weight-decay"]
    assert (wd.type, wd.default, wd.min_value, wd.max_value) == ("float", 0.0, 0, 1)
    assert [(x.flag, x.value) for x in d.fixed_limit_flags] == [("--epochs", 10)]
    assert [x.path for x in d.data_dirs] == ["data"]


def test_typer_entrypoint(make_layout: Callable[[str], Path]) -> None:
    d = discover(make_layout("typer"))
    assert d.best is not None
    assert (d.best.path, d.best.framework) == ("main.py", "typer")
    opts = options(d)
    assert "--name" not in opts  # a typer Argument is positional
    assert (opts["--lr"].type, opts["--lr"].default) == ("float", 0.001)
    assert (opts["--epochs"].default, opts["--epochs"].help) == (10, "passes")
    assert opts["--mixed"].negative_flag == "--no-mixed"
    hs = opts["--hidden-size"]
    assert (hs.default, hs.min_value, hs.max_value) == (256, 16, 300)


def test_pyproject_script_entrypoint(make_layout: Callable[[str], Path]) -> None:
    d = discover(make_layout("pyproject_script"))
    assert d.best is not None
    ep = d.best
    assert ep.kind == "pyproject_script"
    assert (ep.path, ep.script_name, ep.module) == (
        "src/tiny/cli.py",
        "tiny-train",
        "tiny.cli:main",
    )
    assert ep.command == ["tiny-train"]
    assert "project.scripts" in ep.reason
    assert [o.flag for o in ep.options] == ["--learning-rate", "--epochs"]
    assert ep.docstring == "Train tiny."


def test_package_main_entrypoint_takes_options_from_imported_module(
    make_layout: Callable[[str], Path],
) -> None:
    d = discover(make_layout("package_main"))
    assert d.best is not None
    ep = d.best
    assert (ep.kind, ep.path, ep.module) == ("module", "trainer/__main__.py", "trainer")
    assert ep.command == ["python", "-m", "trainer"]
    assert ep.options_from == "trainer/cli.py"
    assert [o.flag for o in ep.options] == ["--lr", "--num-epochs"]
    assert [(x.flag, x.value) for x in d.fixed_limit_flags] == [("--num-epochs", 7)]


def test_hydra_entrypoint_and_config_folder(make_layout: Callable[[str], Path]) -> None:
    d = discover(make_layout("hydra"))
    assert d.best is not None
    ep = d.best
    assert ep.framework == "hydra"
    assert (ep.hydra_config_path, ep.hydra_config_name) == ("conf", "config")
    hydra = [c for c in d.config_files if c.kind == "hydra"]
    assert [c.path for c in hydra] == ["conf"]
    assert "model, optimizer" in hydra[0].reason
    # the group files are part of the Hydra folder, not separate suggestions
    assert all(not c.path.startswith("conf/") for c in d.config_files)
    limits = [(x.flag, x.value) for x in d.fixed_limit_flags]
    assert limits == [("trainer.max_epochs", 5)]


def test_hydra_folder_found_from_defaults_list_alone(tmp_path: Path) -> None:
    write(tmp_path / "cfg" / "main.yaml", "defaults:\n  - _self_\nlr: 0.1\n")
    write(tmp_path / "cfg" / "sub" / "a.yaml", "x: 1\n")
    d = discover(tmp_path)
    assert [(c.path, c.kind) for c in d.config_files] == [("cfg", "hydra")]


def test_configurator_entrypoint(make_layout: Callable[[str], Path]) -> None:
    d = discover(make_layout("configurator"))
    assert d.best is not None and d.best.framework == "configurator"
    opts = options(d)
    assert list(opts) == [
        "--out_dir",
        "--batch_size",
        "--learning_rate",
        "--max_iters",
        "--dropout",
        "--compile",
    ]
    assert opts["--learning_rate"].help == "max learning rate"
    assert [(x.flag, x.value) for x in d.fixed_limit_flags] == [("--max_iters", 5000)]


def test_entrypoint_ranking(tmp_path: Path) -> None:
    for rel in ("main.py", "scripts/train_big.py", "train.py", "examples/train.py"):
        write(tmp_path / rel, "if __name__ == '__main__':\n    pass\n")
    write(tmp_path / "tests" / "train_test.py", "")
    write(tmp_path / "test_train.py", "")
    d = discover(tmp_path)
    assert [e.path for e in d.entrypoints] == [
        "train.py",
        "scripts/train_big.py",
        "main.py",
        "examples/train.py",
    ]
    assert all(e.reason for e in d.entrypoints)


def test_unparseable_python_is_a_note_not_an_error(tmp_path: Path) -> None:
    write(tmp_path / "train.py", "def broken(:\n")
    d = discover(tmp_path)
    assert d.best is not None and d.best.options == []
    assert any("could not be parsed" in n for n in d.best.notes)
    assert any("train.py" in n and "could not be parsed" in n for n in d.notes)


def test_binary_and_huge_python_files_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_bytes(b"\xff\xfe\x00garbage\x00")
    write(tmp_path / "train_big.py", "x = 1\n" * 200_000)
    d = discover(tmp_path)
    by_path = {e.path: e for e in d.entrypoints}
    assert by_path["train_big.py"].options == []
    assert any("larger than" in n for n in by_path["train_big.py"].notes)
    assert by_path["train.py"].options == []


def test_defaults_from_module_constants_and_expressions(tmp_path: Path) -> None:
    write(
        tmp_path / "train.py",
        """
        import argparse
        import os
        LR = 2e-3
        STEPS = 10
        p = argparse.ArgumentParser()
        p.add_argument("--lr", type=float, default=LR)
        p.add_argument("--steps", type=int, default=STEPS)
        p.add_argument("--home", default=os.environ.get("HOME"))
        p.add_argument("--flag", type=bool, default=False)
        p.add_argument("--n", type=float, default=1)
        p.add_argument("positional")
        p.add_argument("--many", nargs="+", type=int)
        """,
    )
    d = discover(tmp_path)
    opts = options(d)
    assert opts["--lr"].default == 0.002
    assert opts["--steps"].default == 10
    assert opts["--home"].default is None
    assert opts["--home"].default_source == "os.environ.get('HOME')"
    assert opts["--flag"].type is None  # type=bool is not safely settable
    assert opts["--n"].default == 1.0 and isinstance(opts["--n"].default, float)
    assert "positional" not in {o.dest for o in opts.values()}
    assert opts["--many"].nargs == "+"
    assert [(x.flag, x.value) for x in d.fixed_limit_flags] == [("--steps", 10)]


# -- data folders and config files -----------------------------------------------------------


def test_data_folders(tmp_path: Path) -> None:
    write(tmp_path / "data" / "raw" / "a.txt", "x")
    for i in range(4):
        write(tmp_path / "shards" / f"part{i}.parquet", "x")
    write(tmp_path / "src" / "model.py", "")
    d = discover(tmp_path)
    by_path = {x.path: x for x in d.data_dirs}
    assert set(by_path) == {"data", "shards"}
    assert "folder named 'data'" in by_path["data"].reason
    assert "4 .parquet" in by_path["shards"].reason


def test_data_symlink_outside_is_flagged(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    project = tmp_path / "proj"
    project.mkdir()
    (project / "data").symlink_to(outside)
    d = discover(project)
    assert [(x.path, x.outside) for x in d.data_dirs] == [("data", True)]


def test_config_files_are_ranked_and_filtered(tmp_path: Path) -> None:
    write(tmp_path / "configs" / "base.yaml", "lr: 0.1\n")
    write(tmp_path / "settings.json", "{}")
    write(tmp_path / "train_config.toml", "lr = 1\n")
    write(tmp_path / "mkdocs.yml", "site_name: x\n")
    write(tmp_path / "package.json", "{}")
    write(tmp_path / ".github" / "workflows" / "ci.yml", "on: push\n")
    write(tmp_path / "data" / "labels.json", "{}")
    write(tmp_path / "big.json", "[" + "1," * 200_000 + "1]")
    d = discover(tmp_path)
    assert [c.path for c in d.config_files] == [
        "configs/base.yaml",
        "train_config.toml",
        "settings.json",
    ]
    toml = next(c for c in d.config_files if c.kind == "toml")
    assert "TOML cannot be a baseline_config" in toml.reason


def test_skipped_folders(tmp_path: Path) -> None:
    for folder in ("node_modules", ".git", "__pycache__", "site-packages", "outputs", ".trainee"):
        write(tmp_path / folder / "train.py", "import argparse\n")
        write(tmp_path / folder / "config.yaml", "a: 1\n")
    write(tmp_path / "myenv" / "pyvenv.cfg", "home = /usr\n")
    write(tmp_path / "myenv" / "train.py", "")
    d = discover(tmp_path)
    assert d.entrypoints == []
    assert d.config_files == []


def test_big_tree_is_capped(tmp_path: Path) -> None:
    write(tmp_path / "train.py", "")
    many = tmp_path / "many"
    many.mkdir()
    for i in range(120):
        (many / f"f{i:05}.txt").touch()
    d = discover(tmp_path, max_files=100)
    assert d.truncated
    assert d.files_scanned == 100
    assert any("stopped after 100 files" in n for n in d.notes)
    assert not discover(tmp_path).truncated
    assert MAX_FILES == 5_000


def test_bad_root(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        discover(tmp_path / "missing")
    write(tmp_path / "file")
    with pytest.raises(ConfigError, match="not a directory"):
        discover(tmp_path / "file")


# -- matching launch.command to an entrypoint --------------------------------------------------


def test_entrypoint_for_command(make_layout: Callable[[str], Path], tmp_path: Path) -> None:
    root = make_layout("package_main")
    d = discover(root)
    found = entrypoint_for_command(root, d, ["python", "-m", "trainer"])
    assert found is not None and found.path == "trainer/__main__.py"

    root = make_layout("system")
    write(
        root / "tools" / "experiment.py",
        "import argparse\np = argparse.ArgumentParser()\n"
        "p.add_argument('--alpha', type=float, default=0.5)\n",
    )
    d = discover(root)
    found = entrypoint_for_command(root, d, ["accelerate", "launch", "tools/experiment.py"])
    assert found is not None and [o.flag for o in found.options] == ["--alpha"]
    found = entrypoint_for_command(root, d, ["python", "experiment.py"], working_dir="tools")
    assert found is not None and found.path == "tools/experiment.py"
    assert entrypoint_for_command(root, d, ["python", "../outside.py"]) is None
    assert entrypoint_for_command(root, d, ["bash", "run.sh"]) is None

    root = make_layout("pyproject_script")
    d = discover(root)
    found = entrypoint_for_command(root, d, ["tiny-train"])
    assert found is not None and found.kind == "pyproject_script"
