"""Discovery reads project code and never runs it: no import, no exec, no side effect."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from trainee.discovery.context import build_context
from trainee.discovery.init import init_project, prepare_project
from trainee.discovery.scan import discover
from trainee.discovery.tunables import discover_tunables

from .conftest import write

SIDE_EFFECT = """
import pathlib
import sys
pathlib.Path({marker!r}).write_text("executed {name}")
print("SIDE EFFECT {name}")
sys.stderr.write("SIDE EFFECT {name}\\n")
"""


def _booby_trapped(root: Path, marker: Path) -> list[str]:
    """A project whose every Python file writes ``marker`` and prints when run or imported."""
    files = {
        "train_sidefx_q7z.py": (
            "import argparse\n"
            "p = argparse.ArgumentParser()\n"
            "p.add_argument('--lr', type=float, default=0.1)\n"
            "p.add_argument('--epochs', type=int, default=3)\n"
            "exec(open('configurator.py').read())\n"
        ),
        "configurator.py": "",
        "main.py": "import click\n@click.command()\n@click.option('--lr', default=0.1)\ndef m(lr): pass\n",
        "pkg_sidefx_q7z/__init__.py": "",
        "pkg_sidefx_q7z/__main__.py": "from pkg_sidefx_q7z.cli import main\n",
        "pkg_sidefx_q7z/cli.py": "import typer\ndef main(lr: float = 0.1): pass\ntyper.run(main)\n",
        "setup.py": "",
        "conftest.py": "",
    }
    for rel, body in files.items():
        trap = SIDE_EFFECT.format(marker=str(marker), name=rel)
        write(root / rel, trap + body)
    write(
        root / "pyproject.toml",
        '[project]\nname = "x"\n[project.scripts]\nx-train = "pkg_sidefx_q7z.cli:main"\n',
    )
    write(root / "configs" / "base.yaml", "lr: 0.1\n")
    return ["train_sidefx_q7z", "pkg_sidefx_q7z", "pkg_sidefx_q7z.cli", "configurator"]


def test_nothing_in_discovery_executes_project_code(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "proj"
    marker = tmp_path / "EXECUTED"
    modules = _booby_trapped(root, marker)
    path_before = list(sys.path)

    d = discover(root)
    build_context(root, d)
    init_project(root, baseline_config="configs/base.yaml")
    prepare_project(root)
    discover_tunables(root, apply=True, replace=True)
    init_project(root, force=True)

    assert not marker.exists()
    out, err = capfd.readouterr()
    assert "SIDE EFFECT" not in out and "SIDE EFFECT" not in err
    assert not any(m in sys.modules for m in modules)
    assert sys.path == path_before
    # and the files were really understood (the test is not vacuous)
    assert {e.path for e in d.entrypoints} >= {
        "train_sidefx_q7z.py",
        "main.py",
        "pkg_sidefx_q7z/__main__.py",
        "pkg_sidefx_q7z/cli.py",
    }
    best = d.best
    assert best is not None and best.path == "train_sidefx_q7z.py"
    assert [o.flag for o in best.options] == ["--lr", "--epochs"]
