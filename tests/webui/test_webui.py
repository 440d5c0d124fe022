"""The dashboard in a real browser: Debian's chromium driven by Playwright.

A real daemon runs a real session of the mlp-flags example against the scripted
LLM server; the page is opened the way ``trainee webui`` opens it (the token URL)
and used as a person would: start, watch rounds and the chart grow, open a round's
log and decision, stop; then the project editor and the provider settings.
Screenshots land in ``test-artifacts/webui/``.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import Daemon
from tests.support.extras import require, require_chromium
from tests.support.webui import ARTIFACTS, FAKE_KEY, HYPOTHESES, assert_fits, open_dashboard

pytestmark = pytest.mark.e2e

require_chromium()
require("playwright")

from playwright.sync_api import Browser, Page, expect  # noqa: E402


def chart_points(page: Page) -> int:
    value = page.evaluate(
        "() => { const f = document.querySelector('figure[data-chart=rounds]');"
        " return f ? Number(f.dataset.points) : 0; }"
    )
    return int(value)


def hold_rounds(project: Path, hold: Path, *, free_round: int | None = None) -> None:
    """Launch through held.py: a round waits (printing) while ``hold`` exists, so the page
    sees it running however fast the machine is; ``free_round`` never waits."""
    hold.write_text("")
    free = f"if os.environ.get('TRAINEE_ROUND_INDEX') != '{free_round}':\n" if free_round else ""
    indent = "    " if free_round else ""
    (project / "held.py").write_text(
        "import os, runpy, sys, time\n"
        + free
        + f"{indent}while os.path.exists({str(hold)!r}):\n"
        + f"{indent}    print('holding', flush=True)\n{indent}    time.sleep(0.05)\n"
        + "sys.argv[0] = 'train.py'\nrunpy.run_path('train.py', run_name='__main__')\n"
    )
    spec = project / ".trainee" / "project.yaml"
    spec.write_text(spec.read_text().replace("- train.py", "- held.py"))


# Every element of a region whose content is wider than its box (cut, truncated or
# scrolled sideways): an input whose value does not fit counts too.
def training_left(project: Path) -> list[str]:
    root = str(project.resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if root in cmdline and state not in (b"Z", b"X"):
            found.append(cmdline)
    return found


def test_start_watch_inspect_and_stop_a_session(
    browser: Browser, llm_daemon: Daemon, project: Path, fake: FakeLLM
) -> None:
    hold = project / "hold"
    hold_rounds(project, hold)  # round 1 runs until the page has seen it live
    w = open_dashboard(browser, llm_daemon, project)
    page = w.page
    expect(page.locator("main")).to_contain_text("No session yet")
    w.shot("01-empty-dashboard")
    # every value the metric chart shows, as it changes (the page is never reloaded)
    page.evaluate(
        """() => {
          window.__sameDocument = true;
          window.__chartPoints = [];
          new MutationObserver(() => {
            const f = document.querySelector('figure[data-chart=rounds]');
            const n = f ? Number(f.dataset.points) : 0;
            const seen = window.__chartPoints;
            if (seen[seen.length - 1] !== n) seen.push(n);
          }).observe(document.body, {subtree: true, childList: true, attributes: true});
        }"""
    )

    form = page.locator("main form.start-form")
    form.get_by_label("Decision policy").select_option("llm")
    form.get_by_label("Security mode").select_option("unsafe")
    form.get_by_label("Max rounds").fill("6")
    form.get_by_role("button", name="Start session").click()

    page.wait_for_url(re.compile(r"#/session\?"))
    expect(page.locator("main h1")).to_have_text("mlp-flags · session-0001")
    expect(page.locator(".live-card.live h2")).to_contain_text("Round 1")
    expect(page.locator(".log-panel .log-body")).to_contain_text("holding", timeout=60_000)
    # the running round's Duration ticks in the rounds table
    ticking = """(t) => document.querySelector(
      'table.rounds tr[data-round="1"] td.duration').textContent !== t"""
    duration = page.locator('table.rounds tr[data-round="1"] td.duration')
    page.wait_for_function(ticking, arg=duration.inner_text())
    expect(page.locator(".live-card .activity")).to_be_visible()
    w.shot("02-live-round")
    # the running round's dialog follows it: running, ticking, then its outcome
    page.locator(".live-card").get_by_role("link", name="Details").click()
    dialog = page.locator("dialog.round-dialog")
    expect(dialog.locator(".round-status")).to_have_text(" running")
    fact = dialog.locator(".round-summary dd[data-fact=Duration]")
    page.wait_for_function(
        "(t) => document.querySelector('.round-summary dd[data-fact=Duration]').textContent !== t",
        arg=fact.inner_text(),
    )
    w.shot("02-round-dialog-running")
    hold.unlink()
    expect(dialog.locator(".round-status")).to_have_text(" completed", timeout=60_000)
    expect(dialog.locator(".round-summary dd[data-fact=Metric]")).not_to_have_text("\N{EN DASH}")
    expect(dialog.locator(".round-summary dd[data-fact=Outcome]")).to_contain_text("baseline")
    expect(dialog.locator(".log-body")).to_contain_text("final val_loss=")
    dialog.get_by_role("tab", name="Agent trace").click()
    expect(dialog.get_by_role("tabpanel", name="Agent trace")).to_contain_text("completed")
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_have_count(0)

    # rounds appear live and the chart gains points, without reloading the page
    expect(page.locator("table.rounds tbody tr")).to_have_count(3, timeout=60_000)
    row3 = page.locator('table.rounds tbody tr[data-round="3"]')
    expect(row3.locator("td").nth(1)).to_contain_text("completed", timeout=60_000)
    expect(page.locator(".live-card")).to_contain_text("Deciding the next round")
    page.wait_for_function("() => window.__chartPoints.includes(3)")
    seen = [n for n in page.evaluate("window.__chartPoints") if n]
    assert seen == [1, 2, 3], seen
    assert chart_points(page) == 3
    assert page.evaluate("window.__sameDocument") is True
    row2 = page.locator('table.rounds tbody tr[data-round="2"]')
    expect(row2).to_contain_text(HYPOTHESES[0])
    expect(row2).to_contain_text("lr")
    expect(row2.locator("td").nth(1)).to_contain_text("completed")
    # the charts: named, the primary metric's curve, every marker explained, clean axes
    chart = page.locator("figure[data-chart=rounds]")
    expect(chart.locator("figcaption")).to_contain_text("val_loss per round")
    markers = chart.locator("circle.pt").evaluate_all(
        "cs => [...new Set(cs.map(c => [...c.classList].find(k => k.startsWith('pt-'))))]"
    )
    assert "pt-baseline" in markers, markers
    legend = chart.locator(".legend .key-dot").evaluate_all(
        "ks => ks.map(k => [...k.classList].find(c => c.startsWith('pt-')))"
    )
    assert sorted(legend) == sorted(markers), (legend, markers)
    labels = chart.locator("g.axes text[text-anchor=end]:not(.label)").evaluate_all(
        "ts => ts.map(t => t.textContent)"
    )
    assert labels and all(float(x) >= 0 for x in labels), labels  # val_loss is never negative
    assert len({len(x.partition(".")[2]) for x in labels}) == 1, labels  # one format
    # the curve is of the primary metric: val_loss (printed once, at the end, in this
    # project); the training loss by step is a choice away
    curve = page.locator("[data-chart=curve]")
    expect(curve).to_have_attribute("data-metric", "val_loss")
    expect(curve.locator("figcaption")).to_contain_text("val_loss by step")
    expect(curve).to_contain_text("val_loss 0.")
    curve.get_by_label("Metric shown").select_option("loss")
    expect(curve).to_have_attribute("data-metric", "loss")
    expect(curve.locator("svg.chart")).to_be_visible()
    w.shot("03-rounds-and-chart")

    # a finished round: its log, its decision (prompt and raw response), its trace
    row2.get_by_role("link").click()
    dialog = page.locator("dialog.round-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator(".log-body")).to_contain_text("final val_loss=")
    final = re.search(r"final val_loss=([0-9.]+)", dialog.locator(".log-body").inner_text())
    assert final, "round 2 printed its metric"
    shown = str(float(final.group(1)))  # as printed, to the last digit (0.21996, not 0.22)
    expect(dialog.locator(".round-summary dd[data-fact=Metric]")).to_have_text(shown)
    expect(row2.locator("td.metric")).to_have_text(shown)
    dialog.get_by_role("tab", name="Decision").click()
    expect(dialog).to_contain_text(HYPOTHESES[0])
    expect(dialog).to_contain_text("openai_compatible")
    expect(dialog.locator("pre.raw")).to_contain_text('"lr": 0.003')
    w.shot("04-round-decision")
    dialog.get_by_role("tab", name="Agent trace").click()
    expect(dialog).to_contain_text("Plan accepted")
    dialog.get_by_role("button", name="Close").click()
    expect(dialog).to_have_count(0)
    assert "round=" not in page.url

    # stop from the page (the session waits for its fourth decision): pending until it ended
    page.evaluate(
        """() => {
          window.__stopPending = false;
          new MutationObserver(() => {
            const b = [...document.querySelectorAll('.actions button')]
              .find(b => b.textContent === 'Stopping…');
            if (b && b.disabled && document.querySelector('.session-status .stopping'))
              window.__stopPending = true;
          }).observe(document.body, {subtree: true, childList: true, attributes: true});
        }"""
    )
    page.get_by_role("button", name="Stop session").click()
    expect(page.locator(".session-status > .badge")).to_have_text("stopped", timeout=90_000)
    expect(page.locator(".session-status")).to_contain_text("user stop")
    expect(page.get_by_role("button", name="Stop session")).to_have_count(0)
    expect(page.locator('#sidebar a.session-row[data-session="session-0001"]')).to_contain_text(
        "stopped"
    )
    w.shot("05-stopped")
    assert page.evaluate("window.__stopPending") is True
    expect(page.locator(".session-status .stopping")).to_have_count(0)

    deadline = time.monotonic() + 15
    while training_left(project) and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert training_left(project) == []
    assert w.errors == []


def test_project_editor_settings_and_llm_test(
    browser: Browser, llm_daemon: Daemon, project: Path, fake: FakeLLM
) -> None:
    w = open_dashboard(browser, llm_daemon, project)
    page = w.page
    page.get_by_role("link", name="Edit").first.click()
    expect(page.locator("main h1")).to_have_text("Project")
    max_rounds = page.locator("main").get_by_label("Max rounds", exact=True)
    expect(max_rounds).to_have_value("6")

    # the server's validation message lands beside the field; nothing is written
    before = (project / ".trainee" / "project.yaml").read_text()
    max_rounds.fill("0")
    page.get_by_role("button", name="Save project").click()
    error = page.locator("#" + max_rounds.get_attribute("aria-describedby"))
    expect(error).to_be_visible()
    expect(error).to_contain_text(">= 1")
    expect(max_rounds).to_have_attribute("aria-invalid", "true")
    w.shot("06-project-validation")
    assert (project / ".trainee" / "project.yaml").read_text() == before

    max_rounds.fill("4")
    page.get_by_role("button", name="Save project").click()
    expect(page.locator(".save-bar")).to_contain_text("Saved")
    saved = (project / ".trainee" / "project.yaml").read_text()
    assert "max_rounds: 4" in saved and "# same training budget" in saved  # comments kept

    # tunables: suggestions, an explicit review, then the save
    page.get_by_role("button", name="Suggest parameters").click()
    expect(page.locator(".suggest")).to_contain_text("hidden")
    assert "hidden" not in (project / ".trainee" / "tuning.yaml").read_text()
    page.get_by_role("button", name="Review selected").click()
    expect(page.locator("ul.review")).to_contain_text("add hidden")
    w.shot("07-tunables-review")
    assert "hidden" not in (project / ".trainee" / "tuning.yaml").read_text()
    page.get_by_role("button", name="Save to tuning.yaml").click()
    expect(page.locator(".save-bar")).to_contain_text("Saved")
    assert "name: hidden" in (project / ".trainee" / "tuning.yaml").read_text()

    # provider settings: keys masked, environment overrides shown
    page.get_by_role("link", name="Settings").click()
    expect(page.locator("main")).to_contain_text("Environment overrides in effect")
    expect(page.locator("main")).to_contain_text("TRAINEE_LLM_PROVIDER")
    assert FAKE_KEY not in page.content()
    assert FAKE_KEY[-3:] in page.locator(".overrides").inner_text()
    w.shot("08-settings")

    # /llm-test runs the live test at once
    requests_before = len(fake.requests)
    page.goto(f"{llm_daemon.http_url}/llm-test")
    expect(page.locator(".test-out")).to_contain_text(
        "answered a structured request", timeout=60_000
    )
    assert len(fake.requests) == requests_before + 1
    w.shot("09-llm-test")
    assert w.errors == []


FLOOD = """
import sys, time
rate, seconds = 10_000, 3.0
start = time.monotonic()
for i in range(int(rate * seconds)):
    sys.stdout.write(f"step={i} tokens/s=1234.5 grad_norm=0.42 a line of a busy training log\\n")
    if i % 500 == 499:
        sys.stdout.flush()
        delay = start + (i + 1) / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
print("final score=0.5")
"""


def test_a_flooding_round_keeps_the_log_view_bounded(
    browser: Browser, llm_daemon: Daemon, tmp_path: Path
) -> None:
    """10,000 lines/s: the events arrive in batches and the DOM keeps the last 2,000 lines."""
    project = tmp_path / "flood"
    (project / ".trainee").mkdir(parents=True)
    (project / "flood.py").write_text(FLOOD)
    (project / ".trainee" / "project.yaml").write_text(
        "version: 1\nlaunch:\n  command: [python, flood.py]\nrun:\n  max_rounds: 1\n"
        "metrics:\n  specs:\n    - name: score\n      source: stdout_regex\n"
        "      key_or_pattern: 'final score=(?P<value>[0-9.]+)'\n"
        "advanced:\n  security_mode: unsafe\n"
    )
    (project / ".trainee" / "tuning.yaml").write_text("version: 1\nparams: []\n")
    w = open_dashboard(browser, llm_daemon, project)
    page = w.page
    form = page.locator("main form.start-form")
    form.get_by_label("Decision policy").select_option("random")
    form.get_by_role("button", name="Start session").click()
    page.wait_for_url(re.compile(r"#/session\?"))
    body = page.locator(".log-panel .log-body")
    expect(body).to_contain_text("step=", timeout=60_000)
    page.evaluate(
        """() => {
          window.__maxLines = 0;
          const body = document.querySelector('.log-panel .log-body');
          new MutationObserver(() => {
            window.__maxLines = Math.max(window.__maxLines, body.childElementCount);
          }).observe(body, {childList: true});
        }"""
    )
    expect(page.locator(".session-status > .badge")).to_have_text("finished", timeout=60_000)
    assert 0 < page.evaluate("window.__maxLines") <= 2000
    assert body.locator(".log-line").count() <= 2000
    # more lines were printed than travelled live: the rest is in the full log
    expect(page.locator(".log-panel .log-count")).to_contain_text("not shown live")
    page.locator(".log-panel .log-search").fill("final score")
    expect(body.locator(".log-line")).to_have_count(1)
    w.shot("10-flood")
    assert w.errors == []


def test_parallel_candidates_show_as_steps(
    browser: Browser, llm_daemon: Daemon, project: Path
) -> None:
    """run.parallel: 2 — the live card names the step and both rounds while they run at
    once, and the rounds table gets a Step column. The step's rounds wait (printing)
    while ``hold`` exists, so the page sees them running however fast the machine is."""
    hold = project / "hold"
    hold_rounds(project, hold, free_round=1)
    spec = project / ".trainee" / "project.yaml"
    text = spec.read_text().replace("max_rounds: 6", "max_rounds: 3\n  parallel: 2")
    spec.write_text(text + "\ndecision:\n  policy: random\n")
    try:
        w = open_dashboard(browser, llm_daemon, project)
        page = w.page
        form = page.locator("main form.start-form")
        expect(form.get_by_label("Decision policy")).to_have_value("random")
        form.get_by_label("Security mode").select_option("unsafe")
        form.get_by_label("Max rounds").fill("3")
        form.get_by_role("button", name="Start session").click()
        page.wait_for_url(re.compile(r"#/session\?"))
        step = page.locator(".live-card p.step")
        expect(step).to_contain_text("2 candidates at once", timeout=60_000)
        expect(step).to_contain_text("round 2")
        expect(step).to_contain_text("round 3")
        w.shot("06-parallel-step")
        hold.unlink()  # the step's rounds go on
        expect(page.locator(".session-status > .badge")).to_have_text("finished", timeout=90_000)
        expect(page.locator("table.rounds thead th").first).to_have_text("Step")
        steps = page.locator("table.rounds tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.step)"
        )
        assert steps == ["0", "1", "1"], steps
        assert w.errors == []
    finally:
        hold.unlink(missing_ok=True)


def test_offline_defaults_random_decisions_and_the_editor_at_1280(
    browser: Browser, offline_daemon: Daemon, project: Path
) -> None:
    """No provider: the start form offers a policy that needs none; a random session's
    decisions show no empty prompt and its report no " / " provider; the sidebar, the
    session and the project editor fit a 1280x800 window (nothing cut or truncated)."""
    w = open_dashboard(browser, offline_daemon, project)
    page = w.page
    form = page.locator("main form.start-form")
    expect(form.get_by_label("Decision policy")).to_have_value("random")
    expect(form.locator(".policy-note")).to_contain_text("needs an LLM provider")
    assert_fits(page, "#sidebar")
    form.get_by_label("Security mode").select_option("unsafe")
    form.get_by_label("Max rounds").fill("2")
    form.get_by_role("button", name="Start session").click()
    page.wait_for_url(re.compile(r"#/session\?"))
    expect(page.locator(".session-status > .badge")).to_have_text("finished", timeout=90_000)
    expect(page.locator("table.rounds tbody tr")).to_have_count(2)
    assert_fits(page, "main")
    assert_fits(page, "#sidebar")
    w.page.screenshot(path=str(ARTIFACTS / "11-session-detail.png"), full_page=True)

    page.locator('table.rounds tr[data-round="2"]').get_by_role("link").click()
    dialog = page.locator("dialog.round-dialog")
    dialog.get_by_role("tab", name="Decision").click()
    decision = dialog.get_by_role("tabpanel", name="Decision")
    expect(decision.locator(".no-prompt")).to_contain_text("random policy")
    expect(decision.locator("h3")).to_have_text(["Plan"])
    dialog.get_by_role("button", name="Close").click()
    page.get_by_role("button", name="Report").click()
    report = page.locator("dialog.report-dialog")
    expect(report.locator("table").last).to_contain_text("random")
    assert " / " not in report.locator(".report").inner_text()
    report.get_by_role("button", name="Close").click()

    page.get_by_role("link", name="Edit").first.click()
    expect(page.locator("main h1")).to_have_text("Project")
    expect(page.locator("main table.edit").first).to_be_visible()
    w.page.screenshot(path=str(ARTIFACTS / "12-editor-1280.png"), full_page=True)
    assert_fits(page, "main")
    assert_fits(page, "#sidebar")
    assert w.errors == []


def test_a_stop_that_fails_says_so(browser: Browser, offline_daemon: Daemon, project: Path) -> None:
    """The daemon is gone when Stop is pressed: the page says the session did not stop
    and offers Stop again (the round, held, goes on under its monitor and then ends)."""
    hold = project / "hold"
    hold_rounds(project, hold)
    try:
        w = open_dashboard(browser, offline_daemon, project)
        page = w.page
        form = page.locator("main form.start-form")
        expect(form.get_by_label("Decision policy")).to_have_value("random")
        form.get_by_label("Security mode").select_option("unsafe")
        form.get_by_role("button", name="Start session").click()
        page.wait_for_url(re.compile(r"#/session\?"))
        expect(page.locator(".live-card.live h2")).to_contain_text("Round 1", timeout=60_000)
        offline_daemon.stop()
        page.get_by_role("button", name="Stop session").click()
        error = page.locator(".error-box", has_text="The session did not stop")
        expect(error).to_contain_text("no answer from the daemon")
        expect(page.get_by_role("button", name="Stop session")).to_be_enabled()
        expect(page.locator(".session-status .stopping")).to_have_count(0)
        expect(page.locator(".live-card .activity")).not_to_contain_text("quiet for")
        w.shot("13-stop-failed")
    finally:
        hold.unlink(missing_ok=True)
    deadline = time.monotonic() + 60
    while training_left(project) and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert training_left(project) == []
