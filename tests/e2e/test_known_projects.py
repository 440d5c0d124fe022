"""The daemon's one list of known projects (projects.json): projects_list shows it,
projects_add and projects_remove change it, and the web page uses nothing else (this
browser keeps only which project is selected; an older page's own list moves over)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support.daemon import Daemon, copy_example
from tests.support.extras import CHROMIUM, needs
from tests.support.processes import assert_no_training_left
from tests.support.timing import scaled
from trainee import errors
from trainee.rpc.client import RpcClient

pytestmark = pytest.mark.e2e


@pytest.fixture
def rpc(daemon: Daemon) -> Iterator[RpcClient]:
    with RpcClient(daemon.socket, timeout=scaled(120)) as client:
        yield client


def _roots(rpc: RpcClient) -> list[str]:
    return [p["root"] for p in rpc.call("projects_list")["projects"]]


def test_projects_are_added_and_removed_through_the_registry(
    daemon: Daemon, rpc: RpcClient, tmp_path: Path
) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    first = rpc.call("projects_add", {"project_root": str(folder)})
    assert first["added"] and first["project"]["root"] == os.path.realpath(folder)
    assert first["project"]["configured"] is False and first["project"]["exists"]
    assert rpc.call("projects_add", {"project_root": str(folder)})["added"] is False
    assert _roots(rpc) == [os.path.realpath(folder)]

    with pytest.raises(errors.InvalidParams, match="absolute"):
        rpc.call("projects_add", {"project_root": "relative/path"})
    with pytest.raises(errors.InvalidParams, match="not a folder"):
        rpc.call("projects_add", {"project_root": str(tmp_path / "missing")})
    assert _roots(rpc) == [os.path.realpath(folder)], "a refused add changes nothing"

    folder.rmdir()  # a folder that is gone can still be taken off
    gone = rpc.call("projects_remove", {"project_root": str(folder)})
    assert gone["removed"] and _roots(rpc) == []
    again = rpc.call("projects_remove", {"project_root": str(folder)})
    assert again == {"removed": False, "message": f"{os.path.realpath(folder)} was not listed"}


def test_a_project_with_a_running_session_stays_listed(
    daemon: Daemon, rpc: RpcClient, tmp_path: Path
) -> None:
    project = copy_example("mlp-flags", tmp_path)
    root = str(project)
    session = rpc.call(
        "loop_start",
        {"project_root": root, "policy": "external", "security_mode": "unsafe", "max_rounds": 3},
    )["session"]
    assert os.path.realpath(root) in _roots(rpc)  # a session's project is known
    with pytest.raises(errors.InvalidState, match="running session"):
        rpc.call("projects_remove", {"project_root": root})
    rpc.call("loop_stop", {"session": session, "project_root": root})
    assert rpc.call("projects_remove", {"project_root": root})["removed"]
    assert os.path.realpath(root) not in _roots(rpc)
    assert_no_training_left(project)


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is missing")
@needs("playwright")
def test_the_page_lists_adds_and_removes_projects_on_the_daemon(
    daemon: Daemon, rpc: RpcClient, tmp_path: Path
) -> None:
    from playwright.sync_api import expect, sync_playwright

    from tests.support.webui import CHROMIUM_ARGS

    opened = copy_example("mlp-flags", tmp_path)
    old = tmp_path / "from-an-older-page"
    old.mkdir()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.set_default_timeout(scaled(60) * 1000)
            errors_seen: list[str] = []
            page.on("pageerror", lambda exc: errors_seen.append(str(exc)))
            # an older page kept its own list in this browser: it moves to the daemon's
            page.add_init_script(
                f"localStorage.setItem('trainee.projects', {json.dumps(json.dumps([str(old)]))})"
            )
            page.goto(
                f"{daemon.http_url}/?token={quote(daemon.token)}"
                f"&project={quote(str(opened), safe='')}"
            )
            cards = page.locator("#sidebar .project-card h3")
            expect(cards.filter(has_text=opened.name)).to_have_count(1)
            expect(cards.filter(has_text=old.name)).to_have_count(1)
            assert sorted(_roots(rpc)) == sorted(os.path.realpath(p) for p in (opened, old))
            page.wait_for_function("localStorage.getItem('trainee.projects') === null")
            # only the selection stays in the browser
            assert page.evaluate("localStorage.getItem('trainee.project')") == str(opened)

            card = page.locator("#sidebar .project-card", has=page.locator("h3", has_text=old.name))
            card.get_by_role("button", name="Remove").click()
            expect(cards.filter(has_text=old.name)).to_have_count(0)
            assert _roots(rpc) == [os.path.realpath(opened)]
            assert not errors_seen, errors_seen
        finally:
            browser.close()
