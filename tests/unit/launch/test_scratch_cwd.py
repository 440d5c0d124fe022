"""advanced.scratch_cwd: a guarded round runs in {round_dir}/cwd, links to the working
folder's entries; its command reaches the project's scripts and ``../`` paths as it
would from the project itself."""

from __future__ import annotations

import os
from pathlib import Path

from trainee.launch.render import render_round

from .projects import make_project, round_of

PROJECT = """\
version: 1
launch:
  command: [{command}]
  args:
    - flag: --data
      value: ../shared/data
    - flag: --vocab
      value: ../shared/vocab.txt
    - flag: --out
      value: out
advanced:
  {extra}
"""


def render(root: Path, command: str = "python, train.py", extra: str = "security_mode: guarded"):
    spec = make_project(root, PROJECT.format(command=command, extra=extra), files={"lib.py": ""})
    (root / "data").mkdir()
    rnd = round_of(spec)
    return spec, rnd, render_round(spec, rnd, {}, base_env={"PATH": os.defpath})


def test_a_guarded_round_runs_in_links_to_the_project(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    spec, rnd, shown = render(root)
    work = os.path.realpath(root)
    cwd = rnd.dir / "cwd"
    assert shown.cwd == str(cwd)
    assert sorted(p.name for p in cwd.iterdir()) == ["data", "lib.py", "train.py"]  # no .trainee
    assert os.readlink(cwd / "data") == os.path.join(work, "data")
    assert shown.argv == (
        "python",
        os.path.join(work, "train.py"),
        "--data",
        os.path.normpath(os.path.join(work, "../shared/data")),
        "--vocab",
        os.path.normpath(os.path.join(work, "../shared/vocab.txt")),
        "--out",
        "out",  # relative, inside: lands in the scratch folder
    )
    assert os.path.join(work, "train.py") in shown.display
    again = render_round(spec, rnd, {}, base_env={"PATH": os.defpath})  # a re-run: unchanged
    assert again == shown


def test_uv_is_told_its_project_and_unsafe_or_off_keeps_the_project(tmp_path: Path) -> None:
    spec, _, shown = render(tmp_path / "a", extra="security_mode: guarded\n  scratch_cwd: true")
    assert shown.cwd.endswith("/cwd")
    uv = make_project(
        tmp_path / "uvp",
        PROJECT.format(command="python, train.py", extra="security_mode: guarded").replace(
            "  command:", "  environment: uv\n  command:"
        ),
    )
    argv = render_round(uv, round_of(uv), {}, base_env={"PATH": os.defpath}).argv
    assert argv[:4] == ("uv", "run", "--project", os.path.realpath(tmp_path / "uvp"))
    eq = make_project(
        tmp_path / "eq",
        PROJECT.format(command="python, train.py", extra="security_mode: guarded").replace(
            "  command:", "  arg_style: equals\n  command:"
        ),
    )
    argv = render_round(eq, round_of(eq), {}, base_env={"PATH": os.defpath}).argv
    shared = os.path.normpath(os.path.join(os.path.realpath(tmp_path / "eq"), "../shared"))
    assert f"--data={shared}/data" in argv and "--out=out" in argv
    for extra in ("security_mode: unsafe", "security_mode: guarded\n  scratch_cwd: false"):
        root = tmp_path / extra.split()[-1]
        spec, rnd, shown = render(root, extra=extra)
        assert shown.cwd == spec.working_dir and not (rnd.dir / "cwd").exists()
        assert shown.argv[:2] == ("python", "train.py")
        assert "../shared/data" in shown.argv
