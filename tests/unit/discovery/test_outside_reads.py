"""A script that reads a folder beside the project through its own location (a
monorepo's shared ``Datasets``): init names it in ``advanced.read_only_paths``, so a
guarded round can read it; paths inside the project or missing ones are left out."""

from __future__ import annotations

from pathlib import Path

from tests.unit.discovery.conftest import write
from trainee.discovery import init_project
from trainee.discovery.outputs import file_relative_paths
from trainee.spec import load_project

SCRIPT = """
import argparse
import os
from os import path
from pathlib import Path

DATASETS_PATH = path.join(path.dirname(__file__), "..", "..", "Datasets")
VOCAB = Path(__file__).resolve().parents[1] / "shared" / "vocab.txt"
LOCAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
GONE = Path(__file__).parent / ".." / "missing"

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, default=0.01)
p.parse_args()
print("val_loss=0.5")
"""


def test_paths_built_from_the_script_location_are_found() -> None:
    found = dict((p, line) for line, p in file_relative_paths(SCRIPT))
    assert set(found) == {"../../Datasets", "../shared/vocab.txt", "data", "../missing"}
    assert found["../../Datasets"] == 7
    assert file_relative_paths("x = os.path.join(base, '..', 'data')\n") == []


def test_init_names_the_folders_outside_the_project_it_reads(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    write(repo / "Datasets" / "MNIST" / "x.bin", "x")
    write(repo / "examples" / "shared" / "vocab.txt", "a b")
    root = repo / "examples" / "basics"
    write(root / "train.py", SCRIPT)
    write(root / "data" / "train.txt", "abc")
    init_project(root)
    text = (root / ".trainee" / "project.yaml").read_text()
    assert "read_only_paths:" in text and "outside the project" in text
    spec = load_project(root)
    assert spec.advanced.read_only_paths == ("../../Datasets", "../shared/vocab.txt")
