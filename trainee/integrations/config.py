"""What a session's integrations are, resolved from project.yaml and ~/.trainee/config.json,
and how their secrets are kept out of sight.

Notification URLs (and a password in a tracking URI) are secrets like API keys: every
view shows them masked (:func:`mask_notify_url`), every log line is redacted
(:func:`secrets_of`), and a masked value sent back by a client is restored from the
saved one (:func:`restore_masked`).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from trainee.errors import InvalidParams
from trainee.llm.settings import MIN_SECRET_LEN, mask
from trainee.spec.files import IntegrationsSpec, NotifyEvent, NotifySpec
from trainee.spec.integrations import resolve_tracking_uri

__all__ = [
    "DEFAULT_STALL_MINUTES",
    "EXTRAS",
    "MlflowTarget",
    "NotifyTarget",
    "Plan",
    "WandbTarget",
    "mask_notify_url",
    "mask_tracking_uri",
    "masked_integrations",
    "missing_extra",
    "plan_of",
    "restore_masked",
    "secrets_of",
]

DEFAULT_STALL_MINUTES = 30.0
EXTRAS: dict[str, tuple[str, str]] = {
    "mlflow": ("mlflow", "trainee[mlflow]"),
    "wandb": ("wandb", "trainee[wandb]"),
    "notify": ("apprise", "trainee[notify]"),
}
"""integration -> (the module it imports, the extra that installs it)."""

_MASK = "****"


@dataclass(frozen=True)
class MlflowTarget:
    tracking_uri: str
    experiment: str
    artifacts: bool


@dataclass(frozen=True)
class WandbTarget:
    dir: str
    project: str
    entity: str | None
    artifacts: bool


@dataclass(frozen=True)
class NotifyTarget:
    urls: tuple[str, ...]
    on: frozenset[str]
    stall_sec: float


@dataclass(frozen=True)
class Plan:
    """The integrations of one session (None: not configured)."""

    mlflow: MlflowTarget | None = None
    wandb: WandbTarget | None = None
    notify: NotifyTarget | None = None

    def __bool__(self) -> bool:
        return any((self.mlflow, self.wandb, self.notify))


def plan_of(root: str, spec: IntegrationsSpec | None, user: NotifySpec | None) -> Plan:
    """Resolve the project's ``integrations`` (``spec``; None when project.yaml could not
    be read) and the user's ``notify`` section of config.json."""
    name = Path(root).name or "trainee"
    mlflow = wandb = None
    if spec is not None and spec.mlflow is not None:
        m = spec.mlflow
        mlflow = MlflowTarget(
            tracking_uri=resolve_tracking_uri(m.tracking_uri, root),
            experiment=m.experiment or name,
            artifacts=m.artifacts,
        )
    if spec is not None and spec.wandb is not None:
        w = spec.wandb
        folder = Path(w.dir) if Path(w.dir).is_absolute() else Path(root) / w.dir
        wandb = WandbTarget(
            dir=str(folder), project=w.project or name, entity=w.entity, artifacts=w.artifacts
        )
    project = spec.notify if spec is not None else None
    urls = tuple(dict.fromkeys([*(user.urls if user else ()), *(project.urls if project else ())]))
    notify = None
    if urls:
        on = next((s.on for s in (project, user) if s is not None and s.on is not None), None)
        stall = next(
            (s.stall_minutes for s in (project, user) if s and s.stall_minutes is not None),
            DEFAULT_STALL_MINUTES,
        )
        notify = NotifyTarget(
            urls=urls,
            on=frozenset(str(e) for e in (on if on is not None else tuple(NotifyEvent))),
            stall_sec=stall * 60.0,
        )
    return Plan(mlflow=mlflow, wandb=wandb, notify=notify)


def missing_extra(integration: str) -> str | None:
    """``pip install 'trainee[mlflow]'``-style advice when the integration's library is
    not installed, else None (checked without importing it)."""
    module, extra = EXTRAS[integration]
    if importlib.util.find_spec(module) is None:
        return f"the {module} package is not installed: pip install '{extra}'"
    return None


# -- secrets --------------------------------------------------------------------------


def mask_notify_url(url: str) -> str:
    """``tgram://123456:ABCdef/987`` -> ``tgram://****/987``-like: the scheme survives,
    the rest is masked as an API key is (:func:`trainee.llm.settings.mask`)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return mask(url) or ""
    return f"{scheme}://{mask(rest) or ''}"


def mask_tracking_uri(uri: str) -> str:
    """A password in a tracking URI (``https://user:pw@host``) masked."""
    try:
        parts = urlsplit(uri)
        password = parts.password
    except ValueError:
        return mask(uri) or ""
    if not password:
        return uri
    return uri.replace(f":{password}@", f":{_MASK}@", 1)


def secrets_of(urls: tuple[str, ...] | list[str]) -> list[str]:
    """The values to redact from any text about these URLs: each URL, its user and
    password, its path segments and query values (tokens live in any of them)."""
    out: list[str] = []
    for url in urls:
        out.append(url)
        try:
            parts = urlsplit(url)
            out.extend(p for p in (parts.username, parts.password) if p)
            out.extend(seg for seg in parts.path.split("/") if seg)
            out.extend(v for _, v in parse_qsl(parts.query))
            host = parts.netloc.rsplit("@", 1)[-1]
            if not parts.port:
                out.append(host)  # several services keep a token where the host would be
        except ValueError:
            continue
    return [s for s in out if len(s) >= MIN_SECRET_LEN]


def masked_integrations(data: dict[str, Any]) -> dict[str, Any]:
    """project.yaml's ``integrations`` (as plain data) with its secrets masked, for views."""
    out = dict(data)
    notify = out.get("notify")
    if isinstance(notify, dict) and isinstance(notify.get("urls"), list | tuple):
        out["notify"] = {
            **notify,
            "urls": [mask_notify_url(u) if isinstance(u, str) else u for u in notify["urls"]],
        }
    mlflow = out.get("mlflow")
    if isinstance(mlflow, dict) and isinstance(mlflow.get("tracking_uri"), str):
        out["mlflow"] = {**mlflow, "tracking_uri": mask_tracking_uri(mlflow["tracking_uri"])}
    return out


def restore_masked(data: dict[str, Any], saved: IntegrationsSpec) -> dict[str, Any]:
    """``data`` (an ``integrations`` section a client sends, e.g. back from a masked view)
    with each masked value replaced by the saved value it masks. InvalidParams naming
    the field when a masked value matches none."""
    out = dict(data)
    notify = out.get("notify")
    if isinstance(notify, dict) and isinstance(notify.get("urls"), list | tuple):
        known = {mask_notify_url(u): u for u in (saved.notify.urls if saved.notify else ())}
        urls = []
        for i, url in enumerate(notify["urls"]):
            if isinstance(url, str) and _MASK in url:
                if url not in known:
                    raise InvalidParams(
                        f"integrations.notify.urls[{i}]: a masked URL that matches no saved "
                        "one; write the whole URL",
                        {"field": f"integrations.notify.urls[{i}]", "reason": "masked"},
                    )
                url = known[url]
            urls.append(url)
        out["notify"] = {**notify, "urls": urls}
    mlflow = out.get("mlflow")
    uri = mlflow.get("tracking_uri") if isinstance(mlflow, dict) else None
    if isinstance(mlflow, dict) and isinstance(uri, str) and f":{_MASK}@" in uri:
        old = saved.mlflow.tracking_uri if saved.mlflow else None
        if old is None or mask_tracking_uri(old) != uri:
            raise InvalidParams(
                "integrations.mlflow.tracking_uri: a masked password that matches no saved "
                "one; write the whole URI",
                {"field": "integrations.mlflow.tracking_uri", "reason": "masked"},
            )
        out["mlflow"] = {**mlflow, "tracking_uri": old}
    return out
