"""Fixtures of the browser tests: the scripted LLM, a slower mlp-flags copy, daemons with
and without a provider, and a chromium driven by Playwright."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.fakes.llm_server import FakeLLM
from tests.support.daemon import REPO, Daemon, started_daemon
from tests.support.extras import CHROMIUM
from tests.support.webui import CHROMIUM_ARGS, FAKE_KEY, offline_env, plan_item

if TYPE_CHECKING:
    from playwright.sync_api import Browser


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    """The live test loop_start makes, two plans, then a decision that takes its time:
    the session sits at round 4's decision until the test stops it."""
    script = [{"content": "OK"}, plan_item(0), plan_item(1), {"delay": 100, **plan_item(2)}]
    with FakeLLM(script) as server:
        yield server


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of mlp-flags whose rounds last a few seconds (300 epochs)."""
    target = tmp_path / "mlp-flags"
    shutil.copytree(
        REPO / "examples" / "mlp-flags",
        target,
        ignore=shutil.ignore_patterns("runtime.sqlite3*", "artifacts", "runs", "logs", "cache"),
    )
    spec = target / ".trainee" / "project.yaml"
    spec.write_text(spec.read_text().replace("value: 200", "value: 300"))
    return target


@pytest.fixture
def offline_daemon(short_dir: Path) -> Iterator[Daemon]:
    """No provider configured: the page must offer a policy that needs none."""
    with started_daemon(short_dir, offline_env) as d:
        yield d


@pytest.fixture
def llm_daemon(short_dir: Path, fake: FakeLLM) -> Iterator[Daemon]:
    env = offline_env(short_dir)
    env.update(
        TRAINEE_LLM_PROVIDER="openai_compatible",
        TRAINEE_LLM_BASE_URL=fake.openai_base_url,
        TRAINEE_LLM_MODEL="fake-model",
        TRAINEE_LLM_API_KEY=FAKE_KEY,
    )
    with started_daemon(short_dir, lambda _: env) as d:
        yield d


@pytest.fixture
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()
