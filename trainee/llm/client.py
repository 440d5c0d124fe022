"""LLM calls through litellm: response-format negotiation, failover, live test.

litellm is imported inside the calls (it takes seconds to import). Every failure
leaves this module as ``errors.ProviderError`` with ``data = {provider, model, kind,
status, response_format}``; API keys are redacted from messages and from ``raw``.

Negotiation (with a schema): ``json_schema`` (strict) -> ``json_object`` with the
schema in the system message (and, for an OpenAI-compatible local server, in a
``schema`` key as llama.cpp accepts) -> plain text with the schema in the system
message. A server refusing a format (HTTP 400/422 naming response_format/json_schema,
or litellm's UnsupportedParamsError) moves to the next; what worked is remembered per
provider + model for the life of the process. Local servers enforce no numeric bounds:
callers validate the reply.
"""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any, Literal, cast, get_args

import anyio
import msgspec

from trainee.errors import ProviderError
from trainee.llm.cost import completion_cost, import_litellm
from trainee.llm.settings import (
    MOONSHOT_BASE_URL,
    LlmSettings,
    ProviderConfig,
    candidates,
    redact,
    secret_values,
)

__all__ = [
    "LIVE_TEST_TIMEOUT_SEC",
    "Completion",
    "ErrorKind",
    "ProviderAttempt",
    "ResponseFormat",
    "close_clients",
    "complete",
    "complete_with_failover",
    "forget_formats",
    "live_test",
    "no_provider_error",
    "route",
]

ResponseFormat = Literal["json_schema", "json_object", "text"]
ErrorKind = Literal["timeout", "http", "auth", "refused_format", "connection", "other"]
_LEVELS: tuple[ResponseFormat, ...] = get_args(ResponseFormat)

LIVE_TEST_TIMEOUT_SEC = 60.0
LIVE_TEST_MAX_TOKENS = 16
_DUMMY_KEY = "sk-no-key-required"
_MAX_ERROR_CHARS = 400

# (provider, litellm model, api_base) -> the first format that worked.
_format_cache: dict[tuple[str, str, str | None], ResponseFormat] = {}


class Completion(msgspec.Struct, frozen=True, kw_only=True):
    """One successful call. ``raw`` is the provider's response (keys redacted)."""

    text: str
    provider: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_sec: float
    response_format: ResponseFormat
    raw: dict[str, Any] = msgspec.field(default_factory=dict)


class ProviderAttempt(msgspec.Struct, frozen=True, kw_only=True):
    """One provider that failed during failover."""

    provider: str
    model: str
    error: str
    kind: ErrorKind
    status: int | None = None


def forget_formats() -> None:
    """Forget which response formats worked (tests; a provider changed its server)."""
    _format_cache.clear()


def no_provider_error() -> ProviderError:
    return ProviderError(
        "no LLM provider configured: set TRAINEE_LLM_PROVIDER (openai, anthropic, moonshot, "
        "litellm, openai_compatible) with its API key, or save one with runtime_provider_update",
        {
            "provider": "none",
            "kind": "other",
            "status": None,
            "hint": "export TRAINEE_LLM_PROVIDER=openai OPENAI_API_KEY=... OPENAI_MODEL=gpt-4o-mini",
        },
    )


def _prefixed(prefix: str, model: str) -> str:
    return model if model.startswith(prefix + "/") else f"{prefix}/{model}"


def route(p: ProviderConfig) -> tuple[str, dict[str, Any]]:
    """The litellm model string and connection kwargs (api_base, api_key) for ``p``."""
    if not p.model:
        env = "TRAINEE_LLM_MODEL" if p.name in ("litellm", "openai_compatible") else None
        env = env or f"{p.name.upper()}_MODEL"
        raise ProviderError(
            f"{p.name}: no model configured (set {env} or save a model)",
            {"provider": p.name, "model": None, "kind": "other", "status": None},
        )
    kwargs: dict[str, Any] = {}
    if p.name in ("openai", "openai_compatible"):
        model = _prefixed("openai", p.model)
    elif p.name == "anthropic":
        model = _prefixed("anthropic", p.model)
    elif p.name == "moonshot":
        model = _prefixed("moonshot", p.model)
        kwargs["api_base"] = MOONSHOT_BASE_URL
    else:
        model = p.model
    if p.name == "openai_compatible" and not p.base_url:
        raise ProviderError(
            "openai_compatible: no base URL configured (set TRAINEE_LLM_BASE_URL, "
            "e.g. http://127.0.0.1:8080/v1)",
            {"provider": p.name, "model": p.model, "kind": "other", "status": None},
        )
    if p.base_url:
        kwargs["api_base"] = p.base_url
    if p.api_key:
        kwargs["api_key"] = p.api_key
    elif p.name == "openai_compatible":
        kwargs["api_key"] = _DUMMY_KEY
    return model, kwargs


# -- request shaping -------------------------------------------------------------------


def _schema_name(schema: dict[str, Any]) -> str:
    title = schema.get("title")
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", title)[:64] if isinstance(title, str) else ""
    return name or "response"


def _with_schema_note(
    messages: list[dict[str, Any]], schema: dict[str, Any]
) -> list[dict[str, Any]]:
    """The messages with the schema spelled out in the system message."""
    note = (
        "Reply with one JSON object that conforms to this JSON schema, and nothing else "
        "(no prose, no code fences):\n" + json.dumps(schema, ensure_ascii=False)
    )
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
        out[0]["content"] = out[0]["content"].rstrip() + "\n\n" + note
    else:
        out.insert(0, {"role": "system", "content": note})
    return out


def _request(
    level: ResponseFormat,
    messages: list[dict[str, Any]],
    schema: dict[str, Any] | None,
    p: ProviderConfig,
) -> dict[str, Any]:
    """The messages and response_format for one negotiation level."""
    if schema is None:
        return {"messages": messages}
    if level == "json_schema":
        fmt = {
            "type": "json_schema",
            "json_schema": {"name": _schema_name(schema), "schema": schema, "strict": True},
        }
        return {"messages": messages, "response_format": fmt}
    noted = _with_schema_note(messages, schema)
    if level == "json_object":
        fmt = {"type": "json_object"}
        if p.name == "openai_compatible":
            fmt["schema"] = schema
        return {"messages": noted, "response_format": fmt}
    return {"messages": noted}


# -- errors ------------------------------------------------------------------------------

_FORMAT_WORDS = (
    "response_format",
    "response format",
    "json_schema",
    "json_object",
    "structured output",
)
_CONNECTION_WORDS = (
    "connection error",
    "connection reset",
    "connection refused",
    "connecterror",
    "remoteprotocolerror",
    "server disconnected",
    "errno 104",
    "errno 111",
    "cannot connect",
)
_BAD_BODY_WORDS = ("expecting value", "unable to get json response", "invalid json")


def _names(exc: BaseException) -> set[str]:
    return {c.__name__ for c in type(exc).__mro__}


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    return status if isinstance(status, int) else None


def _is_format_refusal(exc: BaseException) -> bool:
    if "UnsupportedParamsError" in _names(exc):
        return True
    if _status(exc) not in (400, 422):
        return False
    text = str(exc).lower()
    return any(word in text for word in _FORMAT_WORDS)


def _classify(exc: BaseException) -> tuple[ErrorKind, int | None]:
    names, status, text = _names(exc), _status(exc), str(exc).lower()
    if isinstance(exc, TimeoutError) or names & {"Timeout", "APITimeoutError"}:
        return "timeout", None
    if names & {"AuthenticationError", "PermissionDeniedError"} or status in (401, 403):
        return "auth", status
    if any(word in text for word in _CONNECTION_WORDS):
        return "connection", None
    if any(word in text for word in _BAD_BODY_WORDS):
        return "other", None
    if status is not None:
        return "http", status
    return "other", None


def _clean(text: str, secrets: list[str]) -> str:
    """litellm's message without its class-name prefixes, redacted and shortened."""
    text = re.sub(r"^(litellm\.\w+:\s*)?(\w+Error:\s*)?(\w+Exception\s*-\s*)?", "", text.strip())
    text = redact(" ".join(text.split()), secrets)
    if len(text) > _MAX_ERROR_CHARS:
        text = text[:_MAX_ERROR_CHARS] + "..."
    return text or "no detail"


def _error(
    p: ProviderConfig,
    kind: ErrorKind,
    detail: str,
    *,
    status: int | None,
    level: ResponseFormat | None,
) -> ProviderError:
    label = {
        "timeout": "timed out",
        "http": f"HTTP {status}",
        "auth": f"authentication failed (HTTP {status})" if status else "authentication failed",
        "refused_format": "response format refused",
        "connection": "connection failed",
        "other": "error",
    }[kind]
    return ProviderError(
        f"{p.name} ({p.model}): {label}: {detail}",
        {
            "provider": p.name,
            "model": p.model,
            "kind": kind,
            "status": status,
            "response_format": level,
        },
    )


def _max_chars(max_tokens: int) -> int:
    """Longest reply accepted: a token is rarely over 16 characters; this allows 32."""
    return max(65_536, 32 * max_tokens)


# -- responses ---------------------------------------------------------------------------


def _text_of(resp: Any) -> str:
    message = resp.choices[0].message
    text = message.content
    if not text and getattr(message, "tool_calls", None):
        text = message.tool_calls[0].function.arguments
    return text if isinstance(text, str) else ""


def _raw_of(resp: Any, secrets: list[str]) -> dict[str, Any]:
    try:
        data = resp.model_dump(warnings=False)
    except Exception:  # not a pydantic model: keep what json can say
        data = {"repr": repr(resp)}
    encoded = redact(json.dumps(data, default=str, ensure_ascii=False), secrets)
    decoded = json.loads(encoded)
    return decoded if isinstance(decoded, dict) else {"response": decoded}


def _usage_of(resp: Any) -> tuple[int, int]:
    usage = getattr(resp, "usage", None)
    prompt = getattr(usage, "prompt_tokens", 0) or 0
    completion = getattr(usage, "completion_tokens", 0) or 0
    return int(prompt), int(completion)


# -- calls -------------------------------------------------------------------------------


async def complete(
    messages: list[dict[str, Any]],
    *,
    settings: LlmSettings,
    schema: dict[str, Any] | None,
    max_tokens: int,
    provider: ProviderConfig | None = None,
) -> Completion:
    """Ask one provider (default: the active one); ``settings.timeout_sec`` bounds the
    whole call including format negotiation. Raises ProviderError."""
    p = provider if provider is not None else settings.active
    if p is None:
        raise no_provider_error()
    model, conn = route(p)
    secrets = [*secret_values(settings), *([p.api_key] if p.api_key else [])]
    key = (p.name, model, conn.get("api_base"))
    if schema is None:
        levels: tuple[ResponseFormat, ...] = ("text",)
    else:
        levels = _LEVELS[_LEVELS.index(_format_cache.get(key, "json_schema")) :]
    temperature = settings.temperature
    if model.startswith("anthropic/"):
        temperature = min(temperature, 1.0)  # Anthropic's range is 0..1

    litellm = import_litellm()
    started = time.monotonic()
    level: ResponseFormat = levels[0]
    resp: Any = None
    try:
        with anyio.fail_after(settings.timeout_sec):
            for level in levels:
                try:
                    resp = await litellm.acompletion(
                        model=model,
                        max_tokens=max_tokens,
                        temperature=temperature,
                        # a fixed value: litellm caches one HTTP client per distinct
                        # timeout, so a per-call remainder would leak a client (and its
                        # sockets) on every decision; fail_after bounds the whole call
                        timeout=settings.timeout_sec,
                        num_retries=0,
                        max_retries=0,
                        **conn,
                        **_request(level, messages, schema, p),
                    )
                except Exception as exc:
                    if _is_format_refusal(exc):
                        if level != "text":
                            continue
                        kind: ErrorKind = "refused_format"
                        status = _status(exc)
                    else:
                        kind, status = _classify(exc)
                    detail = _clean(str(exc), secrets)
                    if any(word in str(exc).lower() for word in _BAD_BODY_WORDS):
                        detail = f"invalid response body ({detail})"
                    raise _error(p, kind, detail, status=status, level=level) from None
                break
    except TimeoutError:
        raise _error(
            p,
            "timeout",
            f"no reply within {settings.timeout_sec:g} s",
            status=None,
            level=level,
        ) from None
    latency = time.monotonic() - started

    try:
        text = _text_of(resp)
    except (AttributeError, IndexError, TypeError) as exc:
        raise _error(
            p, "other", f"malformed response: {_clean(str(exc), secrets)}", status=None, level=level
        ) from None
    if len(text) > _max_chars(max_tokens):
        raise _error(
            p,
            "other",
            f"response too large: {len(text)} characters for max_tokens={max_tokens}",
            status=None,
            level=level,
        )
    if schema is not None:
        _format_cache[key] = level
    prompt_tokens, completion_tokens = _usage_of(resp)
    cost = completion_cost(
        model,
        prompt_tokens,
        completion_tokens,
        settings.prices,
        use_price_table=p.name != "openai_compatible",
    )
    return Completion(
        text=redact(text, secrets),
        provider=p.name,
        model=p.model or model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost,
        latency_sec=latency,
        response_format=level,
        raw=_raw_of(resp, secrets),
    )


def _attempt(p: ProviderConfig, exc: ProviderError) -> ProviderAttempt:
    data = exc.data if isinstance(exc.data, dict) else {}
    kind = data.get("kind")
    status = data.get("status")
    return ProviderAttempt(
        provider=p.name,
        model=p.model or "",
        error=exc.message,
        kind=cast(ErrorKind, kind) if kind in get_args(ErrorKind) else "other",
        status=status if isinstance(status, int) else None,
    )


async def complete_with_failover(
    messages: list[dict[str, Any]],
    *,
    settings: LlmSettings,
    schema: dict[str, Any] | None,
    max_tokens: int,
) -> tuple[Completion, list[ProviderAttempt]]:
    """Try the active provider, then each other configured one (``candidates``).

    Returns the completion and the attempts that failed before it. When every provider
    fails: ProviderError("all providers failed: ...", {"attempts": [...]}).
    """
    order = candidates(settings)
    if not order:
        raise no_provider_error()
    attempts: list[ProviderAttempt] = []
    for p in order:
        try:
            result = await complete(
                messages, settings=settings, schema=schema, max_tokens=max_tokens, provider=p
            )
        except ProviderError as exc:
            attempts.append(_attempt(p, exc))
            continue
        return result, attempts
    raise ProviderError(
        "all providers failed: " + "; ".join(a.error for a in attempts),
        {"attempts": [msgspec.to_builtins(a) for a in attempts]},
    )


async def live_test(
    settings: LlmSettings,
    provider: ProviderConfig | str | None = None,
    *,
    timeout_sec: float | None = None,
) -> dict[str, Any]:
    """A tiny real request ("Reply with OK") to one provider (default: the active one).

    Returns ``{ok, provider, model, latency_sec, reply}`` or ``{ok: False, ..., error,
    kind}``; never raises for a provider failure. The timeout is the smaller of the
    settings' and ``timeout_sec`` (default LIVE_TEST_TIMEOUT_SEC).
    """
    if isinstance(provider, str):
        p = settings.providers.get(provider)
        if p is None and provider != "none":
            return {
                "ok": False,
                "provider": provider,
                "model": None,
                "latency_sec": 0.0,
                "error": f"unknown provider {provider!r}",
                "kind": "other",
            }
    else:
        p = provider if provider is not None else settings.active
    if p is None:
        err = no_provider_error()
        return {
            "ok": False,
            "provider": "none",
            "model": None,
            "latency_sec": 0.0,
            "error": err.message,
            "kind": "other",
        }
    limit = min(settings.timeout_sec, timeout_sec or LIVE_TEST_TIMEOUT_SEC)
    quick = msgspec.structs.replace(settings, timeout_sec=limit)
    started = time.monotonic()
    try:
        result = await complete(
            [{"role": "user", "content": "Reply with OK."}],
            settings=quick,
            schema=None,
            max_tokens=LIVE_TEST_MAX_TOKENS,
            provider=p,
        )
    except ProviderError as exc:
        data = exc.data if isinstance(exc.data, dict) else {}
        return {
            "ok": False,
            "provider": p.name,
            "model": p.model,
            "latency_sec": round(time.monotonic() - started, 3),
            "error": exc.message,
            "kind": data.get("kind", "other"),
        }
    return {
        "ok": True,
        "provider": p.name,
        "model": p.model,
        "latency_sec": round(result.latency_sec, 3),
        "reply": result.text[:200],
    }


async def close_clients() -> None:
    """Close litellm's cached HTTP clients (daemon shutdown; the end of an event loop).

    A no-op when litellm was never imported.
    """
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return
    await litellm.close_litellm_async_clients()
    litellm.in_memory_llm_clients_cache.flush_cache()
