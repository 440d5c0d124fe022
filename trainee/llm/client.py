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
import logging
import re
import sys
import time
from collections.abc import Mapping
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
    load_settings,
    redact,
    secret_values,
)
from trainee.policies import needs_provider

__all__ = [
    "LIVE_TEST_TIMEOUT_SEC",
    "Completion",
    "ErrorKind",
    "PlannedRequest",
    "ProviderAttempt",
    "ResponseFormat",
    "close_clients",
    "complete",
    "complete_with_failover",
    "forget_formats",
    "live_test",
    "live_test_all",
    "no_provider_error",
    "planned_request",
    "provider_test",
    "provider_url",
    "require_provider",
    "route",
]

ResponseFormat = Literal["json_schema", "json_object", "text"]
ErrorKind = Literal["timeout", "http", "auth", "refused_format", "connection", "config", "other"]
"""``config``: something on this side is missing (model, base URL, key); nothing was sent."""
_LEVELS: tuple[ResponseFormat, ...] = get_args(ResponseFormat)

LIVE_TEST_TIMEOUT_SEC = 60.0
LIVE_TEST_MAX_TOKENS = 32
_DUMMY_KEY = "sk-no-key-required"
_MAX_ERROR_CHARS = 400

log = logging.getLogger("trainee.llm")

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
    """One request to one provider: a refused response format, a failure, or the answer.

    A decision keeps every attempt (the negotiation steps and the failover included), so
    the decision view and the report can show what each server really did.
    """

    provider: str
    model: str
    error: str
    kind: ErrorKind | None
    status: int | None = None
    url: str | None = None
    response_format: ResponseFormat | None = None
    ok: bool = False
    latency_sec: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


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


_DEFAULT_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "moonshot": MOONSHOT_BASE_URL,
}
_KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    "moonshot": "MOONSHOT_API_KEY",
}


def provider_url(p: ProviderConfig) -> str | None:
    """Where requests to ``p`` go (its base URL, else the vendor's), for messages."""
    return p.base_url or _DEFAULT_URLS.get(p.name)


def route(p: ProviderConfig) -> tuple[str, dict[str, Any]]:
    """The litellm model string and connection kwargs (api_base, api_key) for ``p``.

    Raises ProviderError for what is wrong on this side (no model, no base URL, no API key
    for a vendor that needs one): nothing is sent, and the message says so.
    """
    if not p.model:
        env = "TRAINEE_LLM_MODEL" if p.name in ("litellm", "openai_compatible") else None
        env = env or f"{p.name.upper()}_MODEL"
        raise ProviderError(
            f"{p.name}: no model configured (set {env} or save a model)",
            {"provider": p.name, "model": None, "kind": "config", "status": None},
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
            {"provider": p.name, "model": p.model, "kind": "config", "status": None},
        )
    if p.name in _KEY_ENV and not p.api_key:
        url = provider_url(p)
        raise ProviderError(
            f"{p.name} ({p.model} at {url}): no API key configured (set {_KEY_ENV[p.name]} "
            "or save one; for a local server that needs no key use the openai_compatible "
            "provider); nothing was sent",
            {"provider": p.name, "model": p.model, "kind": "config", "status": None, "url": url},
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
        "(no prose, no code fences):\n" + json.dumps(_strict_schema(schema), ensure_ascii=False)
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
            "json_schema": {
                "name": _schema_name(schema),
                "schema": _strict_schema(schema),
                "strict": True,
            },
        }
        return {"messages": messages, "response_format": fmt}
    noted = _with_schema_note(messages, schema)
    if level == "json_object":
        fmt = {"type": "json_object"}
        if p.name == "openai_compatible":
            fmt["schema"] = grammar_schema(schema)
        return {"messages": noted, "response_format": fmt}
    return {"messages": noted}


_TEXT_PATTERN = r'^[A-Za-z0-9\[(][^"\\{}]*$'
"""What a required text of a plan may look like under a generation grammar."""


def grammar_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` for a local server that turns it into a generation grammar (llama.cpp):
    the string fields a plan requires (those listed in ``x-non-empty``) get a minimum
    length and a pattern (a letter, digit, ``[`` or ``(`` first; no quote, backslash or
    braces), so the grammar itself cannot produce an empty text or a copied ``<why>`` /
    ``{name}`` slot of the answer example: a small model copies those (SmolLM2-135M did
    in 8 of 10 answers), and under such a grammar it writes its own words instead.
    A bounded number's ``x-grid`` becomes its ``enum``: llama.cpp's grammars do not
    enforce ``minimum`` / ``maximum`` (a small model wrote weight_decay 4578692 for a
    maximum of 0.1), but they do enforce a list. ``x-`` hints are dropped (strict OpenAI
    schemas refuse unknown keywords and ``minLength``, so the json_schema level never
    carries any of this)."""
    out = dict(schema)
    wanted = out.pop("x-non-empty", None)
    grid = out.pop("x-grid", None)
    if isinstance(grid, list) and grid and "enum" not in out:
        # the grammar enforces a list of values; it cannot enforce minimum / maximum
        out["enum"] = grid
    props = out.get("properties")
    if isinstance(props, dict):
        props = {k: grammar_schema(v) if isinstance(v, dict) else v for k, v in props.items()}
        for name in wanted or ():
            if isinstance(props.get(name), dict) and props[name].get("type") == "string":
                props[name] = {**props[name], "minLength": 4, "pattern": _TEXT_PATTERN}
        out["properties"] = props
    items = out.get("items")
    if isinstance(items, dict):
        out["items"] = grammar_schema(items)
    return out


def _strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` without trainee's own ``x-`` hints (for the json_schema level)."""
    out = {k: v for k, v in schema.items() if not k.startswith("x-")}
    props = out.get("properties")
    if isinstance(props, dict):
        out["properties"] = {
            k: _strict_schema(v) if isinstance(v, dict) else v for k, v in props.items()
        }
    if isinstance(out.get("items"), dict):
        out["items"] = _strict_schema(out["items"])
    return out


# -- errors ------------------------------------------------------------------------------

_FORMAT_WORDS = (
    "response_format",
    "response format",
    "json_schema",
    "json schema",
    "json_object",
    "structured output",
    "schema",
    "grammar",
)
# Statuses that never mean "this response format is not supported": the credentials, a
# missing route or model, a rate limit. Any other status (400, 422, 500 as llama.cpp's
# server sends for json_schema, 501, ...) or none is a refusal when its text names the format.
_NOT_A_FORMAT_REFUSAL = frozenset({401, 403, 404, 408, 429})
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
    """Whether the server refused the request's response format (so the next, simpler
    level may work). Servers say so with many statuses: 400 / 422 (OpenAI-style), 500
    (llama-cpp-python's server on ``json_schema``), 501; what they share is a message
    naming the format."""
    if "UnsupportedParamsError" in _names(exc):
        return True
    if _status(exc) in _NOT_A_FORMAT_REFUSAL:
        return False
    if isinstance(exc, TimeoutError) or _names(exc) & {"Timeout", "APITimeoutError"}:
        return False
    text = str(exc).lower()
    if any(word in text for word in _CONNECTION_WORDS):
        return False
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
        "config": "not configured",
        "other": "error",
    }[kind]
    url = provider_url(p)
    where = f"{p.model} at {url}" if url else f"{p.model}"
    return ProviderError(
        f"{p.name} ({where}): {label}: {detail}",
        {
            "provider": p.name,
            "model": p.model,
            "kind": kind,
            "status": status,
            "response_format": level,
            "url": url,
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


def _remaining(deadline: float | None, limit: float) -> float:
    """Seconds a call may take: ``limit``, or less when the decision's deadline is nearer."""
    if deadline is None:
        return limit
    return min(limit, deadline - time.monotonic())


class PlannedRequest(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`complete` sends first for a set of messages: the response format it
    starts its negotiation at (what worked last with this provider and model), and the
    messages and ``response_format`` member as shaped for that format."""

    provider: str
    model: str
    url: str | None
    response_format: ResponseFormat
    messages: list[dict[str, Any]]
    format_body: dict[str, Any] | None
    """The request's ``response_format`` member (None at the ``text`` level)."""
    max_tokens: int
    temperature: float


def _plan(
    settings: LlmSettings, p: ProviderConfig, schema: dict[str, Any] | None
) -> tuple[str, dict[str, Any], tuple[str, str, str | None], tuple[ResponseFormat, ...], float]:
    """``(litellm model, connection, cache key, format levels to try, temperature)`` of a
    request to ``p``; ProviderError when ``p`` is missing a model, URL or key."""
    model, conn = route(p)
    key = (p.name, model, conn.get("api_base"))
    if schema is None:
        levels: tuple[ResponseFormat, ...] = ("text",)
    else:
        levels = _LEVELS[_LEVELS.index(_format_cache.get(key, "json_schema")) :]
    temperature = settings.temperature
    if model.startswith("anthropic/"):
        temperature = min(temperature, 1.0)  # Anthropic's range is 0..1
    return model, conn, key, levels, temperature


def planned_request(
    messages: list[dict[str, Any]],
    *,
    settings: LlmSettings,
    schema: dict[str, Any] | None,
    max_tokens: int,
    provider: ProviderConfig | None = None,
) -> PlannedRequest:
    """The first request :func:`complete` would send to ``provider`` (default: the active
    one) for ``messages``; nothing is sent. Raises ProviderError like :func:`complete`
    when no provider is configured or it lacks a model, URL or key."""
    p = provider if provider is not None else settings.active
    if p is None:
        raise no_provider_error()
    model, _conn, _key, levels, temperature = _plan(settings, p, schema)
    shaped = _request(levels[0], messages, schema, p)
    return PlannedRequest(
        provider=p.name,
        model=p.model or model,
        url=provider_url(p),
        response_format=levels[0],
        messages=shaped["messages"],
        format_body=shaped.get("response_format"),
        max_tokens=max_tokens,
        temperature=temperature,
    )


async def complete(
    messages: list[dict[str, Any]],
    *,
    settings: LlmSettings,
    schema: dict[str, Any] | None,
    max_tokens: int,
    provider: ProviderConfig | None = None,
    deadline: float | None = None,
    attempts: list[ProviderAttempt] | None = None,
) -> Completion:
    """Ask one provider (default: the active one). The call, format negotiation included,
    ends by ``settings.timeout_sec`` or by ``deadline`` (a ``time.monotonic()`` instant),
    whichever is first. Every request made is appended to ``attempts`` (a refused format,
    the failure or the answer). Raises ProviderError."""
    p = provider if provider is not None else settings.active
    if p is None:
        raise no_provider_error()
    model, conn, key, levels, temperature = _plan(settings, p, schema)
    secrets = [*secret_values(settings), *([p.api_key] if p.api_key else [])]
    url = provider_url(p)
    log_of: list[ProviderAttempt] = attempts if attempts is not None else []

    def note(level: ResponseFormat, began: float, exc: ProviderError | None, **extra: Any) -> None:
        data = exc.data if exc is not None and isinstance(exc.data, dict) else {}
        log_of.append(
            ProviderAttempt(
                provider=p.name,
                model=p.model or model,
                url=url,
                response_format=level,
                ok=exc is None,
                error=exc.message if exc is not None else "",
                kind=data.get("kind") if exc is not None else None,
                status=data.get("status") if isinstance(data.get("status"), int) else None,
                latency_sec=round(time.monotonic() - began, 3),
                **extra,
            )
        )

    budget = _remaining(deadline, settings.timeout_sec)
    litellm = import_litellm()
    started = time.monotonic()
    level: ResponseFormat = levels[0]
    resp: Any = None
    began = started
    try:
        if budget <= 0:
            raise TimeoutError
        with anyio.fail_after(budget):
            for level in levels:
                began = time.monotonic()
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
                            refusal = _error(
                                p,
                                "refused_format",
                                _clean(str(exc), secrets),
                                status=_status(exc),
                                level=level,
                            )
                            note(level, began, refusal)
                            log.info("%s: %s; trying a simpler format", p.name, refusal.message)
                            continue
                        kind: ErrorKind = "refused_format"
                        status = _status(exc)
                    else:
                        kind, status = _classify(exc)
                    detail = _clean(str(exc), secrets)
                    if any(word in str(exc).lower() for word in _BAD_BODY_WORDS):
                        detail = f"invalid response body ({detail})"
                    failure = _error(p, kind, detail, status=status, level=level)
                    note(level, began, failure)
                    raise failure from None
                break
    except TimeoutError:
        failure = _error(
            p,
            "timeout",
            f"no reply within {max(budget, 0):.3g} s",
            status=None,
            level=level,
        )
        note(level, began, failure)
        raise failure from None
    latency = time.monotonic() - started

    try:
        text = _text_of(resp)
    except (AttributeError, IndexError, TypeError) as exc:
        failure = _error(
            p, "other", f"malformed response: {_clean(str(exc), secrets)}", status=None, level=level
        )
        note(level, began, failure)
        raise failure from None
    if len(text) > _max_chars(max_tokens):
        failure = _error(
            p,
            "other",
            f"response too large: {len(text)} characters for max_tokens={max_tokens}",
            status=None,
            level=level,
        )
        note(level, began, failure)
        raise failure
    if schema is not None:
        _format_cache[key] = level
    prompt_tokens, completion_tokens = _usage_of(resp)
    note(level, began, None, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
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


def _config_attempt(p: ProviderConfig, exc: ProviderError) -> ProviderAttempt:
    """The attempt of a provider that failed before any request (route() refused it)."""
    data = exc.data if isinstance(exc.data, dict) else {}
    kind = data.get("kind")
    return ProviderAttempt(
        provider=p.name,
        model=p.model or "",
        url=provider_url(p),
        error=exc.message,
        kind=cast(ErrorKind, kind) if kind in get_args(ErrorKind) else "other",
        status=None,
    )


async def complete_with_failover(
    messages: list[dict[str, Any]],
    *,
    settings: LlmSettings,
    schema: dict[str, Any] | None,
    max_tokens: int,
    deadline: float | None = None,
    attempts: list[ProviderAttempt] | None = None,
) -> Completion:
    """Try the active provider, then each other configured one (``candidates``).

    With a ``deadline`` (``time.monotonic()``), a provider gets an equal share of the time
    left among the providers not yet tried (the last one gets all that is left), so one
    frozen server never eats the backups' time. Every request is appended to
    ``attempts``; each failover is logged with its reason. When every provider fails:
    ProviderError("all providers failed: ...", {"attempts": [...]}).
    """
    order = candidates(settings)
    if not order:
        raise no_provider_error()
    log_of: list[ProviderAttempt] = attempts if attempts is not None else []
    first = len(log_of)
    errors: list[str] = []
    for i, p in enumerate(order):
        share = None
        before = len(log_of)
        if deadline is not None:
            share = time.monotonic() + (deadline - time.monotonic()) / (len(order) - i)
        try:
            result = await complete(
                messages,
                settings=settings,
                schema=schema,
                max_tokens=max_tokens,
                provider=p,
                deadline=share,
                attempts=log_of,
            )
        except ProviderError as exc:
            if len(log_of) == before:  # refused before any request (route)
                log_of.append(_config_attempt(p, exc))
            errors.append(exc.message)
            rest = [q.name for q in order[i + 1 :]]
            log.warning(
                "provider %s failed: %s%s",
                p.name,
                exc.message,
                f"; trying {rest[0]}" if rest else "; no other provider is configured",
            )
            continue
        return result
    raise ProviderError(
        "all providers failed: " + "; ".join(errors),
        {"attempts": [msgspec.to_builtins(a) for a in log_of[first:]]},
    )


LIVE_TEST_SCHEMA: dict[str, Any] = {
    "title": "live_test",
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}
"""The structured request of the live test: what decisions need (a schema), in small."""


async def live_test(
    settings: LlmSettings,
    provider: ProviderConfig | str | None = None,
    *,
    timeout_sec: float | None = None,
) -> dict[str, Any]:
    """A tiny real structured request (a JSON schema, negotiated like a decision's) to one
    provider (default: the active one), so it fails when decisions would.

    Returns ``{ok, provider, model, url, latency_sec, reply, response_format}`` (the format
    that worked) or ``{ok: False, ..., error, kind}``; never raises for a provider
    failure. The timeout is the smaller of the settings' and ``timeout_sec`` (default
    LIVE_TEST_TIMEOUT_SEC).
    """
    if isinstance(provider, str):
        p = settings.providers.get(provider)
        if p is None and provider != "none":
            return {
                "ok": False,
                "provider": provider,
                "model": None,
                "url": None,
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
            "url": None,
            "latency_sec": 0.0,
            "error": err.message,
            "kind": "other",
        }
    limit = min(settings.timeout_sec, timeout_sec or LIVE_TEST_TIMEOUT_SEC)
    quick = msgspec.structs.replace(settings, timeout_sec=limit)
    started = time.monotonic()
    tried: list[ProviderAttempt] = []
    try:
        result = await complete(
            [{"role": "user", "content": 'Reply with the JSON object {"ok": true}.'}],
            settings=quick,
            schema=LIVE_TEST_SCHEMA,
            max_tokens=LIVE_TEST_MAX_TOKENS,
            provider=p,
            attempts=tried,
        )
    except ProviderError as exc:
        data = exc.data if isinstance(exc.data, dict) else {}
        return {
            "ok": False,
            "provider": p.name,
            "model": p.model,
            "url": provider_url(p),
            "latency_sec": round(time.monotonic() - started, 3),
            "error": exc.message,
            "kind": data.get("kind", "other"),
            "refused_formats": [a.response_format for a in tried if a.kind == "refused_format"],
        }
    return {
        "ok": True,
        "provider": p.name,
        "model": p.model,
        "url": provider_url(p),
        "latency_sec": round(result.latency_sec, 3),
        "reply": result.text[:200],
        "response_format": result.response_format,
        "refused_formats": [a.response_format for a in tried if a.kind == "refused_format"],
    }


async def live_test_all(
    settings: LlmSettings, *, timeout_sec: float | None = None
) -> dict[str, Any]:
    """:func:`live_test` on every provider of the failover order (``candidates``).

    ``ok`` when at least one works; ``provider`` is the first that works (the one
    decisions will use first when the active provider is down), and ``providers`` lists
    each result in failover order. With no provider configured: the no-provider error.
    """
    order = candidates(settings)
    if not order:
        return await live_test(settings, None, timeout_sec=timeout_sec)
    results = [await live_test(settings, p, timeout_sec=timeout_sec) for p in order]
    working = next((r for r in results if r.get("ok")), None)
    head = dict(working if working is not None else results[0])
    head["ok"] = working is not None
    head["providers"] = results
    if working is not None and working["provider"] != order[0].name:
        head["note"] = (
            f"the active provider {order[0].name} failed its live test "
            f"({results[0].get('error')}); decisions will fail over to {working['provider']}"
        )
    if working is None:
        head["error"] = "; ".join(str(r.get("error")) for r in results)
    return head


NO_PROVIDER = "no LLM provider is configured"


async def provider_test(
    env: Mapping[str, str],
    *,
    policy: str = "llm",
    skip: bool = False,
    provider: str | None = None,
    failover: bool = True,
) -> dict[str, Any]:
    """The provider's live test as every command reports it (init, prepare, run, doctor,
    ``llm_test``), with the settings resolved from ``env``.

    ``policy`` and ``needed`` (whether that policy asks a provider) lead the answer; a
    test that is not needed or ``skip``-ped says ``skipped`` and why. Otherwise the
    answer of :func:`live_test_all` (every provider of the failover order), or of
    :func:`live_test` for ``provider`` (or the active one when not ``failover``); with no
    provider configured, ``ok`` false and provider ``none``. Raises ConfigError for a bad
    config.json.
    """
    needed = needs_provider(policy)
    base: dict[str, Any] = {"policy": policy, "needed": needed}
    if not needed:  # whether skipped or not: nothing to test
        return {**base, "skipped": True, "reason": f"policy {policy} needs no provider"}
    if skip:
        return {**base, "skipped": True, "reason": "--skip-provider-test"}
    settings = load_settings(dict(env))
    if provider is not None or not failover:
        return {**base, **await live_test(settings, provider)}
    if settings.provider == "none":
        return {**base, "ok": False, "provider": "none", "error": NO_PROVIDER}
    return {**base, **await live_test_all(settings)}


def require_provider(result: dict[str, Any], command: str = "trainee run") -> None:
    """ProviderError unless :func:`provider_test` found a provider that works (or none
    was needed)."""
    if result.get("skipped") or result.get("ok"):
        return
    if result.get("provider") == "none" and result.get("error") == NO_PROVIDER:
        raise ProviderError(
            f"{NO_PROVIDER}: {command} needs one for the {result.get('policy', 'llm')} policy",
            {
                "hint": "export TRAINEE_LLM_PROVIDER=openai OPENAI_API_KEY=... OPENAI_MODEL=..., "
                "or choose an offline policy: --policy tpe|random"
            },
        )
    raise ProviderError(
        f"the LLM provider failed its live test: {result.get('error')}",
        {"provider_test": result, "hint": "check the key, model and base URL"},
    )


async def close_clients() -> None:
    """Close litellm's cached HTTP clients (daemon shutdown; the end of an event loop).

    A no-op when litellm was never imported.
    """
    litellm = sys.modules.get("litellm")
    if litellm is None:
        return
    await litellm.close_litellm_async_clients()
    litellm.in_memory_llm_clients_cache.flush_cache()
