"""First contact through the real CLI and daemon: trainee init / prepare / doctor /
run --dry-run on fixture projects laid out like real ones (tests/fixtures/projects)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.daemon import Daemon

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "projects"


def _copy(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(FIXTURES / name, root)
    return root.resolve()


def _rows(daemon: Daemon, root: Path) -> tuple[int, dict[str, dict[str, str]]]:
    result = daemon.cli("doctor", str(root), "--skip-provider-test", "--json")
    return result.returncode, {c["name"]: c for c in result.json()["checks"]}


def test_char_script_needs_one_edited_line(daemon: Daemon, tmp_path: Path) -> None:
    root = _copy("charmodel", tmp_path)
    init = daemon.cli("init", str(root), "--skip-provider-test")
    assert init.returncode == 0, init.stderr
    assert "entrypoint: charlm.py" in init.stdout
    assert "output: --work-dir receives each round's outputs folder" in init.stdout
    assert "limit: --max-steps = -1  <- --max-steps is -1, which sets no limit" in init.stdout
    code, rows = _rows(daemon, root)
    assert code == 1
    assert rows["limits"]["status"] == "fail"
    assert "--max-steps" in rows["limits"]["fix"]
    assert (rows["entrypoint"]["status"], rows["output"]["status"]) == ("pass", "pass")
    pfile = root / ".trainee" / "project.yaml"
    lines = pfile.read_text().splitlines()
    [i] = [i for i, line in enumerate(lines) if "CHOOSE A VALUE" in line]
    lines[i] = "      value: 30"  # the one hand-edited line
    pfile.write_text("\n".join(lines) + "\n")
    prepare = daemon.cli("prepare", str(root), "--skip-provider-test")
    assert prepare.returncode == 0, prepare.stderr + prepare.stdout
    code, rows = _rows(daemon, root)
    assert rows["limits"]["status"] == "pass", rows["limits"]
    dry = daemon.cli("run", str(root), "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr + dry.stdout
    argv = dry.json()["argv"]
    assert argv[argv.index("--max-steps") + 1] == "30"


def test_no_entrypoint_then_command_and_force_keeps_edits(daemon: Daemon, tmp_path: Path) -> None:
    root = _copy("nothing", tmp_path)
    init = daemon.cli("init", str(root), "--skip-provider-test")
    assert init.returncode == 0, init.stderr
    assert "entrypoint: NOT FOUND" in init.stdout
    assert "YOUR_TRAINING_SCRIPT.py" in init.stdout
    code, rows = _rows(daemon, root)
    assert code == 1 and rows["entrypoint"]["status"] == "fail"
    assert "placeholder" in rows["entrypoint"]["detail"]

    missing = daemon.cli("init", str(root), "--force", "--command", "python fit_it.py")
    assert missing.returncode != 0
    assert "fit_it.py" in missing.stderr + missing.stdout

    (root / "fit_it.py").write_text(
        "import argparse\np = argparse.ArgumentParser()\n"
        "p.add_argument('--steps', type=int, default=-1)\n"
        "p.add_argument('--out', default='out')\nargs = p.parse_args()\n"
    )
    pfile = root / ".trainee" / "project.yaml"
    pfile.write_text(pfile.read_text().replace("max_rounds: 3", "max_rounds: 5"))
    again = daemon.cli(
        "init", str(root), "--force", "--skip-provider-test", "--command", "python fit_it.py"
    )
    assert again.returncode == 0, again.stderr
    assert "kept your run.max_rounds: 5" in again.stdout
    assert "replaced launch.command" in again.stdout and "given on the command line" in again.stdout
    text = pfile.read_text()
    assert "command: [python, fit_it.py]" in text and "max_rounds: 5" in text
    assert "flag: --out" in text  # output.flag from the option's name
    code, rows = _rows(daemon, root)
    assert rows["entrypoint"]["status"] == "pass"
    assert rows["limits"]["status"] == "fail" and "--steps" in rows["limits"]["detail"]


def test_hydra_app_gets_hydra_style_and_doctor_checks_its_output(
    daemon: Daemon, tmp_path: Path
) -> None:
    root = _copy("hydra_app", tmp_path)
    init = daemon.cli("init", str(root), "--skip-provider-test")
    assert init.returncode == 0, init.stderr
    text = (root / ".trainee" / "project.yaml").read_text()
    assert "config_style: hydra" in text and "flag: hydra.run.dir" in text
    code, rows = _rows(daemon, root)
    assert rows["output"]["status"] == "pass" and rows["limits"]["status"] == "pass"
    pfile = root / ".trainee" / "project.yaml"
    lines = [
        line
        for line in text.splitlines()
        if "config_style" not in line and "hydra.run.dir" not in line and line != "output:"
    ]
    pfile.write_text("\n".join(lines) + "\n")
    # Hydra's outputs/ then goes under the round's scratch working folder: a warning
    code, rows = _rows(daemon, root)
    assert code == 0 and rows["output"]["status"] == "warn", rows["output"]
    assert "{round_dir}/cwd" in rows["output"]["detail"]
    assert "hydra.run.dir" in rows["output"]["fix"]
    # without the scratch folder it would write into the read-only project: a failure
    text = pfile.read_text()
    assert "  working_dir: .\n" in text
    pfile.write_text(text.replace("  working_dir: .\n", "  working_dir: .\n  scratch_cwd: false\n"))
    code, rows = _rows(daemon, root)
    assert code == 1 and rows["output"]["status"] == "fail"
    assert "hydra.run.dir" in rows["output"]["fix"]
