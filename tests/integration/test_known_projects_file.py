"""projects.json, the daemon's one list of known projects: a file that cannot be read is
never erased by the next write (it is moved aside, kept), and ``projects_add`` has a limit
a session start does not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainee.errors import LimitExceeded
from trainee.session.bus import EventBus
from trainee.session.manager import SessionManager


def _manager(tmp_path: Path) -> SessionManager:
    return SessionManager(EventBus(), state_dir=tmp_path / "state")


@pytest.mark.parametrize("text", ["{not json", '{"projects": "/a"}', "[1, 2]"])
def test_an_unreadable_list_is_kept_aside_not_overwritten(tmp_path: Path, text: str) -> None:
    manager = _manager(tmp_path)
    manager.state_dir.mkdir(parents=True)
    manager.projects_file.write_text(text)
    assert manager.known_projects() == []
    assert manager.projects_file.read_text() == text, "reading changes nothing"
    assert manager.remember("/work/new")
    assert json.loads(manager.projects_file.read_text()) == {"projects": ["/work/new"]}
    kept = list(manager.state_dir.glob("projects.json.unreadable-*"))
    assert [p.read_text() for p in kept] == [text]


def test_a_missing_list_is_an_empty_one(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    assert manager.known_projects() == []
    assert manager.remember("/a") and not manager.remember("/a")
    assert manager.forget("/a") and not manager.forget("/a")
    assert list(manager.state_dir.glob("projects.json.unreadable-*")) == []


def test_the_limit_refuses_one_more_and_changes_nothing(tmp_path: Path) -> None:
    manager = _manager(tmp_path)
    for i in range(3):
        manager.remember(f"/p{i}", limit=3)
    before = manager.projects_file.read_text()
    with pytest.raises(LimitExceeded, match="knows 3 projects"):
        manager.remember("/p3", limit=3)
    assert manager.projects_file.read_text() == before
    assert manager.remember("/p3"), "a session start (no limit) still adds its project"
