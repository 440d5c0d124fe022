"""Runtime settings: LLM provider, debug recording, global system prompt, prompt presets.

All are stored in ~/.trainee/config.json (0600) by trainee.llm.settings; the
environment overrides the file, and every answer masks keys.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import anyio
import msgspec

from trainee.api.context import CallContext
from trainee.api.methods import registry
from trainee.errors import ConfigError, InvalidParams
from trainee.llm.settings import load_settings, masked_view, save_settings
from trainee.spec import wire as w


class LlmTestParams(w.Wire):
    provider: str | None = None
    env: dict[str, str] | None = None
    """The caller's environment (as doctor and loop_start take it); default: the daemon's."""


def _env() -> dict[str, str]:
    return dict(os.environ)


async def _save(update: dict[str, Any]) -> None:
    try:
        await anyio.to_thread.run_sync(lambda: save_settings(update, env=_env()))
    except ConfigError as exc:
        raise InvalidParams(exc.message, exc.data) from None


@registry.method(w.NoParams, dict[str, Any])
async def runtime_provider_get(ctx: CallContext, params: w.NoParams) -> dict[str, Any]:
    """Return the LLM provider settings with keys masked, and the environment overrides in effect.

    Environment variables (TRAINEE_LLM_PROVIDER, LLM_PROVIDER, *_API_KEY,
    *_MODEL, *_BASE_URL, TRAINEE_LLM_TIMEOUT_SEC, TRAINEE_LLM_TEMPERATURE) take
    precedence over ~/.trainee/config.json; ``overrides`` lists them.
    """
    settings = load_settings(_env())
    return masked_view(settings, _env())


@registry.method(w.ProviderUpdateParams, dict[str, Any])
async def runtime_provider_update(
    ctx: CallContext, params: w.ProviderUpdateParams
) -> dict[str, Any]:
    """Change the provider settings saved in ~/.trainee/config.json (written 0600); returns them masked.

    Fields left out stay as they are; an empty string clears a provider field.
    The file is validated before it is written: a bad value changes nothing.
    """
    update = {k: v for k, v in msgspec.to_builtins(params).items() if v is not None}
    await _save(update)
    return await runtime_provider_get(ctx, w.NoParams())


@registry.method(LlmTestParams, dict[str, Any])
async def llm_test(ctx: CallContext, params: LlmTestParams) -> dict[str, Any]:
    """Live-test a provider with a tiny real structured request, negotiated as a decision's
    is (default: the active one).

    Returns ``ok``, the provider, model, URL, latency and the response format that worked
    (json_schema, json_object or text), or the error. Settings are resolved from ``env``
    when given (the caller's shell, as doctor does), else from the daemon's environment;
    ``environment`` says which.
    """
    from trainee.llm.client import provider_test

    env = params.env if params.env is not None else _env()
    result = await provider_test(env, provider=params.provider, failover=False)
    result["environment"] = "caller" if params.env is not None else "daemon"
    return result


class DebugResult(w.Wire):
    enabled: bool


@registry.method(w.NoParams, DebugResult)
async def runtime_debug_get(ctx: CallContext, params: w.NoParams) -> DebugResult:
    """Return whether debug recording is on (full prompts and raw responses kept, verbose log)."""
    return DebugResult(enabled=load_settings(_env()).debug)


@registry.method(w.DebugUpdateParams, DebugResult)
async def runtime_debug_update(ctx: CallContext, params: w.DebugUpdateParams) -> DebugResult:
    """Switch debug recording on or off (saved in config.json; the daemon log level follows)."""
    await _save({"debug": params.enabled})
    logging.getLogger("trainee").setLevel(logging.DEBUG if params.enabled else logging.INFO)
    return DebugResult(enabled=params.enabled)


MAX_SYSTEM_PROMPT = 64 * 1024


class SystemPromptResult(w.Wire):
    prompt: str
    is_default: bool


@registry.method(w.NoParams, SystemPromptResult)
async def runtime_system_prompt_get(ctx: CallContext, params: w.NoParams) -> SystemPromptResult:
    """Return the global decision system prompt (the first part of every decision prompt).

    Also ``GET /api/runtime/system-prompt``.
    """
    from trainee.llm.settings import DEFAULT_SYSTEM_PROMPT

    prompt = load_settings(_env()).system_prompt
    return SystemPromptResult(prompt=prompt, is_default=prompt == DEFAULT_SYSTEM_PROMPT)


@registry.method(w.SystemPromptUpdateParams, SystemPromptResult)
async def runtime_system_prompt_update(
    ctx: CallContext, params: w.SystemPromptUpdateParams
) -> SystemPromptResult:
    """Replace the global decision system prompt; an empty prompt restores the default.

    Also ``PUT /api/runtime/system-prompt`` with ``{"prompt": ...}``; at most 64 KiB.
    """
    if len(params.prompt) > MAX_SYSTEM_PROMPT:
        raise InvalidParams(
            f"the system prompt is too large: {len(params.prompt)} characters "
            f"({MAX_SYSTEM_PROMPT} at most)",
            {"field": "prompt", "reason": "too large", "limit": MAX_SYSTEM_PROMPT},
        )
    await _save({"system_prompt": params.prompt})
    return await runtime_system_prompt_get(ctx, w.NoParams())


class PresetsResult(w.Wire):
    presets: dict[str, dict[str, str]]


@registry.method(w.NoParams, PresetsResult)
async def prompt_presets_list(ctx: CallContext, params: w.NoParams) -> PresetsResult:
    """List the saved prompt presets (name -> prompt and kind)."""
    presets = load_settings(_env()).presets
    return PresetsResult(
        presets={n: {"prompt": p.prompt, "kind": p.kind} for n, p in presets.items()}
    )


@registry.method(w.PromptPresetSaveParams, PresetsResult)
async def prompt_presets_save(ctx: CallContext, params: w.PromptPresetSaveParams) -> PresetsResult:
    """Save (or replace) a named prompt preset; apply it with runtime_system_prompt_update."""
    await _save({"presets": {params.name: {"prompt": params.prompt, "kind": params.kind}}})
    return await prompt_presets_list(ctx, w.NoParams())
