"""advanced.read_only_paths, in real bwrap: a folder beside the project (a monorepo's
shared ``../../Datasets``) is readable by a guarded job when named, never writable, and
invisible when not named; a path holding a HOME is refused."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.unit.launch.projects import make_project, round_of
from trainee.errors import ConfigError
from trainee.launch.render import render_round
from trainee.launch.sandbox import wrap

READER = """\
import json, os
seen = {}
target = os.path.join(os.path.dirname(__file__), "..", "..", "Datasets", "mnist.txt")
try:
    seen["read"] = open(target).read()
except OSError as exc:
    seen["read"] = type(exc).__name__
try:
    open(os.path.join(os.path.dirname(target), "new.txt"), "w").write("x")
    seen["write"] = "written"
except OSError as exc:
    seen["write"] = type(exc).__name__
print("SEEN " + json.dumps(seen))
"""

PROJECT = """\
version: 1
launch:
  command: [python3, train.py]
advanced:
  security_mode: guarded
{extra}"""


def run_guarded(root: Path, extra: str) -> dict[str, str]:
    spec = make_project(root, PROJECT.format(extra=extra), files={"train.py": READER})
    rnd = round_of(spec)
    env = {"PATH": os.defpath}
    rendered = wrap(render_round(spec, rnd, {}, base_env=env), spec, rnd, network=False)
    out = subprocess.run(
        rendered.argv, env=rendered.env, cwd="/", capture_output=True, text=True, timeout=60
    )
    line = next(x for x in out.stdout.splitlines() if x.startswith("SEEN "))
    seen: dict[str, str] = json.loads(line[5:])
    return seen


def test_a_named_folder_beside_the_project_is_read_only_and_others_are_unseen(
    tmp_path: Path,
) -> None:
    datasets = tmp_path / "repo" / "Datasets"
    datasets.mkdir(parents=True)
    (datasets / "mnist.txt").write_text("digits")
    root = tmp_path / "repo" / "examples" / "basics"
    named = run_guarded(root, "  read_only_paths: [../../Datasets]\n")
    assert named == {"read": "digits", "write": "OSError"}  # EROFS
    assert not (datasets / "new.txt").exists()
    other = tmp_path / "repo2" / "examples" / "basics"
    (tmp_path / "repo2" / "Datasets").mkdir(parents=True)
    (tmp_path / "repo2" / "Datasets" / "mnist.txt").write_text("digits")
    assert run_guarded(other, "")["read"] == "FileNotFoundError"


@pytest.mark.parametrize("path", ["/", "/home", "missing"])
def test_a_path_holding_a_home_or_missing_is_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(ConfigError, match=r"advanced\.read_only_paths\[0\]"):
        make_project(tmp_path / "p", PROJECT.format(extra=f"  read_only_paths: [{path}]\n"))
