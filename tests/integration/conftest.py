"""Fixtures of the integration tests that talk to FakeLLM through real litellm calls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.llm_server import FakeLLM


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    """A scripted OpenAI/Anthropic-style server on 127.0.0.1 (no script: ``fake.script``)."""
    with FakeLLM() as f:
        yield f


@pytest.fixture
def fresh_formats() -> Iterator[None]:
    """The client's memory of which response format each provider took, empty before and
    after the test (a module asks for it with ``pytest.mark.usefixtures``)."""
    from trainee.llm import client

    client.forget_formats()
    yield
    client.forget_formats()
