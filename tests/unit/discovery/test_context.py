"""context.md: built from README, docstrings, options and config keys; bounded; kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from trainee.discovery.context import (
    MAX_CONTEXT_CHARS,
    build_context,
    write_context,
    write_context_if_missing,
)
from trainee.discovery.init import init_project
from trainee.discovery.scan import discover
from trainee.spec import load_project_file

from .conftest import EXAMPLES, copy_example, write


def test_mlp_flags_context() -> None:
    root = EXAMPLES / "mlp-flags"
    text = build_context(root, discover(root))
    assert text.startswith("# Project context\n")
    assert "## From README.md" in text
    assert "### mlp-flags: a numpy MLP driven by command-line flags" in text  # heading demoted
    assert "## Entrypoint: `train.py` (argparse)" in text
    assert "Train a one-hidden-layer MLP regressor" in text  # the docstring
    assert "| `--lr` | float | 0.001 | Adam learning rate (default 1e-3) |" in text
    assert "| `--data-root` | path | HERE / 'data' |" in text
    assert "- `data/`: folder named 'data' (2 files)" in text
    assert "`system`" in text


def test_context_with_project_file_shows_launch_and_baseline(tmp_path: Path) -> None:
    root = copy_example("yaml-config", tmp_path)
    init_project(root, baseline_config="configs/base.yaml")
    project = load_project_file(root / ".trainee" / "project.yaml")
    text = build_context(root, discover(root), project)
    assert "## How trainee runs it" in text
    assert "- command: `python train.py`" in text
    assert "## Baseline config: `configs/base.yaml`" in text
    assert "| `optimizer.lr` | 0.1 |" in text
    assert "| `loss.weights.l2` | 0.0001 |" in text


def test_context_without_baseline_labels_the_config_a_suggestion() -> None:
    root = EXAMPLES / "yaml-config"
    text = build_context(root, discover(root))
    assert "## Config file `configs/base.yaml` (detected; not chosen as the baseline)" in text


def test_context_is_bounded(tmp_path: Path) -> None:
    write(tmp_path / "README.md", "# Big\n\n```\ncode\n" + ("word " * 40 + "\n\n") * 2000)
    options = "\n".join(
        f"p.add_argument('--opt{i}', type=float, default={i}.5, help='{'h' * 300}')"
        for i in range(200)
    )
    write(
        tmp_path / "train.py",
        f'"""{"doc " * 2000}"""\nimport argparse\np = argparse.ArgumentParser()\n{options}\n',
    )
    write(tmp_path / "configs" / "big.yaml", "\n".join(f"k{i}: {i}" for i in range(500)) + "\n")
    text = build_context(tmp_path, discover(tmp_path))
    assert len(text) <= MAX_CONTEXT_CHARS + 100
    assert "_(excerpt)_" in text
    assert text.count("```") % 2 == 0  # a fence cut by the excerpt is closed
    assert "| ... | | | 140 more |" in text
    assert "| ... | 420 more keys |" in text


def test_context_for_other_layouts(make_layout: Callable[[str], Path]) -> None:
    texts = {}
    for name in ("click", "hydra", "package_main", "typer"):
        root = make_layout(name)
        texts[name] = build_context(root, discover(root))
        assert "## Entrypoint:" in texts[name]
    assert "Hydra: config_path `conf`, config_name `config`" in texts["hydra"]
    assert "Options (read from `trainer/cli.py`):" in texts["package_main"]
    assert "| `--shuffle` | bool | True |" in texts["click"]


def test_write_context_if_missing(tmp_path: Path) -> None:
    root = copy_example("mlp-flags", tmp_path)
    d = discover(root)
    assert write_context_if_missing(root, d) is True
    path = root / ".trainee" / "context.md"
    path.write_text("edited by hand\n")
    assert write_context_if_missing(root, d) is False
    assert path.read_text() == "edited by hand\n"
    assert write_context(root, d) == path
    assert path.read_text().startswith("# Project context")
