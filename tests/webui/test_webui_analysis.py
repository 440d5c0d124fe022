"""The session page's Analysis views in a real browser (Debian's chromium + Playwright).

A real daemon runs a real random-policy session of the mlp-flags example (no LLM); the
page is open before the session starts and its Analysis panel grows as rounds finish
(never reloaded). Then the four views are checked against the store's rounds, and a
second session is compared with the first. Screenshots land in ``test-artifacts/webui/``.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon
from tests.support.extras import require, require_chromium
from tests.support.webui import ARTIFACTS, open_dashboard
from trainee.research.analysis import optuna_available

pytestmark = pytest.mark.e2e

require_chromium()
require("playwright")

from playwright.sync_api import Browser, Locator, Page, expect  # noqa: E402

ROUNDS = 5


def shot(panel: Locator, name: str) -> None:
    """The Analysis panel itself (it sits below the rounds table)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    panel.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def answer(page: Page, method: str, params: dict[str, object]) -> dict[str, Any]:
    """A registry method's JSON answer from the page's origin (its access cookie)."""
    body = page.evaluate(
        """async ([name, params]) => {
          const r = await fetch(`/api/tools/${name}`, {method: "POST",
            headers: {"Content-Type": "application/json"}, body: JSON.stringify(params)});
          return await r.json();
        }""",
        [method, params],
    )
    assert isinstance(body, dict), body
    return body


def call(page: Page, method: str, params: dict[str, object]) -> dict[str, Any]:
    """A registry method's result, as the page calls it."""
    body = answer(page, method, params)
    assert "result" in body, body
    return dict(body["result"])


def test_analysis_views_update_live_and_compare_two_sessions(
    browser: Browser,
    llm_daemon: Daemon,
    project: Path,
) -> None:
    # round k > 1 of the first session waits for go-k, made once the panel shows it (k
    # rounds, the waiting one counted): every step of the live update is seen however
    # fast the machine is
    (project / "gated.py").write_text(
        "import os, runpy, sys, time\n"
        "k = os.environ.get('TRAINEE_ROUND_INDEX', '1')\n"
        "if os.environ.get('TRAINEE_SESSION_ID') == 'session-0001' and k != '1':\n"
        f"    while not os.path.exists(os.path.join({str(project)!r}, 'go-' + k)):\n"
        "        time.sleep(0.05)\n"
        "sys.argv[0] = 'train.py'\nrunpy.run_path('train.py', run_name='__main__')\n"
    )
    spec = project / ".trainee" / "project.yaml"
    text = spec.read_text().replace("- train.py", "- gated.py")
    spec.write_text(text + "\ndecision:\n  policy: random\n")
    w = open_dashboard(browser, llm_daemon, project)
    page = w.page
    form = page.locator("main form.start-form")
    expect(form.get_by_label("Decision policy")).to_have_value("random")
    form.get_by_label("Security mode").select_option("unsafe")
    form.get_by_label("Max rounds").fill(str(ROUNDS))
    form.get_by_role("button", name="Start session").click()
    page.wait_for_url(re.compile(r"#/session\?"))
    panel = page.locator("section.analysis")
    expect(panel).to_be_visible()
    # every round count the panel shows, as it changes (the page is never reloaded)
    page.evaluate(
        """() => {
          window.__sameDocument = true;
          window.__analysisRounds = [];
          new MutationObserver(() => {
            const p = document.querySelector('section.analysis');
            const n = p && p.dataset.rounds !== undefined ? Number(p.dataset.rounds) : -1;
            const seen = window.__analysisRounds;
            if (n >= 0 && seen[seen.length - 1] !== n) seen.push(n);
          }).observe(document.body, {subtree: true, childList: true, attributes: true});
        }"""
    )
    for k in range(2, ROUNDS + 1):
        expect(panel).to_have_attribute("data-rounds", str(k), timeout=60_000)
        (project / f"go-{k}").write_text("")
    expect(page.locator(".session-status .badge")).to_have_text("finished", timeout=180_000)
    expect(panel).to_have_attribute("data-rounds", str(ROUNDS), timeout=30_000)
    seen = page.evaluate("window.__analysisRounds")
    assert seen[-1] == ROUNDS and len([n for n in seen if 0 < n < ROUNDS]) >= 2, seen
    assert seen == sorted(seen), seen
    assert page.evaluate("window.__sameDocument") is True

    root = str(project.resolve())
    data = call(page, "session_analysis", {"project_root": root, "session": "session-0001"})
    rounds = data["rounds"]
    assert isinstance(rounds, list) and len(rounds) == ROUNDS
    scored = [r for r in rounds if r["metric"] is not None]

    # importance: one bar per tunable, or the reason there is none
    panel.get_by_role("tab", name="Importance").click()
    if optuna_available():
        bars = panel.locator("svg[data-view=importance] rect[data-param]")
        expect(bars).to_have_count(3)
        names = set(bars.evaluate_all("els => els.map(e => e.dataset.param)"))
        assert names == {"lr", "weight_decay", "batch_size"}
    else:
        expect(panel.locator(".importance-note")).to_contain_text("optional extra")
    shot(panel, "analysis-1-importance")

    # parallel coordinates: a line per round, the best thick, the baseline dashed
    panel.get_by_role("tab", name="Parallel coordinates").click()
    svg = panel.locator("svg[data-view=parallel]")
    expect(svg.locator("polyline")).to_have_count(ROUNDS)
    expect(svg.locator("polyline.best")).to_have_count(1)
    best = svg.locator("polyline.best").get_attribute("data-round")
    assert best == str(data["best_round"])
    if data["best_round"] != 1:
        expect(svg.locator('polyline.baseline[data-round="1"]')).to_have_count(1)
    axes = svg.locator("text.axis-name").all_text_contents()
    assert axes == ["lr (log)", "weight_decay (log)", "batch_size", "val_loss"], axes
    shot(panel, "analysis-2-parallel")

    # slices: one plot per tunable, a point per round with a metric
    panel.get_by_role("tab", name="Slices").click()
    figures = panel.locator("figure.slice")
    expect(figures).to_have_count(3)
    for name in ("lr", "weight_decay", "batch_size"):
        fig = panel.locator(f'figure.slice[data-param="{name}"]')
        expect(fig).to_have_attribute("data-points", str(len(scored)))
    expect(panel.locator('figure.slice[data-param="lr"] svg')).to_contain_text("lr (log)")
    shot(panel, "analysis-3-slices")

    # compare: best against baseline by default; another round on the right
    panel.get_by_role("tab", name="Compare").click()
    table = panel.locator("table.compare")
    expect(table.locator("thead")).to_contain_text(f"round {data['best_round']}")
    expect(table.locator('tr[data-name="lr"]')).to_be_visible()
    # val_loss is printed once (final); the per-epoch curves shown are the built-in loss
    curves = panel.locator("figure.curves svg")
    expect(curves).to_have_attribute("data-metric", "loss")
    expect(curves.locator("polyline.curve")).to_have_count(2)
    panel.get_by_label("Curve metric").select_option("val_loss")
    expect(curves).to_have_attribute("data-metric", "val_loss")
    expect(curves.locator("circle.curve")).to_have_count(2)
    panel.get_by_label("Curve metric").select_option("loss")
    panel.get_by_label("Right round").select_option("3")
    expect(table.locator("thead th").nth(2)).to_have_text("round 3")
    expect(curves.locator("polyline.curve")).to_have_count(2)
    r3 = next(r for r in rounds if r["index"] == 3)
    expect(table.locator('tr[data-name="batch_size"] td').nth(1)).to_have_text(
        str(r3["params"]["batch_size"])
    )
    shot(panel, "analysis-4-compare-rounds")

    # a second session, compared with the first from the first's page
    call(page, "loop_start", {"project_root": root, "security_mode": "unsafe", "max_rounds": 2})
    deadline = time.monotonic() + 120
    while call(page, "loop_get", {"project_root": root, "session": "session-0002"})["running"]:
        assert time.monotonic() < deadline, "session-0002 did not finish"
        page.wait_for_timeout(300)
    panel.get_by_role("tab", name="Importance").click()
    panel.get_by_role("tab", name="Compare").click()  # lists the project's sessions again
    panel.get_by_label("Right session").select_option("session-0002")
    expect(table.locator("thead th").nth(2)).to_contain_text("session-0002 · round")
    expect(table.locator("thead th").nth(1)).to_contain_text("session-0001 · round")
    expect(curves.locator('[data-side="right"]')).to_have_count(1)
    other = call(
        page,
        "session_analysis",
        {"project_root": root, "session": "session-0001", "right_session": "session-0002"},
    )
    comparison = other["comparison"]
    assert isinstance(comparison, dict)
    changed = [d["name"] for d in comparison["params"] if d["changed"]]
    rows = table.locator("tr.changed").evaluate_all("rs => rs.map(r => r.dataset.name)")
    assert rows == changed, (rows, json.dumps(comparison))
    shot(panel, "analysis-5-compare-sessions")
    # a round or session that does not exist: a clear error naming it, nothing else
    for params, words in (
        ({"left_round": 99}, "session-0001 has no round 99"),
        ({"right_session": "session-0009"}, "session-0009"),
        ({"right_round": "round-x"}, "right_round"),
    ):
        bad = answer(
            page, "session_analysis", {"project_root": root, "session": "session-0001", **params}
        )
        assert "error" in bad and words in json.dumps(bad["error"]), bad
    assert w.errors == []
