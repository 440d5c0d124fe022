"""What the browser tests share (tests/webui): chromium's arguments, the scripted
plans the LLM fixtures answer with, a daemon environment without a provider, and a
watched dashboard page. Playwright is imported only by what uses it, so importing
this module needs neither playwright nor chromium."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tests.support.daemon import REPO, Daemon, base_env

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = REPO / "test-artifacts" / "webui"
FAKE_KEY = "sk-webui-test-key-123456"
HYPOTHESES = [
    "A larger learning rate converges further within 300 epochs",
    "More weight decay regularises the small noisy training set",
    "Smaller batches give more updates per epoch",
    "A learning rate between the two tried so far balances speed and noise",
    "Less weight decay with the larger learning rate",
]
PLANS = [
    {"lr": 0.003},
    {"lr": 0.003, "weight_decay": 0.0003},
    {"lr": 0.003, "batch_size": 8},
    {"lr": 0.002},
    {"lr": 0.004, "weight_decay": 0.000003},
]


def plan_item(i: int) -> dict[str, Any]:
    return {
        "content": json.dumps(
            {
                "hypothesis": HYPOTHESES[i],
                "change_summary": "change " + ", ".join(PLANS[i]),
                "params": PLANS[i],
                "expected": "val_loss below the baseline",
                "stop": False,
                "stop_reason": "",
            }
        )
    }


def offline_env(short_dir: Path) -> dict[str, str]:
    """A daemon's environment without any LLM provider."""
    env = {
        k: v
        for k, v in base_env(short_dir).items()
        if not k.startswith(("OPENAI_", "ANTHROPIC_", "MOONSHOT_", "LLM_PROVIDER"))
    }
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


class Watched:
    """A page whose uncaught errors are collected (a failed fetch is reported by the page)."""

    def __init__(self, browser: Browser) -> None:
        self.page: Page = browser.new_page(viewport={"width": 1280, "height": 800})
        self.page.set_default_timeout(60_000)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on(
            "console",
            lambda msg: (
                self.errors.append(msg.text)
                if msg.type == "error" and not msg.text.startswith("Failed to load resource")
                else None
            ),
        )

    def shot(self, name: str) -> None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def open_dashboard(browser: Browser, daemon: Daemon, project: Path) -> Watched:
    w = Watched(browser)
    w.page.goto(
        f"{daemon.http_url}/?token={quote(daemon.token)}&project={quote(str(project), safe='')}"
    )
    from playwright.sync_api import expect

    expect(w.page.locator("#sidebar .project-card h3")).to_contain_text(project.name)
    assert daemon.token not in w.page.url, "the token must leave the address bar"
    assert w.page.evaluate("document.cookie") == "", "the access cookie must be HttpOnly"
    return w


OVERFLOWING = """(root) => {
  const out = [];
  for (const el of document.querySelectorAll(root + ', ' + root + ' *')) {
    if (!el.getClientRects().length || el.closest('pre, .log-body, svg')) continue;
    if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0) {
      const name = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
        + (el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\\s+/).join('.') : '')
        + (el.getAttribute('aria-label') ? `[${el.getAttribute('aria-label')}]` : '');
      out.push(`${name}: ${el.scrollWidth} > ${el.clientWidth}`);
    }
    if (el.tagName === 'SELECT' && el.selectedOptions.length) {  // its text cut?
      const cs = getComputedStyle(el);
      const ctx = (window.__measure ||= document.createElement('canvas').getContext('2d'));
      ctx.font = cs.font;
      const text = el.selectedOptions[0].textContent;
      const need = ctx.measureText(text).width + parseFloat(cs.paddingLeft)
        + parseFloat(cs.paddingRight) + 18;  // the arrow
      if (need > el.clientWidth + 1) out.push(`select "${text}": ${Math.ceil(need)} > ${el.clientWidth}`);
    }
  }
  return out;
}"""


def assert_fits(page: Page, root: str) -> None:
    """Nothing in ``root`` is wider than its box (a select, a cell, a chip)."""
    found = page.evaluate(OVERFLOWING, root)
    assert found == [], f"wider than their box in {root}:\n" + "\n".join(found)
