"""What the tests of real litellm calls against FakeLLM share (their fixtures, ``fake`` and
``fresh_formats``, are in tests/integration/conftest.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from trainee.llm import client
from trainee.research.prompt import DEFAULT_SYSTEM_PROMPT, PromptParts

T = TypeVar("T")


def run(fn: Callable[[], Awaitable[T]]) -> T:
    """Run ``fn`` in a fresh event loop, closing litellm's clients before the loop ends."""

    async def main() -> T:
        try:
            return await fn()
        finally:
            await client.close_clients()

    return anyio.run(main)


def prompt_parts(project_context: str = "") -> PromptParts:
    """The default system prompt with ``project_context`` and nothing else."""
    return PromptParts(
        system_prompt=DEFAULT_SYSTEM_PROMPT,
        trainee_context="",
        project_context=project_context,
        constraints="",
        metrics_prompt="",
        tuning_prompt="",
    )
