"""The likely fix of a failed baseline, from the real messages of Python, argparse, Hydra,
PyTorch and the shell at the end of its log."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainee.session.hints import failure_hint

from .launch.projects import make_project

PROJECT = """\
version: 1
launch:
  command: [python, train.py]
  args:
    - flag: --epochs
      value: 3
"""

CASES = [
    (
        ["Traceback (most recent call last):", "ModuleNotFoundError: No module named 'torch.nn'"],
        "the module 'torch' is not installed where the command runs (the python found on",
    ),
    (
        ["OSError: [Errno 30] Read-only file system: 'out'"],
        "writes 'out' inside the project, which guarded rounds see read-only: pass the round's "
        "outputs folder to the option that sets that path with output.flag",
    ),
    (
        ["usage: train.py [-h]", "train.py: error: unrecognized arguments: --epochs 3 --x=1"],
        "does not accept --epochs --x (set by launch.args[0]): fix or remove that flag",
    ),
    (
        ["app.py: error: ambiguous option: --config could match --config-path, --config-name"],
        "set launch.config_style: hydra",
    ),
    (
        ["Could not override 'trainer.note'.", "To append to your config use +trainer.note=x"],
        "write +trainer.note to add it or ++trainer.note to add or set it",
    ),
    (
        ["AssertionError: Torch not compiled with CUDA enabled"],
        "there is none it can use here: make it run on the CPU",
    ),
    (
        ["AssertionError: CUDA is not available but cuda was specified"],  # timm's --device
        "(e.g. a device option in run.fixed_args: --device cpu)",
    ),
    (["python: can't open file '/p/tr.py': [Errno 2] No such file"], "/p/tr.py does not exist"),
    (["sh: 1: torchrun: not found"], "'torchrun' is not on PATH"),
    (["something else went wrong"], "run the command of `trainee run --dry-run` by hand"),
]


@pytest.mark.parametrize(("tail", "hint"), CASES)
def test_the_last_known_message_gives_the_fix(tmp_path: Path, tail: list[str], hint: str) -> None:
    spec = make_project(tmp_path, PROJECT)
    got = failure_hint(spec, ["noise", *tail], status="failed", returncode=1)
    assert hint in got


def test_timeouts_and_kills_are_named(tmp_path: Path) -> None:
    spec = make_project(tmp_path, PROJECT)
    assert "ran past run.timeout_minutes (60)" in failure_hint(spec, [], status="timed_out")
    killed = failure_hint(spec, ["epoch 1"], status="failed", signal="SIGKILL")
    assert "killed (SIGKILL)" in killed
    # with output.flag set, the write went somewhere else that is read-only
    redirected = make_project(tmp_path / "b", PROJECT + "output:\n  flag: -o\n")
    text = failure_hint(redirected, ["PermissionError: Read-only file system: '/x'"], status="x")
    assert "outside the folders a guarded round may write" in text
