"""The one atomic-write helper: whole content or the old file, the permissions asked for."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from trainee.atomic import write_atomic


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_file_gets_the_umask_default_or_the_mode_asked(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    os.umask(umask)
    plain = tmp_path / "plain.txt"
    write_atomic(plain, "hello\n")
    assert plain.read_text() == "hello\n" and _mode(plain) == 0o666 & ~umask
    secret = tmp_path / "secret.json"
    write_atomic(secret, b"{}", mode=0o600)
    assert secret.read_bytes() == b"{}" and _mode(secret) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.txt", "secret.json"]


def test_a_replaced_file_keeps_its_permissions_unless_a_mode_is_asked(tmp_path: Path) -> None:
    path = tmp_path / "project.yaml"
    path.write_text("old")
    path.chmod(0o640)
    write_atomic(path, "new", fsync=False)
    assert path.read_text() == "new" and _mode(path) == 0o640
    write_atomic(path, "private", mode=0o600)
    assert path.read_text() == "private" and _mode(path) == 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "inside").write_text("kept")
    with pytest.raises(OSError):
        write_atomic(target, "cannot replace a folder")
    assert (target / "inside").read_text() == "kept"
    assert [p.name for p in tmp_path.iterdir()] == ["busy"]
