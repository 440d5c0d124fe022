"""Real project trees on disk for the discovery tests: the two examples and synthetic layouts."""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def copy_example(name: str, dest: Path) -> Path:
    """A copy of ``examples/<name>`` without its ready-made ``.trainee/``."""
    target = dest / name
    shutil.copytree(EXAMPLES / name, target, ignore=shutil.ignore_patterns(".trainee", "outputs"))
    return target.resolve()


def snapshot(root: Path) -> dict[str, str]:
    """Every path under ``root`` -> sha256 of its bytes, ``dir`` or its link target."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            elif path.is_dir():
                out[rel] = "dir"
            else:
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


ARGPARSE_TRAIN = '''
"""Train a tiny classifier.

Prints `val_loss=<x>` after every epoch.
"""
import argparse


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, default=3e-4, help="learning rate")
    p.add_argument("--max-steps", type=int, default=500, help="training budget")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data-dir", default="data")
    p.add_argument("--output-dir", default="out")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--amp", action="store_true")
    p.add_argument("--augment", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--num-workers", type=int, default=4)
    return p.parse_args()


if __name__ == "__main__":
    print(f"val_loss={parse().lr}")
'''

CLICK_TRAIN = '''
"""Train with click."""
import click


@click.command()
@click.option("--lr", "--learning-rate", "learning_rate", type=float, default=1e-3, help="step size")
@click.option("--epochs", type=int, default=10, help="passes over the data")
@click.option("--batch-size", type=click.IntRange(1, 48), default=32)
@click.option("--optimizer", type=click.Choice(["adam", "sgd"]), default="adam")
@click.option("--shuffle/--no-shuffle", default=True)
@click.option("--data-root", type=click.Path(), default="data")
@click.option("--weight-decay", type=click.FloatRange(0, 1), default=0.0)
def main(learning_rate, epochs, batch_size, optimizer, shuffle, data_root, weight_decay):
    click.echo(f"loss={learning_rate}")


if __name__ == "__main__":
    main()
'''

TYPER_TRAIN = '''
import typer

app = typer.Typer()


@app.command()
def train(
    name: str = typer.Argument(...),
    lr: float = 1e-3,
    epochs: int = typer.Option(10, help="passes"),
    mixed: bool = False,
    hidden_size: int = typer.Option(256, min=16, max=300),
):
    """Train with typer."""
    print(lr)


if __name__ == "__main__":
    app()
'''

CONFIGURATOR_TRAIN = """
# nanoGPT-style globals, overridden by --name=value through configurator.py
out_dir = 'out'
batch_size = 12
learning_rate = 6e-4  # max learning rate
max_iters = 5000
dropout = 0.0
compile = True
exec(open('configurator.py').read())
print(learning_rate)
"""

HYDRA_TRAIN = '''
"""Train with Hydra."""
import hydra
from omegaconf import DictConfig


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    print(cfg)


if __name__ == "__main__":
    main()
'''


def layout_uv_lock(root: Path) -> None:
    write(root / "uv.lock", "version = 1\n")
    write(root / "pyproject.toml", '[project]\nname = "p"\n')
    write(root / "train.py", ARGPARSE_TRAIN)
    (root / "data").mkdir()


def layout_uv_tool(root: Path) -> None:
    write(root / "pyproject.toml", '[project]\nname = "p"\n\n[tool.uv]\ndev-dependencies = []\n')
    write(root / "train.py", ARGPARSE_TRAIN)


def layout_venv(root: Path) -> None:
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / "bin" / "python").symlink_to(sys.executable)
    write(root / ".venv" / "pyvenv.cfg", "home = /usr/bin\n")
    # a train.py inside the venv must never count as the project's entrypoint
    write(root / ".venv" / "lib" / "train.py", ARGPARSE_TRAIN)
    write(root / "train.py", ARGPARSE_TRAIN)


def layout_conda(root: Path) -> None:
    write(root / "environment.yml", "name: trainer-env\nchannels: [conda-forge]\n")
    write(root / "train.py", ARGPARSE_TRAIN)


def layout_system(root: Path) -> None:
    write(root / "requirements.txt", "numpy\n")
    write(root / "train.py", ARGPARSE_TRAIN)


def layout_hydra(root: Path) -> None:
    write(root / "train.py", HYDRA_TRAIN)
    write(
        root / "conf" / "config.yaml",
        """
        defaults:
          - optimizer: adam
          - model: small
          - _self_

        trainer:
          max_epochs: 5
          gradient_clip_val: 1.0   # clip the global grad norm
        seed: 0
        output_dir: outputs
        """,
    )
    write(root / "conf" / "optimizer" / "adam.yaml", "lr: 0.001\nbetas: [0.9, 0.999]\n")
    write(root / "conf" / "optimizer" / "sgd.yaml", "lr: 0.1\nmomentum: 0.9\n")
    write(root / "conf" / "model" / "small.yaml", "hidden_size: 128\nnum_layers: 2\ndropout: 0.1\n")
    write(root / "conf" / "model" / "large.yaml", "hidden_size: 512\nnum_layers: 8\ndropout: 0.1\n")


def layout_click(root: Path) -> None:
    write(root / "train_click.py", CLICK_TRAIN)
    write(root / "data" / "a.csv", "x\n1\n")


def layout_typer(root: Path) -> None:
    write(root / "main.py", TYPER_TRAIN)


def layout_pyproject_script(root: Path) -> None:
    write(
        root / "pyproject.toml",
        '[project]\nname = "tiny"\n\n[project.scripts]\ntiny-train = "tiny.cli:main"\n',
    )
    write(root / "src" / "tiny" / "__init__.py", "")
    write(
        root / "src" / "tiny" / "cli.py",
        '''
        import argparse


        def main():
            """Train tiny."""
            p = argparse.ArgumentParser()
            p.add_argument("--learning-rate", type=float, default=0.01)
            p.add_argument("--epochs", type=int, default=3)
            p.parse_args()
        ''',
    )


def layout_package_main(root: Path) -> None:
    write(root / "trainer" / "__init__.py", "")
    write(root / "trainer" / "__main__.py", "from trainer.cli import main\n\nmain()\n")
    write(
        root / "trainer" / "cli.py",
        """
        import argparse


        def main():
            p = argparse.ArgumentParser()
            p.add_argument("--lr", type=float, default=0.05)
            p.add_argument("--num-epochs", type=int, default=7)
            p.parse_args()
        """,
    )


def layout_configurator(root: Path) -> None:
    write(root / "train.py", CONFIGURATOR_TRAIN)
    write(root / "configurator.py", "import sys\n")


LAYOUTS: dict[str, Callable[[Path], None]] = {
    "uv_lock": layout_uv_lock,
    "uv_tool": layout_uv_tool,
    "venv": layout_venv,
    "conda": layout_conda,
    "system": layout_system,
    "hydra": layout_hydra,
    "click": layout_click,
    "typer": layout_typer,
    "pyproject_script": layout_pyproject_script,
    "package_main": layout_package_main,
    "configurator": layout_configurator,
}


@pytest.fixture
def make_layout(tmp_path: Path) -> Callable[[str], Path]:
    def make(name: str) -> Path:
        root = tmp_path / name
        root.mkdir()
        LAYOUTS[name](root)
        return root.resolve()

    return make
