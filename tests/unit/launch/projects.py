"""Real training projects on disk for the launch tests (also used by tests/integration)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from trainee.launch.layout import ProjectLayout, RoundLayout
from trainee.spec import ProjectSpec, load_project

SHOW_ARGV = "import json, sys\nprint(json.dumps(sys.argv[1:]))\n"
"""A training script that prints its arguments as JSON."""

NO_PARAMS = "version: 1\nparams: []\n"


def make_project(
    root: Path,
    project_yaml: str,
    tuning_yaml: str = NO_PARAMS,
    files: dict[str, str] | None = None,
) -> ProjectSpec:
    """Write ``.trainee/project.yaml``, ``tuning.yaml`` and ``files`` under ``root``
    (``train.py`` prints its argv as JSON unless given) and load the spec."""
    root.mkdir(parents=True, exist_ok=True)
    all_files = {"train.py": SHOW_ARGV, **(files or {})}
    for rel, text in all_files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    trainee = root / ".trainee"
    trainee.mkdir(exist_ok=True)
    (trainee / "project.yaml").write_text(textwrap.dedent(project_yaml))
    (trainee / "tuning.yaml").write_text(textwrap.dedent(tuning_yaml))
    return load_project(root)


def round_of(spec: ProjectSpec, session: int = 1, index: int = 1) -> RoundLayout:
    """The layout of a round of ``spec``'s project (runtime data inside .trainee/)."""
    return ProjectLayout.for_root(spec.project_root, {}).session(session).round(index)
