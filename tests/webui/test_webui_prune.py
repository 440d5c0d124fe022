"""A pruned round's reason and the seed noise on the session page (real Chromium).

A real daemon runs an external session of tests/fixtures/projects/prunable with
``run.noise`` (the baseline on three seeds whose final loss the seed moves); the agent
(this test, over the real socket) runs a round that would last for hours and ends it
early with ``round_prune`` while the page watches. The page shows the reason on a line
under the round's status, live and after a reload, and in the round's details; the
"Seed noise" card shows the baseline's mean ± spread over its seeds as the daemon
gives them (``session_noise``; the page computes nothing). report.md says the same.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import yaml  # type: ignore[import-untyped]

from tests.support.daemon import REPO, Daemon
from tests.support.extras import require, require_chromium
from tests.support.loop import wait_finished
from tests.support.processes import assert_no_training_left
from tests.support.timing import scaled
from tests.support.webui import ARTIFACTS, open_dashboard
from trainee import errors
from trainee.rpc.client import RpcClient

pytestmark = pytest.mark.e2e

require_chromium()
require("playwright")

from playwright.sync_api import Browser, expect  # noqa: E402

FIXTURE = REPO / "tests" / "fixtures" / "projects" / "prunable"
FOREVER = 100_000
WAIT = scaled(60) * 1000
"""How long the page may take to show something (ms; Playwright's own default is 5 s)."""
REASON = "val_loss crawls at lr 0.02: no chance to beat the baseline"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "prunable"
    shutil.copytree(FIXTURE, project)
    path = project / ".trainee" / "project.yaml"
    doc = yaml.safe_load(path.read_text())
    del doc["run"]["prune"]
    doc["run"]["noise"] = {"seed": "seed", "repeats": 3}
    doc["launch"]["args"] = [{"flag": "--noise", "value": 0.02}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return project


def js_num(value: float) -> str:
    """A number as the page's noise card writes it (fmtNum, 3 significant digits;
    >= 1e-3 here, so never in exponent form)."""
    assert 1e-3 <= abs(value) < 1e6
    return repr(float(f"{value:.3g}"))


def wait_running(rpc: RpcClient, at: dict[str, Any], index: int) -> None:
    deadline = time.monotonic() + scaled(60)
    points: list[Any] = []
    while len(points) < 2:
        assert time.monotonic() < deadline, f"round {index} printed {len(points)} values"
        time.sleep(0.1)
        with contextlib.suppress(errors.NotFound):  # not recorded yet
            points = rpc.call("round_metrics", {**at, "round": index})["points"]


def test_a_pruned_round_shows_its_reason_and_the_noise_its_mean_and_spread(
    browser: Browser,
    offline_daemon: Daemon,
    project: Path,
) -> None:
    root = str(project)
    w = open_dashboard(browser, offline_daemon, project)
    page = w.page
    with RpcClient(offline_daemon.socket, timeout=scaled(120)) as rpc:
        start = {"project_root": root, "policy": "external", "security_mode": "unsafe"}
        session = rpc.call("loop_start", {**start, "max_rounds": 5})["session"]
        at = {"session": session, "project_root": root}
        for index in (1, 2, 3):  # the baseline on seeds 0, 1 and 2 (run.noise)
            assert rpc.call("round_result", {**at, "round": index, "wait": True})["finished"]
        plan = {"hypothesis": "a small lr", "change_summary": "lr", "expected": "worse"}
        slow = {"lr": 0.02, "epochs": FOREVER}
        assert rpc.call("round_run", {**at, **plan, "params": slow, "wait": False})["round"] == 4
        wait_running(rpc, at, 4)

        query = f"project={quote(root, safe='')}&id={session}"
        page.goto(f"{offline_daemon.http_url}/#/session?{query}")
        row = page.locator("table.rounds tr[data-round='4']")
        expect(row.locator(".badge")).to_have_text(re.compile("running"), timeout=WAIT)
        expect(row.locator(".prune-reason")).to_have_count(0, timeout=WAIT)

        noise = rpc.call("session_noise", at)["noise"]
        assert noise["seeds"] == 3 and noise["rounds"] == [1, 2, 3]
        card = page.locator(".card[data-noise]")
        expect(card.locator(".card-label")).to_have_text(
            re.compile("Seed noise", re.I), timeout=WAIT
        )
        spread = f"{js_num(noise['mean'])} ± {js_num(noise['spread'])}"
        expect(card.locator(".card-value")).to_have_text(spread, timeout=WAIT)
        expect(card.locator(".card-note")).to_have_text(
            f"3 seeds of the baseline · floor {js_num(noise['floor'])}", timeout=WAIT
        )

        ended = rpc.call("round_prune", {**at, "round": 4, "reason": REASON, "wait_sec": 60})
        assert ended["status"] == "pruned", ended
        error = f"pruned: by the agent: {REASON}"
        # live, from the round's finish event: one line under its status
        expect(row.locator(".badge").first).to_have_text(re.compile("pruned"), timeout=WAIT)
        expect(row.locator(".prune-reason")).to_have_text(error, timeout=WAIT)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.locator("section[aria-label='rounds']").screenshot(
            path=str(ARTIFACTS / "pruned-round.png")
        )
        page.locator(".cards").screenshot(path=str(ARTIFACTS / "noise-card.png"))
        assert rpc.call("round_run", {**at, **plan, "params": {"floor": 0.0}})["finished"]
    wait_finished(offline_daemon.env, project, timeout=scaled(60))

    # and from the snapshot, after a reload; only the pruned round has a reason line
    page.reload()
    expect(row.locator(".prune-reason")).to_have_text(error, timeout=WAIT)
    expect(page.locator("table.rounds .prune-reason")).to_have_count(1, timeout=WAIT)
    expect(card.locator(".card-value")).to_have_text(spread, timeout=WAIT)
    # the round's details say it too
    row.get_by_role("link", name="round 4 details").click()
    expect(page.locator("dialog.round-dialog dd[data-fact='Ended early']")).to_have_text(
        error, timeout=WAIT
    )
    assert w.errors == [], w.errors

    # report.md, written again by session_report, keeps both lines
    with RpcClient(offline_daemon.socket, timeout=scaled(60)) as rpc:
        markdown = rpc.call("session_report", at)["markdown"]
    assert f"- **Seed noise:** {noise['text']}" in markdown
    pruned = markdown.split("## Pruned rounds\n\n")[1].split("\n\n")[0].strip().splitlines()
    assert pruned == [f"- Round 4: {error}"]
    assert_no_training_left(project)
