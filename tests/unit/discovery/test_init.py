"""init_project and prepare_project on the examples and synthetic layouts."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from trainee.discovery.init import GITIGNORE, InitResult, init_project, prepare_project
from trainee.errors import ConfigError
from trainee.spec import ArgStyle, Environment, load_project

from .conftest import LAYOUTS, copy_example, snapshot, write

ALL_FILES = [
    ".trainee/project.yaml",
    ".trainee/tuning.yaml",
    ".trainee/context.md",
    ".trainee/README.md",
    ".trainee/.gitignore",
]
ALL_DIRS = [".trainee/logs/", ".trainee/runs/", ".trainee/artifacts/"]


# -- the examples --------------------------------------------------------------------------------


def test_init_mlp_flags(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    result = init_project(root)
    assert sorted(result.created) == sorted([".trainee/", *ALL_DIRS, *ALL_FILES])
    assert result.kept == [] and result.rewritten == []
    assert result.entrypoint == "train.py"
    spec = load_project(root)
    assert spec.launch.command == ("python", "train.py")
    assert spec.launch.environment == Environment.SYSTEM
    assert spec.launch.baseline_config is None
    assert [(d.path, d.flag) for d in spec.data] == [("data", "--data-root")]
    assert [(a.flag, a.value) for a in spec.run.fixed_args] == [("--epochs", 200)]
    assert spec.output.config_path is None  # init never infers output paths
    assert spec.tunables == ()  # nor tunables
    # the primary metric is the validation loss the script prints, not the training loss
    assert [(m.name, m.goal, m.required) for m in spec.metrics.specs] == [("val_loss", "min", True)]
    assert [m.name for m in result.metrics] == ["val_loss"]
    assert spec.advanced.security_mode == "guarded"
    text = (root / ".trainee" / "project.yaml").read_text()
    assert "- name: val_loss  # validation, lower is better" in text
    assert "train.py:168 prints 'val_loss'" in text
    readme = (root / ".trainee" / "README.md").read_text()
    assert "named train.py at the project root" in readme
    assert "`--epochs` = `200`" in readme
    assert "passed with `--data-root`" in readme
    assert (root / ".trainee" / ".gitignore").read_text() == GITIGNORE
    assert (root / ".trainee" / "tuning.yaml").read_text().endswith("params: []\n")


def test_init_yaml_config_with_baseline(tmp_path: Path) -> None:
    root = copy_example("yaml-config", tmp_path)
    result = init_project(root, baseline_config="configs/base.yaml")
    assert result.baseline_config == "configs/base.yaml"
    spec = load_project(root)
    assert spec.launch.baseline_config == "configs/base.yaml"
    assert spec.output.config_path is None
    text = (root / ".trainee" / "project.yaml").read_text()
    assert "#   config_path: output.root" in text  # a hint, commented out


def test_init_never_picks_a_baseline_by_itself(tmp_path: Path) -> None:
    root = copy_example("yaml-config", tmp_path)
    write(root / "environment.yml", "name: ml\n")
    write(root / "config.yaml", "lr: 0.1\n")
    result = init_project(root)
    assert result.baseline_config is None
    spec = load_project(root)
    assert spec.launch.baseline_config is None
    text = (root / ".trainee" / "project.yaml").read_text()
    assert "# baseline_config: configs/base.yaml" in text
    readme = (root / ".trainee" / "README.md").read_text()
    assert "suggestions only" in readme
    assert "`configs/base.yaml`" in readme and "`config.yaml`" in readme


# -- synthetic layouts: the written project.yaml always loads ------------------------------------


EXPECTED = {
    "uv_lock": ("uv", None, ("python", "train.py"), [("--max-steps", 500)]),
    "uv_tool": ("uv", None, ("python", "train.py"), [("--max-steps", 500)]),
    "venv": ("venv", None, ("python", "train.py"), [("--max-steps", 500)]),
    "conda": ("conda", "trainer-env", ("python", "train.py"), [("--max-steps", 500)]),
    "system": ("system", None, ("python", "train.py"), [("--max-steps", 500)]),
    "hydra": (
        "system",
        None,
        ("python", "train.py"),
        [("trainer.max_epochs", 5), ("output_dir", "{outputs_dir}/output_dir")],
    ),
    "click": ("system", None, ("python", "train_click.py"), [("--epochs", 10)]),
    "typer": ("system", None, ("python", "main.py"), [("--epochs", 10)]),
    "pyproject_script": ("system", None, ("tiny-train",), [("--epochs", 3)]),
    "package_main": ("system", None, ("python", "-m", "trainer"), [("--num-epochs", 7)]),
    "configurator": ("system", None, ("python", "train.py"), [("--max_iters", 5000)]),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_init_layout_loads(make_layout: Callable[[str], Path], layout: str) -> None:
    root = make_layout(layout)
    init_project(root)
    spec = load_project(root)
    env, env_name, command, fixed = EXPECTED[layout]
    assert (spec.launch.environment, spec.launch.env_name) == (env, env_name)
    assert spec.launch.command == command
    assert [(a.flag, a.value) for a in spec.run.fixed_args] == fixed
    if layout == "configurator":
        assert spec.launch.arg_style == ArgStyle.EQUALS
    if layout == "uv_lock":
        assert [(d.path, d.flag) for d in spec.data] == [("data", "--data-dir")]
    if layout == "click":
        assert [(d.path, d.flag) for d in spec.data] == [("data", "--data-root")]


def test_init_hydra_style_and_output(make_layout: Callable[[str], Path]) -> None:
    root = make_layout("hydra")
    result = init_project(root)
    spec = load_project(root)
    assert spec.launch.config_style == "hydra"
    assert spec.output.flag == "hydra.run.dir" == result.output_flag
    assert "Hydra" in (root / ".trainee" / "README.md").read_text()


def test_conda_without_name_falls_back_to_system(tmp_path: Path) -> None:
    write(tmp_path / "environment.yml", "dependencies: [numpy]\n")
    write(tmp_path / "train.py", "")
    result = init_project(tmp_path)
    assert result.discovery.environment == "conda"
    spec = load_project(tmp_path)
    assert spec.launch.environment == Environment.SYSTEM
    assert any("env_name" in n for n in result.notes)


def test_init_without_entrypoint_leaves_one_obvious_line(tmp_path: Path) -> None:
    write(tmp_path / "model.py", "import torch\n")  # a library module, not an entrypoint
    result = init_project(tmp_path)
    assert result.entrypoint is None
    assert any("no training entrypoint was found" in n for n in result.notes)
    assert load_project(tmp_path).launch.command == ("python", "YOUR_TRAINING_SCRIPT.py")
    lines = [
        line
        for line in (tmp_path / ".trainee" / "project.yaml").read_text().splitlines()
        if "YOUR_TRAINING_SCRIPT" in line
    ]
    assert len(lines) == 1 and "NO TRAINING ENTRYPOINT FOUND" in lines[0]


def test_data_symlink_outside_is_not_listed(tmp_path: Path) -> None:
    outside = tmp_path / "big"
    outside.mkdir()
    root = tmp_path / "proj"
    write(root / "train.py", "")
    (root / "data").symlink_to(outside)
    result = init_project(root)
    assert load_project(root).data == ()
    assert any("outside the project" in n for n in result.notes)


# -- non-destructive, --force ------------------------------------------------------------------


def test_second_init_keeps_everything_byte_for_byte(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    write(root / "cfg.yaml", "lr: 0.1\n")
    init_project(root)
    (root / ".trainee" / "project.yaml").write_text(
        (root / ".trainee" / "project.yaml").read_text().replace("max_rounds: 3", "max_rounds: 9")
    )
    before = snapshot(root)
    again = init_project(root, baseline_config="cfg.yaml")
    assert again.created == [] and again.rewritten == []
    assert sorted(again.kept) == sorted([*ALL_DIRS, *ALL_FILES])
    assert snapshot(root) == before
    assert load_project(root).run.max_rounds == 9
    assert any("--baseline-config was not recorded" in n for n in again.notes)


def test_init_fills_in_missing_files_only(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    init_project(root)
    (root / ".trainee" / "context.md").unlink()
    (root / ".trainee" / "runs").rmdir()
    kept_text = (root / ".trainee" / "README.md").read_bytes()
    again = init_project(root)
    assert sorted(again.created) == [".trainee/context.md", ".trainee/runs/"]
    assert (root / ".trainee" / "README.md").read_bytes() == kept_text


def test_force_rewrites_what_the_user_did_not_change(tmp_path: Path) -> None:
    root = copy_example("yaml-config", tmp_path)
    init_project(root)
    pfile = root / ".trainee" / "project.yaml"
    pfile.write_text(pfile.read_text().replace("max_rounds: 3", "max_rounds: 9"))
    (root / ".trainee" / "context.md").write_text("mine\n")
    result = init_project(root, baseline_config="configs/base.yaml", force=True)
    assert sorted(result.rewritten) == sorted(set(ALL_FILES) - {".trainee/context.md"})
    spec = load_project(root)
    assert spec.launch.baseline_config == "configs/base.yaml"
    assert spec.run.max_rounds == 9
    assert [c.field for c in result.kept_fields] == ["run.max_rounds"]
    assert [c.field for c in result.replaced_fields] == ["launch.baseline_config"]
    assert result.backup is None
    assert (root / ".trainee" / "context.md").read_text() == "mine\n"


def test_force_without_a_record_replaces_and_backs_up(tmp_path: Path) -> None:
    root = copy_example("yaml-config", tmp_path)
    init_project(root)
    shutil.rmtree(root / ".trainee" / ".init")
    pfile = root / ".trainee" / "project.yaml"
    old = "version: 1\nlaunch:\n  command: [echo]\n"
    pfile.write_text(old)
    result = init_project(root, force=True)
    assert "launch.command" in {c.field for c in result.replaced_fields}
    assert result.backup == ".trainee/project.yaml.~1~"
    assert (root / ".trainee" / "project.yaml.~1~").read_text() == old
    assert load_project(root).launch.command == ("python", "train.py")


@pytest.mark.parametrize(
    ("make_bad", "reason"),
    [
        (lambda root, out: "configs/missing.yaml", "does not exist"),
        (lambda root, out: "../outside.yaml", "inside the project"),
        (lambda root, out: str(out), "inside the project"),
        (lambda root, out: "configs", "is not a file"),
        (lambda root, out: "link.yaml", "outside the project"),
        (lambda root, out: "train.py", "YAML (.yaml/.yml) or JSON"),
        (lambda root, out: "broken.yaml", "cannot be read as a config"),
        (lambda root, out: "list.yaml", "cannot be read as a config"),
    ],
)
def test_bad_baseline_config(
    tmp_path: Path, make_bad: Callable[[Path, Path], str], reason: str
) -> None:
    root = copy_example("yaml-config", tmp_path)
    outside = write(tmp_path / "outside.yaml", "a: 1\n")
    (root / "link.yaml").symlink_to(outside)
    write(root / "broken.yaml", "a: [1\n")
    write(root / "list.yaml", "- 1\n- 2\n")
    raw = make_bad(root, outside)
    before = snapshot(root)
    with pytest.raises(ConfigError) as info:
        init_project(root, baseline_config=raw)
    assert raw in info.value.message
    assert reason in info.value.message
    assert info.value.field == "launch.baseline_config"
    assert snapshot(root) == before  # nothing written


def test_baseline_config_given_as_absolute_path_inside(tmp_path: Path) -> None:
    root = copy_example("yaml-config", tmp_path)
    result = init_project(root, baseline_config=str(root / "configs" / "base.yaml"))
    assert result.baseline_config == "configs/base.yaml"


def test_trainee_path_that_is_a_file(tmp_path: Path) -> None:
    write(tmp_path / ".trainee", "not a folder")
    before = snapshot(tmp_path)
    with pytest.raises(ConfigError, match="not a directory"):
        init_project(tmp_path)
    assert snapshot(tmp_path) == before


def test_bad_root(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        init_project(tmp_path / "nope")


def test_init_result_serializes(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    result = init_project(root)
    assert msgspec.json.decode(msgspec.json.encode(result), type=InitResult) == result


# -- prepare ------------------------------------------------------------------------------------


def test_prepare_fills_then_keeps_then_replaces(tmp_path: Path) -> None:
    root = copy_example("yaml-config", tmp_path)
    init_project(root, baseline_config="configs/base.yaml")
    (root / ".trainee" / "context.md").unlink()
    first = prepare_project(root)
    assert first.tuning == "filled" and first.context == "created"
    assert first.params_written[:4] == ["lr", "l2", "batch_size", "momentum"]
    assert any("output.config_path: output.root" in n for n in first.notes)
    spec = load_project(root)
    assert [t.name for t in spec.tunables] == first.params_written
    assert all(t.param.default is None for t in spec.tunables)

    tuning_before = (root / ".trainee" / "tuning.yaml").read_bytes()
    (root / ".trainee" / "context.md").write_text("my notes\n")
    second = prepare_project(root)
    assert (second.tuning, second.context) == ("kept", "kept")
    assert (root / ".trainee" / "tuning.yaml").read_bytes() == tuning_before
    assert (root / ".trainee" / "context.md").read_text() == "my notes\n"

    third = prepare_project(root, replace=True, limit=2)
    assert (third.tuning, third.context) == ("replaced", "rewritten")
    assert [t.name for t in load_project(root).tunables] == ["lr", "l2"]
    assert "my notes" not in (root / ".trainee" / "context.md").read_text()


def test_prepare_replace_regenerates_a_tuning_file_that_no_longer_fits(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    init_project(root)
    prepare_project(root)
    # the user pins --batch-size: the old tuning.yaml now clashes with project.yaml
    pfile = root / ".trainee" / "project.yaml"
    pfile.write_text(
        pfile.read_text().replace(
            "  fixed_args:\n", "  fixed_args:\n    - flag: --batch-size\n      value: 32\n"
        )
    )
    with pytest.raises(ConfigError, match=r"already set by run\.fixed_args"):
        load_project(root)
    result = prepare_project(root, replace=True)
    assert result.tuning == "replaced" and "batch_size" not in result.params_written
    assert [t.name for t in load_project(root).tunables] == result.params_written


def test_prepare_with_output_config_path_never_lists_it(tmp_path: Path) -> None:
    root = copy_example("yaml-config", tmp_path)
    init_project(root, baseline_config="configs/base.yaml")
    pfile = root / ".trainee" / "project.yaml"
    pfile.write_text(pfile.read_text() + "output:\n  config_path: output.root\n")
    prepare_project(root)
    spec = load_project(root)
    assert spec.output.config_path == "output.root"
    assert all(not (t.param.config_path or "").startswith("output") for t in spec.tunables)


def test_prepare_needs_a_valid_project(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    init_project(root)
    pfile = root / ".trainee" / "project.yaml"
    pfile.write_text(pfile.read_text().replace("max_rounds: 3", "max_rounds: 0"))
    before = snapshot(root)
    with pytest.raises(ConfigError, match="max_rounds"):
        prepare_project(root)
    assert snapshot(root) == before


def test_prepare_with_nothing_to_tune(tmp_path: Path) -> None:
    write(tmp_path / "train.py", "print('loss=1')\n")
    init_project(tmp_path)
    result = prepare_project(tmp_path)
    assert result.tuning == "empty" and result.params_written == []
    assert any("no tunable parameters" in n for n in result.notes)


def test_baseline_config_through_a_symlinked_root(tmp_path: Path) -> None:
    root = copy_example("yaml-config", tmp_path)
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    result = init_project(alias, baseline_config=str(alias / "configs" / "base.yaml"))
    assert result.baseline_config == "configs/base.yaml"
    assert result.project_root == str(root)
