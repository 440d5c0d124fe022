"""The session page shows ``run.screen``'s rungs (a real browser, Debian's chromium +
Playwright): a random-policy session of the screenable fixture started from the page,
watched live to its end; the rounds table's Rung column gives each round's rung and
budget and which rounds were promoted, as the store has them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.support.daemon import REPO, Daemon
from tests.support.extras import require, require_chromium
from tests.support.loop import loop_get
from tests.support.webui import ARTIFACTS, assert_fits, open_dashboard

pytestmark = pytest.mark.e2e

require_chromium()
require("playwright")

from playwright.sync_api import Browser, expect  # noqa: E402


def test_the_rounds_table_shows_rungs_and_promotions(
    browser: Browser,
    offline_daemon: Daemon,
    tmp_path: Path,
) -> None:
    project = tmp_path / "screenable"
    shutil.copytree(REPO / "tests" / "fixtures" / "projects" / "screenable", project)
    w = open_dashboard(browser, offline_daemon, project)
    page = w.page
    form = page.locator("main form.start-form")
    expect(form.get_by_label("Decision policy")).to_have_value("random")
    form.get_by_label("Security mode").select_option("unsafe")
    form.get_by_role("button", name="Start session").click()
    page.wait_for_url(re.compile(r"#/session\?"))
    expect(page.locator(".session-status > .badge")).to_have_text("finished", timeout=120_000)
    rounds = loop_get(offline_daemon.env, project, "session-0001")["rounds"]
    assert len(rounds) == 7
    table = page.locator("table.rounds")
    expect(table.locator("tbody tr")).to_have_count(7)
    expect(table.locator("thead th", has_text="Rung")).to_have_count(1)
    promoted_to = {r["promoted_from"]: r["index"] for r in rounds if r["promoted_from"]}
    for r in rounds:
        cell = table.locator(f'tr[data-round="{r["index"]}"] td.rung')
        full = " (full)" if r["rung"] == 2 else ""
        expect(cell).to_contain_text(f"{r['rung']} of 2 · budget {r['budget']:g}{full}")
        if r["promoted_from"]:
            expect(cell).to_contain_text(f"promoted from #{r['promoted_from']}")
        if r["index"] in promoted_to:
            expect(cell).to_contain_text(f"promoted to #{promoted_to[r['index']]}")
    assert promoted_to, rounds
    promoted = next(r for r in rounds if r["promoted_from"])
    table.locator(f'tr[data-round="{promoted["index"]}"]').get_by_role("link").click()
    dialog = page.locator("dialog.round-dialog")
    expect(dialog.locator('dd[data-fact="Rung"]')).to_have_text(
        f"rung 2 · budget 6 · promoted from round {promoted['promoted_from']}"
    )
    dialog.get_by_role("button", name="Close").click()
    assert_fits(page, "main")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "screen-rungs.png"), full_page=True)
    assert not w.errors, w.errors
