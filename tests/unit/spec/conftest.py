"""A real temporary training project on disk, and helpers to hash its tree."""

from __future__ import annotations

import hashlib
import os
import re
import textwrap
from pathlib import Path

import pytest

README = Path("/work/shared/reference/trainee-readme.txt")

BASE_CONFIG = """\
# baseline config of the fake project
output:
  root: outputs/base
optimizer:
  name: adam
  lr: 0.1
fit:
  term_weights:
    theta: 5.0
model:
  layers: 4
  dropout: true
logging:
  dir: logs
"""


def make_project(root: Path) -> Path:
    """A project with data/, train.py, configs/base.yaml and an empty .trainee/."""
    (root / "data").mkdir(parents=True)
    (root / "data" / "train.csv").write_text("x,y\n1,2\n")
    (root / "configs").mkdir()
    (root / "configs" / "base.yaml").write_text(BASE_CONFIG)
    (root / "train.py").write_text("print('val_loss=1.0')\n")
    (root / ".trainee" / "logs").mkdir(parents=True)
    return root.resolve()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "proj")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def tree_hash(root: Path) -> dict[str, str]:
    """Every file and symlink under ``root`` -> sha256 of its bytes (or link target)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(filenames + dirnames):
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                out[rel] = "link:" + os.readlink(path)
            elif path.is_file():
                out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


def readme_example(name: str) -> str:
    """The ``Example .trainee/<name>:`` block of the product spec, verbatim."""
    text = README.read_text()
    start = text.index(f"Example .trainee/{name}:")
    body = text[start:].split("\n", 1)[1]
    ends = {
        "project.yaml": "run.timeout_minutes is the only",
        "tuning.yaml": "For config-backed params",
    }
    body = body[: body.index(ends[name])]
    return body.strip("\n") + "\n"


def marked_line(text: str) -> int:
    """The 1-based line of ``text`` carrying the ``#<`` marker."""
    for i, line in enumerate(textwrap.dedent(text).splitlines(), 1):
        if re.search(r"#<\s*$", line):
            return i
    raise AssertionError("no #< marker in the case text")
