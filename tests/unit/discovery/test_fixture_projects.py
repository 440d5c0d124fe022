"""First contact with projects laid out like real ones (tests/fixtures/projects): what
init writes, how many lines a user must still edit, and what doctor's entrypoint,
output and limits rows say."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.extras import needs
from tests.unit.discovery.conftest import write
from trainee.discovery import discover, init_project, prepare_project
from trainee.discovery.hydra import compose_hydra, hydra_overrides
from trainee.discovery.init import has_cuda
from trainee.discovery.readme import parse_command
from trainee.discovery.runplan import check_entrypoint, check_limits, check_output
from trainee.errors import ConfigError
from trainee.spec import ProjectFileSpec, load_project

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "projects"


def project(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root)
    return root.resolve()


def loaded(root: Path) -> ProjectFileSpec:
    return load_project(root).to_project_file()


def verdicts(root: Path, mode: str = "guarded") -> dict[str, str]:
    spec = loaded(root)
    return {
        "entrypoint": check_entrypoint(root, spec)[0],
        "output": check_output(root, spec, mode)[0],
        "limits": check_limits(root, spec)[0],
    }


# name: (command, output.flag, config_style, fixed_args, values to choose, doctor rows)
EXPECTED: dict[str, tuple[Any, ...]] = {
    "charmodel": (
        ("python", "charlm.py"),
        "--work-dir",
        "flag",
        [("--max-steps", -1)],
        ["--max-steps"],
        {"entrypoint": "pass", "output": "pass", "limits": "fail"},
    ),
    "nanolike": (
        ("python", "train.py", "config/train_small.py"),
        "--out_dir",
        "flag",
        [("--max_iters", 200), ("--warmup_iters", 10), ("--lr_decay_iters", 200)],
        [],
        {"entrypoint": "pass", "output": "pass", "limits": "pass"},
    ),
    "hydra_app": (
        ("python", "app.py"),
        "hydra.run.dir",
        "hydra",
        [
            ("trainer.max_epochs", 20),
            ("trainer.warmup_epochs", 2),
            ("checkpoint_dir", "{outputs_dir}/checkpoint_dir"),
        ],
        [],
        {"entrypoint": "pass", "output": "pass", "limits": "pass"},
    ),
    "clicky": (
        ("python", "fit.py"),
        "--output-dir",
        "flag",
        [("--epochs", 0)],
        ["--epochs"],
        {"entrypoint": "pass", "output": "pass", "limits": "fail"},
    ),
    "lightning_cli": (
        ("python", "main.py", "fit"),
        "--trainer.default_root_dir",
        "flag",
        [("--trainer.max_steps", -1)],
        ["--trainer.max_steps"],
        {"entrypoint": "pass", "output": "pass", "limits": "fail"},
    ),
    "hf_script": (
        ("python", "run_clm.py"),
        "--output_dir",
        "flag",
        [("--num_train_epochs", 3.0), ("--max_steps", -1), ("--warmup_steps", 0)],
        [],
        {"entrypoint": "pass", "output": "pass", "limits": "pass"},
    ),
    "pkgmod": (
        ("python", "-m", "mypkg.train"),
        "--save-dir",
        "flag",
        [("--epochs", 3)],  # as its README runs it
        [],
        {"entrypoint": "pass", "output": "pass", "limits": "pass"},
    ),
    "nothing": (
        ("python", "YOUR_TRAINING_SCRIPT.py"),
        None,
        "flag",
        [],
        [],
        {"entrypoint": "fail", "output": "pass", "limits": "pass"},
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_init_on_fixture_projects(tmp_path: Path, name: str) -> None:
    command, output_flag, style, fixed, choose, rows = EXPECTED[name]
    root = project(name, tmp_path)
    result = init_project(root)
    spec = loaded(root)
    assert spec.launch.command == command
    assert spec.output.flag == output_flag == result.output_flag
    assert spec.launch.config_style == style
    assert [(a.flag, a.value) for a in spec.run.fixed_args] == fixed
    text = (root / ".trainee" / "project.yaml").read_text()
    chosen = [line for line in text.splitlines() if "CHOOSE A VALUE" in line]
    assert len(chosen) == len(choose)
    assert set(choose) <= {x.flag for x in result.limits if x.problem}
    for flag in choose:
        assert any(flag in n and "choose" in n for n in result.notes)
    assert verdicts(root) == rows
    if name == "charmodel":  # the README's -i names.txt is kept, its -o left to output.flag
        assert [(a.flag, a.value) for a in spec.launch.args] == [("-i", "names.txt")]
        assert any("-o names (output.flag" in n for n in result.notes)


@pytest.mark.parametrize(("name", "value"), [("charmodel", 300), ("clicky", 2)])
def test_one_edited_line_sets_the_limit(tmp_path: Path, name: str, value: int) -> None:
    root = project(name, tmp_path)
    init_project(root)
    pfile = root / ".trainee" / "project.yaml"
    lines = pfile.read_text().splitlines()
    [i] = [i for i, line in enumerate(lines) if "CHOOSE A VALUE" in line]
    lines[i] = f"      value: {value}"
    pfile.write_text("\n".join(lines) + "\n")
    assert verdicts(root)["limits"] == "pass"


def test_very_long_budget_and_its_schedule_must_be_chosen(tmp_path: Path) -> None:
    root = project("nanolike", tmp_path)
    (root / "README.md").unlink()  # no command of the docs: train.py's own globals
    result = init_project(root)
    spec = loaded(root)
    assert spec.launch.command == ("python", "train.py")
    assert [x.flag for x in result.limits if x.problem] == ["--max_iters", "--lr_decay_iters"]
    fixed = {a.flag: a.value for a in spec.run.fixed_args}
    assert fixed == {"--max_iters": 600000, "--warmup_iters": 2000, "--lr_decay_iters": 600000}
    status, detail, fix = check_limits(root, spec)
    assert status == "fail" and "600000" in detail and "--max_iters" in fix
    pfile = root / ".trainee" / "project.yaml"
    text = pfile.read_text()
    pfile.write_text(text.replace("value: 600000  # CHOOSE", "value: 500  # CHOOSE", 1))
    status, detail, _ = check_limits(root, loaded(root))
    assert status == "fail" and "--lr_decay_iters" in detail  # the tied length still too
    pfile.write_text(text.replace("value: 600000  # CHOOSE", "value: 500  # CHOOSE"))
    status, detail, _ = check_limits(root, loaded(root))  # warmup 2000 > 500: a warning
    assert status == "warn" and "--warmup_iters = 2000 is longer than --max_iters = 500" in detail


def test_unredirected_outputs_fail_with_the_fix(tmp_path: Path) -> None:
    for name, flag in (("charmodel", "--work-dir"), ("nanolike", "--out_dir")):
        root = project(name, tmp_path)
        init_project(root)
        pfile = root / ".trainee" / "project.yaml"
        text = pfile.read_text()
        pfile.write_text(re.sub(r"(?m)^output:\n  flag: .*\n", "", text))
        # a guarded round runs in its scratch folder: the default lands there, not in
        # the outputs folder (a warning); without the scratch folder it cannot be written
        status, detail, fix = check_output(root, loaded(root), "guarded")
        assert status == "warn" and "{round_dir}/cwd" in detail, detail
        assert fix == f"set output.flag: {flag} in project.yaml"
        no_scratch(pfile)
        status, detail, fix = check_output(root, loaded(root), "guarded")
        assert status == "fail" and "cannot write" in detail, detail
        assert fix == f"set output.flag: {flag} in project.yaml"
        assert check_output(root, loaded(root), "unsafe")[0] == "pass"
    root = project("hydra_app", tmp_path)
    init_project(root)
    pfile = root / ".trainee" / "project.yaml"
    text = pfile.read_text().replace("  config_style: hydra", "")
    pfile.write_text(re.sub(r"(?m)^output:\n  flag: .*\n", "", text))
    status, detail, fix = check_output(root, loaded(root), "guarded")
    assert status == "warn" and "Hydra" in detail and "hydra.run.dir" in fix
    no_scratch(pfile)
    status, detail, fix = check_output(root, loaded(root), "guarded")
    assert status == "fail" and "Hydra" in detail and "hydra.run.dir" in fix


def no_scratch(pfile: Path) -> None:
    """advanced.scratch_cwd: false — the job runs in the read-only project itself."""
    text = pfile.read_text()
    assert "  working_dir: .\n" in text
    pfile.write_text(text.replace("  working_dir: .\n", "  working_dir: .\n  scratch_cwd: false\n"))


def test_entrypoint_row_fails_on_a_missing_script(tmp_path: Path) -> None:
    root = project("charmodel", tmp_path)
    init_project(root)
    pfile = root / ".trainee" / "project.yaml"
    pfile.write_text(pfile.read_text().replace("[python, charlm.py]", "[python, train.py]"))
    status, detail, _ = check_entrypoint(root, loaded(root))
    assert status == "fail" and "train.py" in detail


def test_init_command_names_the_entrypoint(tmp_path: Path) -> None:
    root = project("nothing", tmp_path)
    write(
        root / "tools" / "fit_model.py",
        """
        import sys
        steps = int(sys.argv[sys.argv.index("--steps") + 1])
        """,
    )
    with pytest.raises(ConfigError, match=r"missing\.py"):
        init_project(root, command="python missing.py")
    assert not (root / ".trainee").exists()
    with pytest.raises(ConfigError, match="cannot be split"):
        init_project(root, command="python 'unclosed")
    result = init_project(root, command="python tools/fit_model.py --steps 5")
    assert result.entrypoint == "tools/fit_model.py"
    assert loaded(root).launch.command == ("python", "tools/fit_model.py", "--steps", "5")
    # the limit check runs for a given command: here the script has no limit option
    root2 = project("charmodel", tmp_path / "b")
    result = init_project(root2, command="python charlm.py -i names.txt")
    assert [x.flag for x in result.limits if x.problem] == ["--max-steps"]
    result = init_project(root2, command="python charlm.py --max-steps 40", force=True)
    assert result.limits == [] and check_limits(root2, loaded(root2))[0] == "pass"


def test_entrypoints_by_content_ranked_by_the_readme(tmp_path: Path) -> None:
    d = discover(project("charmodel", tmp_path))
    assert d.best is not None and d.best.path == "charlm.py"
    assert d.best.readme_refs == ["README.md:6", "README.md:10"]
    d = discover(project("nanolike", tmp_path))
    assert [e.path for e in d.entrypoints][:2] == ["train.py", "sample.py"]
    d = discover(project("pkgmod", tmp_path))
    assert d.best is not None and (d.best.kind, d.best.module) == ("module", "mypkg.train")
    d = discover(project("lightning_cli", tmp_path))
    assert d.best is not None and d.best.framework == "lightning_cli"
    assert {"--model.hidden_dim", "--data.batch_size", "--trainer.max_epochs"} <= {
        o.flag for o in d.best.options
    }
    d = discover(project("hf_script", tmp_path))
    assert d.best is not None and d.best.framework == "hf_argparser"
    opts = {o.flag: o for o in d.best.options}
    assert opts["--dropout"].default == 0.1 and opts["--dropout"].help == "dropout of the head"
    assert opts["--block_size"].default == 128


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("python makemore.py -i names.txt", ("makemore.py", None, ["-i", "names.txt"])),
        ("python3 -u -m pkg.train --lr 3", (None, "pkg.train", ["--lr", "3"])),
        ("uv run python train.py", ("train.py", None, [])),
        (
            "torchrun --standalone --nproc_per_node 8 train.py cfg.py",
            ("train.py", None, ["cfg.py"]),
        ),
        ("CUDA_VISIBLE_DEVICES=0 accelerate launch run.py --x", ("run.py", None, ["--x"])),
        ("python -m torch.distributed.run --nproc_per_node=2 a/b.py", ("a/b.py", None, [])),
        ("pip install -e .", None),
        ("python -m pip install x", (None, "pip", ["install", "x"])),
    ],
)
def test_readme_commands(line: str, expected: Any) -> None:
    parsed = parse_command(line.split())
    assert (parsed[:3] if parsed else None) == expected


def test_hydra_composition_follows_group_choices(tmp_path: Path) -> None:
    root = project("hydra_app", tmp_path)
    write(
        root / "conf" / "experiment" / "fast.yaml",
        "# @package _global_\ntrainer:\n  max_epochs: 2\n",
    )
    init_project(root)
    pfile = root / ".trainee" / "project.yaml"
    pfile.write_text(
        pfile.read_text().replace(
            "  config_style: hydra",
            "  config_style: hydra\n  args:\n    - flag: model\n      value: cnn",
        )
    )
    spec = loaded(root)
    ep = discover(root).best
    assert ep is not None
    overrides = hydra_overrides(spec, ep)
    assert overrides[0] == "model=cnn"
    cfg = compose_hydra(root, ep, ["model=cnn", "+experiment=fast", "~seed"])
    assert cfg is not None
    assert cfg.groups == {"model": "cnn", "optimizer": "adam", "experiment": "fast"}
    assert cfg.data["model"] == {"channels": 32, "kernel_size": 3, "dropout": 0.2}
    assert cfg.get("trainer.max_epochs") == 2 and not cfg.has("seed")
    assert cfg.sources["model.channels"] == "conf/model/cnn.yaml"
    assert cfg.group_options["model"] == ["cnn", "mlp"]
    # an interpolation stays text
    write(
        root / "conf" / "config.yaml",
        (root / "conf" / "config.yaml").read_text() + "run_dir: ${hydra:run.dir}\n",
    )
    cfg = compose_hydra(root, ep, ())
    assert cfg is not None and cfg.get("run_dir") == "${hydra:run.dir}"


def test_field_patterns(tmp_path: Path) -> None:
    """A file-valued output option, LightningCLI trainer_defaults with run=False, a
    dataset *name* option, packages and config groups named data, conda absent."""
    root = tmp_path / "p"
    write(
        root / "main.py",
        """
        import argparse
        p = argparse.ArgumentParser()
        p.add_argument("--epochs", type=int, default=40)
        p.add_argument("--save", type=str, default="model.pt", help="path to save the final model")
        p.add_argument("--dataset", default="", help="dataset type")
        p.add_argument("--data-dir", metavar="DIR", default="data", help="path to dataset")
        p.add_argument("--device", default="cuda", help="device to use for training")
        if __name__ == "__main__":
            p.parse_args()
        """,
    )
    write(root / "data" / "train.txt", "a b c\n")
    write(
        root / "README.md", "    python main.py --epochs 2 --bogus 1 --num_workers 4 --save $OUT\n"
    )
    write(root / "src" / "data" / "__init__.py", "")
    write(root / "configs" / "data" / "mnist.yaml", "batch_size: 4\n")
    write(root / "environment.yml", "name: myenv\n")
    result = init_project(root.resolve(), env={"PATH": str(tmp_path / "empty")})
    spec = loaded(root)
    assert spec.launch.environment == "system"
    assert any("conda is not on PATH" in n for n in result.notes)
    assert spec.output.flag is None
    assert [(a.flag, a.value) for a in spec.run.fixed_args] == [
        ("--epochs", 2),  # the README's budget
        ("--save", "{outputs_dir}/model.pt"),
    ]
    [dropped] = [n for n in result.notes if "not copied" in n]
    for word in ("--bogus 1 (not an option", "--num_workers 4 (depends on the machine", "$OUT"):
        assert word in dropped
    assert [(d.path, d.flag) for d in spec.data] == [("data", "--data-dir")]
    assert check_output(root, spec, "guarded")[0] == "pass"
    machine = [] if has_cuda() else [("--device", "cpu")]  # a CUDA default without a GPU
    assert [(a.flag, a.value) for a in spec.launch.args] == machine

    cli = tmp_path / "cli"
    write(
        cli / "autoencoder.py",
        """
        from lightning.pytorch.cli import LightningCLI
        from lightning.pytorch import LightningModule


        class Auto(LightningModule):
            def __init__(self, hidden_dim: int = 64, learning_rate: float = 1e-3):
                super().__init__()


        def cli_main():
            cli = LightningCLI(Auto, run=False, trainer_defaults={"max_epochs": 10})
            cli.trainer.fit(cli.model)


        if __name__ == "__main__":
            cli_main()
        """,
    )
    write(
        cli / "README.md",
        "Run `python autoencoder.py --trainer.accelerator cpu --seed_everything 7`.\n",
    )
    init_project(cli.resolve())
    spec = loaded(cli)
    assert spec.launch.command == ("python", "autoencoder.py")
    assert [(a.flag, a.value) for a in spec.launch.args] == [("--seed_everything", 7)]
    assert [(a.flag, a.value) for a in spec.run.fixed_args] == [
        ("--trainer.max_epochs", 10),
        ("--trainer.max_steps", -1),
    ]
    assert check_limits(cli, spec)[0] == "pass"


def test_shell_command_with_placeholders_is_read(tmp_path: Path) -> None:
    root = project("charmodel", tmp_path)
    init_project(root)
    pfile = root / ".trainee" / "project.yaml"
    shell = "cd {round_dir} && exec python {project_root}/charlm.py --max-steps 20 {extra_args}"
    pfile.write_text(
        pfile.read_text().replace(
            "  working_dir: .", f"  working_dir: .\n  shell_command: '{shell}'"
        )
    )
    spec = loaded(root)
    assert spec.advanced.shell_command == shell
    assert check_entrypoint(root, spec)[0] == "pass"
    assert prepare_project(root, replace=True).entrypoint == "charlm.py"  # tunables found
    # run.fixed_args come after the command's own words ({extra_args}): its -1 wins
    status, detail, _ = check_limits(root, spec)
    assert status == "fail" and "--max-steps is -1" in detail
    pfile.write_text(pfile.read_text().replace("value: -1  # CHOOSE", "value: 20  # CHOOSE"))
    status, detail, _ = check_limits(root, loaded(root))
    assert status == "pass" and "--max-steps = 20" in detail


@pytest.mark.parametrize("use_library", [pytest.param(True, marks=needs("hydra")), False])
def test_hydra_library_and_static_composition_agree(tmp_path: Path, use_library: bool) -> None:
    root = project("hydra_app", tmp_path)
    write(
        root / "conf" / "experiment" / "fast.yaml",
        "# @package _global_\ntrainer:\n  max_epochs: 2\n",
    )
    ep = discover(root).best
    assert ep is not None
    overrides = ["model=cnn", "+experiment=fast", "~seed", "checkpoint_dir={outputs_dir}/ck"]
    cfg = compose_hydra(root, ep, overrides, use_library=use_library)
    assert cfg is not None and cfg.notes == []
    data = {k: v for k, v in cfg.data.items() if k != "hydra"}
    assert data == {
        "model": {"channels": 32, "kernel_size": 3, "dropout": 0.2},
        "optimizer": {"lr": 0.001, "weight_decay": 0.0},
        "trainer": {"max_epochs": 2, "warmup_epochs": 2, "gradient_clip_val": 1.0},
        "checkpoint_dir": "{outputs_dir}/ck",
    }
    assert cfg.groups == {"model": "cnn", "optimizer": "adam", "experiment": "fast"}
    # a config Hydra itself cannot compose falls back to the static reading, with a note
    write(
        root / "conf" / "config.yaml", "defaults:\n  - model: missing_choice\n  - _self_\nlr: 1\n"
    )
    cfg = compose_hydra(root, ep, (), use_library=use_library)
    assert cfg is not None and cfg.get("lr") == 1
    assert any("missing_choice" in n for n in cfg.notes)


def test_trackers_reporting_and_relative_writes(tmp_path: Path) -> None:
    """MLflow's ./mlruns goes into the round (launch.env), a Trainer reports to no
    installed integration, a file written at a relative path makes doctor warn."""
    root = tmp_path / "m"
    write(
        root / "train.py",
        """
        import sys

        import matplotlib.pyplot as plt
        import mlflow

        alpha = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
        if __name__ == "__main__":
            with mlflow.start_run():
                mlflow.log_metric("rmse", alpha)
            plt.savefig(f"loss_{alpha}.png")
        """,
    )
    init_project(root.resolve())
    spec = loaded(root)
    assert spec.launch.env == {
        "MLFLOW_TRACKING_URI": "file:{outputs_dir}/mlruns",
        "MLFLOW_ALLOW_FILE_STORE": "true",
    }
    status, detail, fix = check_output(root, spec, "guarded")
    assert status == "pass" and "line 10 'loss_{}.png'" in detail and "where they land" in detail
    pfile = root / ".trainee" / "project.yaml"
    no_scratch(pfile)
    status, detail, fix = check_output(root, loaded(root), "guarded")
    assert status == "warn" and "line 10 'loss_{}.png'" in detail
    assert "cd {round_dir} && exec python {project_root}/train.py {extra_args}" in fix
    pfile.write_text(
        pfile.read_text().replace(
            "  working_dir: .",
            "  working_dir: .\n  shell_command: 'cd {round_dir} && exec python "
            "{project_root}/train.py {extra_args}'",
        )
    )
    assert check_output(root, loaded(root), "guarded")[0] == "pass"

    hf = project("hf_script", tmp_path)
    init_project(hf)
    assert ("--report_to", "none") in [(a.flag, a.value) for a in loaded(hf).launch.args]
