"""LLM provider settings: ``~/.trainee/config.json`` overlaid by the environment.

Stdlib + msgspec only (no litellm, nothing heavy), so anything may import it. The file holds what the
user saved (Web UI / ``runtime_provider_update``); environment variables win over it
and are never written back. API keys are masked in every view this module returns.

config.json::

    {"provider": "openai",
     "providers": {"openai": {"model": "gpt-4o-mini", "api_key": "sk-...", "base_url": null}},
     "failover": ["openai_compatible", "anthropic"],
     "llm_timeout_sec": 600, "llm_temperature": 1.0,
     "system_prompt": "...", "prompt_presets": {"name": {"prompt": "...", "kind": "system"}},
     "debug": false,
     "prices": {"my-model": {"input_per_mtok": 0.5, "output_per_mtok": 1.5}},
     "notify": {"urls": ["tgram://..."], "on": ["session_failed"], "stall_minutes": 30}}

``notify`` (Apprise URLs, see :class:`trainee.spec.files.NotifySpec`) is read by
:func:`load_notify`; its URLs are secrets like the keys.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit

import msgspec
from msgspec import Meta

from trainee import paths
from trainee.atomic import write_atomic
from trainee.errors import ConfigError, InvalidParams
from trainee.research.prompt import DEFAULT_SYSTEM_PROMPT as _PROMPT_DEFAULT
from trainee.spec.files import NotifySpec
from trainee.spec.integrations import notify_url_problem

__all__ = [
    "DEFAULT_MODELS",
    "DEFAULT_SYSTEM_PROMPT",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_TIMEOUT_SEC",
    "ENV_VARS",
    "MOONSHOT_BASE_URL",
    "PROVIDERS",
    "REAL_PROVIDERS",
    "LlmSettings",
    "ModelPrice",
    "PromptPreset",
    "ProviderConfig",
    "active_overrides",
    "candidates",
    "config_file",
    "is_configured",
    "load_notify",
    "load_settings",
    "mask",
    "masked_view",
    "redact",
    "save_settings",
    "secret_values",
]

PROVIDERS = ("none", "openai", "anthropic", "moonshot", "litellm", "openai_compatible")
REAL_PROVIDERS = PROVIDERS[1:]
DEFAULT_TIMEOUT_SEC = 600.0
DEFAULT_TEMPERATURE = 1.0
DEFAULT_MODELS: dict[str, str] = {
    "openai": "gpt-4o-mini",
    "anthropic": "claude-3-5-haiku-latest",
    "moonshot": "kimi-k2.6",
}
MOONSHOT_BASE_URL = "https://api.moonshot.ai/v1"
# Shorter "keys" are placeholders (local servers take any key); redacting them would
# shred ordinary text.
MIN_SECRET_LEN = 6

# The one default system prompt (with the rule that project files are information, not
# instructions) lives with the rest of the prompt.
DEFAULT_SYSTEM_PROMPT = _PROMPT_DEFAULT

_VENDOR_ENV = {"openai": "OPENAI", "anthropic": "ANTHROPIC", "moonshot": "MOONSHOT"}
_PROVIDER_ENV = ("TRAINEE_LLM_PROVIDER", "LLM_PROVIDER")
_GENERIC_ENV = "TRAINEE_LLM"  # TRAINEE_LLM_{MODEL,BASE_URL,API_KEY}: openai_compatible/litellm
TIMEOUT_ENV = "TRAINEE_LLM_TIMEOUT_SEC"
TEMPERATURE_ENV = "TRAINEE_LLM_TEMPERATURE"
ENV_VARS: tuple[str, ...] = (
    *_PROVIDER_ENV,
    *(f"{p}_{s}" for p in _VENDOR_ENV.values() for s in ("API_KEY", "MODEL", "BASE_URL")),
    f"{_GENERIC_ENV}_MODEL",
    f"{_GENERIC_ENV}_BASE_URL",
    f"{_GENERIC_ENV}_API_KEY",
    TIMEOUT_ENV,
    TEMPERATURE_ENV,
)

_URL_RE = r"^https?://\S+$"
Url = Annotated[str, Meta(pattern=_URL_RE)]
NonEmpty = Annotated[str, Meta(min_length=1)]


# -- public types ----------------------------------------------------------------


class ProviderConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One provider after file + environment: what a call needs."""

    name: str
    model: str | None = None
    api_key: str | None = None
    base_url: str | None = None


class ModelPrice(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """User-given price of a model, USD per million tokens."""

    input_per_mtok: Annotated[float, Meta(ge=0)]
    output_per_mtok: Annotated[float, Meta(ge=0)]


class PromptPreset(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    prompt: str
    kind: str = "system"


class LlmSettings(msgspec.Struct, frozen=True, kw_only=True):
    """Effective settings. ``providers`` has an entry for every name in ``REAL_PROVIDERS``."""

    provider: str
    providers: dict[str, ProviderConfig]
    timeout_sec: float = DEFAULT_TIMEOUT_SEC
    temperature: float = DEFAULT_TEMPERATURE
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    presets: dict[str, PromptPreset] = msgspec.field(default_factory=dict)
    debug: bool = False
    prices: dict[str, ModelPrice] = msgspec.field(default_factory=dict)
    failover: tuple[str, ...] = ()
    """The order in which other configured providers are tried when the active one fails
    (names not listed follow in the built-in order)."""

    @property
    def active(self) -> ProviderConfig | None:
        """The active provider's config; None for provider ``none``."""
        return self.providers.get(self.provider)


# -- the file ----------------------------------------------------------------------


class _ProviderFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    model: NonEmpty | None = None
    api_key: str | None = None
    base_url: Url | None = None


class _ConfigFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    provider: str | None = None
    providers: dict[str, _ProviderFile] = msgspec.field(default_factory=dict)
    llm_timeout_sec: Annotated[float, Meta(gt=0)] | None = None
    llm_temperature: Annotated[float, Meta(ge=0, le=2)] | None = None
    system_prompt: str | None = None
    prompt_presets: dict[str, PromptPreset] = msgspec.field(default_factory=dict)
    debug: bool = False
    prices: dict[str, ModelPrice] = msgspec.field(default_factory=dict)
    failover: list[str] = msgspec.field(default_factory=list)
    notify: NotifySpec | None = None


_SAVE_LOCK = threading.Lock()


def config_file() -> Path:
    """``~/.trainee/config.json`` (HOME-relative, resolved on every call)."""
    return paths.config_path()


def _read_raw(path: Path) -> dict[str, Any]:
    """The file as a JSON object; ``{}`` when it does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise ConfigError(f"cannot read {path}: {reason}", file=str(path), reason=reason) from None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON at line {exc.lineno}: {exc.msg}",
            file=str(path),
            line=exc.lineno,
            reason=exc.msg,
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a JSON object", file=str(path), reason="expected a JSON object"
        )
    return data


def _split_validation(message: str) -> tuple[str | None, str]:
    """msgspec's ``"... - at `$.a.b`"`` -> (``"a.b"``, reason)."""
    field: str | None = None
    reason = message
    m = re.search(r" - at `\$(.*)`$", message)
    if m:
        reason = message[: m.start()]
        field = m.group(1).lstrip(".") or None
    unknown = re.search(r"unknown field `([^`]+)`", reason)
    if unknown:
        field = f"{field}.{unknown.group(1)}" if field else unknown.group(1)
    field = re.sub(r"\[(\"|')?([^\]\"']+)(\"|')?\]", r".\2", field) if field else field
    return field, reason


_TABLES: dict[str, type[msgspec.Struct]] = {
    "providers": _ProviderFile,
    "prompt_presets": PromptPreset,
    "prices": ModelPrice,
}


def _convert(data: Any, type_: Any, path: Path, prefix: str) -> Any:
    try:
        return msgspec.convert(data, type_)
    except msgspec.ValidationError as exc:
        field, reason = _split_validation(str(exc))
        field = ".".join(part for part in (prefix, field) if part) or None
        where = f"{field}: " if field else ""
        raise ConfigError(
            f"{path}: {where}{reason}", file=str(path), field=field, reason=reason
        ) from None


def _parse_file(data: Mapping[str, Any], path: Path) -> _ConfigFile:
    # Entries of name -> object tables first: msgspec's error path omits dict keys.
    for table, entry_type in _TABLES.items():
        entries = data.get(table)
        if isinstance(entries, dict):
            for name, entry in entries.items():
                _convert(entry, entry_type, path, f"{table}.{name}")
    cfg: _ConfigFile = _convert(data, _ConfigFile, path, "")
    if cfg.provider is not None and cfg.provider not in PROVIDERS:
        reason = f"unknown provider {cfg.provider!r}; expected one of {', '.join(PROVIDERS)}"
        raise ConfigError(
            f"{path}: provider: {reason}", file=str(path), field="provider", reason=reason
        )
    for i, name in enumerate(cfg.failover):
        if name not in REAL_PROVIDERS or name in cfg.failover[:i]:
            why = "repeated" if name in cfg.failover[:i] else "unknown provider"
            reason = f"{why} {name!r}; expected names from {', '.join(REAL_PROVIDERS)}"
            raise ConfigError(
                f"{path}: failover[{i}]: {reason}",
                file=str(path),
                field=f"failover[{i}]",
                reason=reason,
            )
    for i, url in enumerate(cfg.notify.urls if cfg.notify else ()):
        problem = notify_url_problem(url)
        if problem:
            raise ConfigError(
                f"{path}: notify.urls[{i}]: {problem}",
                file=str(path),
                field=f"notify.urls[{i}]",
                reason=problem,
            )
    for name in cfg.providers:
        if name not in REAL_PROVIDERS:
            reason = f"unknown provider {name!r}; expected one of {', '.join(REAL_PROVIDERS)}"
            raise ConfigError(
                f"{path}: providers.{name}: {reason}",
                file=str(path),
                field=f"providers.{name}",
                reason=reason,
            )
    return cfg


# -- the environment ------------------------------------------------------------------


def _env(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    if value is None:
        return None
    value = value.strip()
    return value or None


def _parse_provider(value: str, var: str) -> str:
    name = value.strip().lower().replace("-", "_")
    if name not in PROVIDERS:
        reason = f"unknown provider {value!r}; expected one of {', '.join(PROVIDERS)}"
        raise ConfigError(f"{var}: {reason}", field=var, reason=reason)
    return name


def _parse_number(value: str, var: str, *, low: float, high: float, low_open: bool) -> float:
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    ok = math.isfinite(number) and (number > low if low_open else number >= low) and number <= high
    if not ok:
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        upper = f" and <= {high:g}" if math.isfinite(high) else ""
        reason = f"expected a number {bound}{upper}, got {value!r}"
        raise ConfigError(f"{var}: {reason}", field=var, reason=reason)
    return number


def _parse_url(value: str, var: str) -> str:
    if not re.match(_URL_RE, value):
        reason = f"expected an http:// or https:// URL, got {value!r}"
        raise ConfigError(f"{var}: {reason}", field=var, reason=reason)
    return value


def _effective_provider(env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(provider, variable) from the environment, or (None, None)."""
    for var in _PROVIDER_ENV:
        value = _env(env, var)
        if value is not None:
            return _parse_provider(value, var), var
    return None, None


def _generic_target(provider: str) -> str:
    """Which provider the TRAINEE_LLM_{MODEL,BASE_URL,API_KEY} variables configure."""
    return "litellm" if provider == "litellm" else "openai_compatible"


def load_settings(
    env: Mapping[str, str] | None = None, path: str | os.PathLike[str] | None = None
) -> LlmSettings:
    """The file's values, then the environment's (the environment wins).

    Raises ConfigError naming the config.json key or the environment variable at fault.
    """
    env = os.environ if env is None else env
    file_path = config_file() if path is None else Path(path)
    cfg = _parse_file(_read_raw(file_path), file_path)

    env_provider, _ = _effective_provider(env)
    provider = env_provider or cfg.provider or "none"

    fields: dict[str, dict[str, str | None]] = {}
    for name in REAL_PROVIDERS:
        f = cfg.providers.get(name) or _ProviderFile()
        fields[name] = {"model": f.model, "api_key": f.api_key, "base_url": f.base_url}
    overlays = [(name, prefix) for name, prefix in _VENDOR_ENV.items()]
    overlays.append((_generic_target(provider), _GENERIC_ENV))
    for name, prefix in overlays:
        for key, suffix in (("model", "MODEL"), ("api_key", "API_KEY"), ("base_url", "BASE_URL")):
            var = f"{prefix}_{suffix}"
            value = _env(env, var)
            if value is None:
                continue
            fields[name][key] = _parse_url(value, var) if key == "base_url" else value

    providers = {
        name: ProviderConfig(
            name=name,
            model=f["model"] or DEFAULT_MODELS.get(name),
            api_key=f["api_key"] or None,
            base_url=f["base_url"] or None,
        )
        for name, f in fields.items()
    }

    timeout = cfg.llm_timeout_sec if cfg.llm_timeout_sec is not None else DEFAULT_TIMEOUT_SEC
    if (raw := _env(env, TIMEOUT_ENV)) is not None:
        timeout = _parse_number(raw, TIMEOUT_ENV, low=0, high=math.inf, low_open=True)
    temperature = cfg.llm_temperature if cfg.llm_temperature is not None else DEFAULT_TEMPERATURE
    if (raw := _env(env, TEMPERATURE_ENV)) is not None:
        temperature = _parse_number(raw, TEMPERATURE_ENV, low=0, high=2, low_open=False)

    return LlmSettings(
        provider=provider,
        providers=providers,
        timeout_sec=timeout,
        temperature=temperature,
        system_prompt=cfg.system_prompt or DEFAULT_SYSTEM_PROMPT,
        presets=dict(cfg.prompt_presets),
        debug=cfg.debug,
        prices=dict(cfg.prices),
        failover=tuple(cfg.failover),
    )


def load_notify(path: str | os.PathLike[str] | None = None) -> NotifySpec | None:
    """The ``notify`` section of config.json (None when there is none); ConfigError
    naming the key at fault when the file is bad."""
    file_path = config_file() if path is None else Path(path)
    return _parse_file(_read_raw(file_path), file_path).notify


def active_overrides(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables that override config.json, API keys masked.

    LLM_PROVIDER is listed only when TRAINEE_LLM_PROVIDER does not shadow it.
    """
    env = os.environ if env is None else env
    out: dict[str, str] = {}
    provider_var_seen = False
    for var in ENV_VARS:
        value = _env(env, var)
        if value is None:
            continue
        if var in _PROVIDER_ENV:
            if provider_var_seen:
                continue
            provider_var_seen = True
        if var.endswith("_API_KEY"):
            value = mask(value) or ""
        elif var.endswith("_BASE_URL"):
            value = _mask_url(value) or ""
        out[var] = value
    return out


# -- saving -------------------------------------------------------------------------

_FLAT_PROVIDER_KEYS = ("model", "api_key", "base_url")
_UPDATE_KEYS = frozenset(
    {
        "provider",
        *_FLAT_PROVIDER_KEYS,
        "providers",
        "llm_timeout_sec",
        "llm_temperature",
        "system_prompt",
        "debug",
        "presets",
        "prices",
        "failover",
    }
)


def _merge_provider_fields(entry: dict[str, Any], values: Mapping[str, Any], where: str) -> None:
    """None leaves a field alone, "" removes it, anything else replaces it."""
    for key, value in values.items():
        if key not in _FLAT_PROVIDER_KEYS:
            raise InvalidParams(f"{where}: unknown field {key!r}", {"field": f"{where}.{key}"})
        if value is None:
            continue
        if value == "":
            entry.pop(key, None)
        else:
            entry[key] = value


def _merge_named(data: dict[str, Any], file_key: str, values: Any, where: str) -> None:
    """Merge a name -> object map (presets, prices); a None value deletes the name."""
    if not isinstance(values, Mapping):
        raise InvalidParams(f"{where}: expected an object", {"field": where})
    table = dict(data.get(file_key) or {})
    for name, value in values.items():
        if value is None:
            table.pop(name, None)
        elif isinstance(value, str) and file_key == "prompt_presets":
            table[name] = {"prompt": value, "kind": "system"}
        elif isinstance(value, msgspec.Struct):
            table[name] = msgspec.to_builtins(value)
        else:
            table[name] = value
    if table:
        data[file_key] = table
    else:
        data.pop(file_key, None)


def _apply_update(data: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(update) - _UPDATE_KEYS)
    if unknown:
        raise InvalidParams(
            f"unknown provider setting(s): {', '.join(unknown)}", {"fields": unknown}
        )
    if (name := update.get("provider")) is not None:
        if not isinstance(name, str) or name.strip().lower().replace("-", "_") not in PROVIDERS:
            raise InvalidParams(
                f"unknown provider {name!r}; expected one of {', '.join(PROVIDERS)}",
                {"field": "provider"},
            )
        data["provider"] = name.strip().lower().replace("-", "_")
    flat = {k: update[k] for k in _FLAT_PROVIDER_KEYS if update.get(k) is not None}
    if flat:
        target = data.get("provider")
        if target not in REAL_PROVIDERS:
            raise InvalidParams(
                "model, api_key and base_url belong to a provider: pass provider as well",
                {"field": "provider"},
            )
        table = dict(data.get("providers") or {})
        entry = dict(table.get(target) or {})
        _merge_provider_fields(entry, flat, target)
        table[target] = entry
        data["providers"] = table
    if (extra := update.get("providers")) is not None:
        if not isinstance(extra, Mapping):
            raise InvalidParams("providers: expected an object", {"field": "providers"})
        table = dict(data.get("providers") or {})
        for name, values in extra.items():
            if name not in REAL_PROVIDERS:
                raise InvalidParams(
                    f"providers: unknown provider {name!r}", {"field": f"providers.{name}"}
                )
            if not isinstance(values, Mapping):
                raise InvalidParams(
                    f"providers.{name}: expected an object", {"field": f"providers.{name}"}
                )
            entry = dict(table.get(name) or {})
            _merge_provider_fields(entry, values, f"providers.{name}")
            table[name] = entry
        data["providers"] = table
    if isinstance(data.get("providers"), dict):
        data["providers"] = {k: v for k, v in data["providers"].items() if v}
        if not data["providers"]:
            del data["providers"]
    for key in ("llm_timeout_sec", "llm_temperature", "debug"):
        if update.get(key) is not None:
            data[key] = update[key]
    if (prompt := update.get("system_prompt")) is not None:
        if prompt == "":
            data.pop("system_prompt", None)
        else:
            data["system_prompt"] = prompt
    if (order := update.get("failover")) is not None:
        if not isinstance(order, list | tuple) or not all(isinstance(n, str) for n in order):
            raise InvalidParams(
                "failover: expected a list of provider names", {"field": "failover"}
            )
        names = [n.strip().lower().replace("-", "_") for n in order]
        if names:
            data["failover"] = names
        else:
            data.pop("failover", None)
    if update.get("presets") is not None:
        _merge_named(data, "prompt_presets", update["presets"], "presets")
    if update.get("prices") is not None:
        _merge_named(data, "prices", update["prices"], "prices")
    return data


def _ensure_home(folder: Path) -> None:
    if not folder.exists():
        folder.mkdir(parents=True, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)


def _write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` as 0600 via a temporary file and rename."""
    _ensure_home(path.parent)
    write_atomic(path, text, mode=0o600)


def save_settings(
    update: Mapping[str, Any],
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> LlmSettings:
    """Merge ``update`` into config.json (0600, folder 0700, atomic) and return the
    effective settings (file + ``env``, default os.environ).

    Keys: ``provider``; ``model``/``api_key``/``base_url`` (for ``provider``, else the
    saved provider); ``providers`` ({name: {model, api_key, base_url}}); ``llm_timeout_sec``;
    ``llm_temperature``; ``system_prompt`` ("" restores the default); ``debug``;
    ``presets`` ({name: {prompt, kind} | str | None}); ``prices`` ({model: {input_per_mtok,
    output_per_mtok} | None}). A None value leaves a setting alone; "" clears a provider
    field. Only what the caller passes is written: environment values never reach the file.
    A bad update raises InvalidParams and leaves the file untouched.
    """
    file_path = config_file() if path is None else Path(path)
    with _SAVE_LOCK:
        data = _read_raw(file_path)
        _parse_file(data, file_path)
        new = _apply_update(copy.deepcopy(data), update)
        try:
            _parse_file(new, file_path)
        except ConfigError as exc:
            field = exc.field
            raise InvalidParams(
                f"{field + ': ' if field else ''}{exc.reason}", {"field": field}
            ) from None
        _write_atomic(file_path, json.dumps(new, indent=2, ensure_ascii=False) + "\n")
    return load_settings(env, file_path)


# -- masking --------------------------------------------------------------------------


def mask(secret: str | None) -> str | None:
    """``"sk-abcdefghijkl"`` -> ``"****ijkl"``: at most the last 4 characters survive,
    fewer for short secrets."""
    if secret is None:
        return None
    if not secret:
        return ""
    keep = min(4, len(secret) // 4)
    return "****" + (secret[-keep:] if keep else "")


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every occurrence of each secret with its mask. Values shorter than
    MIN_SECRET_LEN are placeholders and left alone."""
    found = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)
    for secret in found:
        if secret in text:
            text = text.replace(secret, mask(secret) or "")
    return text


def secret_values(settings: LlmSettings) -> list[str]:
    """Every API key in ``settings`` (for ``redact``)."""
    return [p.api_key for p in settings.providers.values() if p.api_key]


def _mask_url(url: str | None) -> str | None:
    """Hide a password embedded in a URL (``http://user:pw@host``)."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{parts.username}:****@{host}"))


# -- views ----------------------------------------------------------------------------


def is_configured(p: ProviderConfig) -> bool:
    """Usable as a failover candidate: a model plus an API key or a base URL."""
    return bool(p.model) and bool(p.api_key or p.base_url)


def candidates(settings: LlmSettings) -> list[ProviderConfig]:
    """Failover order: the active provider, then every other configured provider, in the
    order of ``failover`` (config.json), then in the built-in order.

    Empty when the active provider is ``none`` (no LLM wanted).
    """
    active = settings.active
    if active is None:
        return []
    order = [*settings.failover, *(n for n in REAL_PROVIDERS if n not in settings.failover)]
    rest = [
        settings.providers[n]
        for n in order
        if n != active.name and n in settings.providers and is_configured(settings.providers[n])
    ]
    return [active, *rest]


def masked_view(settings: LlmSettings, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What ``runtime_provider_get`` returns: settings with keys masked, and the
    environment overrides in effect."""
    return {
        "provider": settings.provider,
        "providers": {
            name: {
                "model": p.model,
                "api_key": mask(p.api_key),
                "api_key_set": bool(p.api_key),
                "base_url": _mask_url(p.base_url),
                "configured": is_configured(p),
            }
            for name, p in settings.providers.items()
        },
        "llm_timeout_sec": settings.timeout_sec,
        "llm_temperature": settings.temperature,
        "debug": settings.debug,
        "failover_order": [p.name for p in candidates(settings)],
        "failover": list(settings.failover),
        "overrides": active_overrides(env),
        "config_file": str(config_file()),
        "available_providers": list(PROVIDERS),
    }
