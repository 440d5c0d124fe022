"""The value rules of project.yaml's ``integrations`` section (stdlib only).

One place says what a tracking URI or a notification URL may look like and how a
relative MLflow store is resolved: the compiler checks with it, the exporters
resolve with it. Error reasons never repeat a URL (it may hold a token).
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

__all__ = [
    "MLFLOW_SCHEMES",
    "is_file_store",
    "notify_url_problem",
    "resolve_tracking_uri",
    "tracking_uri_problem",
]

MLFLOW_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks")
"""Tracking URI schemes MLflow's client knows; a URI without one is a folder (file store)."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_NOTIFY = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://\S+$")


def _scheme(uri: str) -> str | None:
    m = _SCHEME.match(uri)
    # "C:" style drive letters do not occur on the platforms trainee runs on
    return m.group(1).split("+", 1)[0].lower() if m else None


def tracking_uri_problem(uri: str) -> str | None:
    """Why ``uri`` is no MLflow tracking URI, else None."""
    if any(c.isspace() for c in uri) or "\x00" in uri:
        return "must not contain spaces or control characters"
    scheme = _scheme(uri)
    if scheme is None:
        return None  # a folder: MLflow's file store
    if scheme not in MLFLOW_SCHEMES:
        return (
            f"unknown scheme {scheme!r}; use http(s)://host:port (a tracking server), "
            "sqlite:///file.db, file:/folder or a plain folder"
        )
    if scheme in ("http", "https") and not urlsplit(uri).hostname:
        return f"a {scheme} URI needs a host, e.g. {scheme}://127.0.0.1:5000"
    return None


def is_file_store(uri: str) -> bool:
    """Whether ``uri`` (as resolved) names MLflow's file store."""
    scheme = _scheme(uri)
    return scheme is None or scheme == "file"


def resolve_tracking_uri(uri: str, root: str | Path) -> str:
    """``uri`` with a relative folder or SQLite file taken from the project ``root``:
    ``mlruns`` -> ``file:///<root>/mlruns``, ``sqlite:///x.db`` -> ``sqlite:////<root>/x.db``.
    Absolute ones and server URIs are returned as they are."""
    scheme = _scheme(uri)
    base = Path(root)
    if scheme is None:
        return (base / uri).resolve().as_uri() if not uri.startswith("/") else Path(uri).as_uri()
    if scheme == "file":
        path = uri[len("file:") :]
        if path.startswith("//"):
            return uri  # file:///abs or file://host/abs
        return (base / path).resolve().as_uri() if not path.startswith("/") else Path(path).as_uri()
    if (
        scheme == "sqlite"
        and uri.lower().startswith("sqlite:///")
        and not uri.startswith("sqlite:////")
    ):
        rel = uri[len("sqlite:///") :]
        if rel and rel != ":memory:":
            return "sqlite:///" + str((base / rel).resolve())
    return uri


def notify_url_problem(url: str) -> str | None:
    """Why ``url`` is no Apprise URL (``scheme://...``), else None."""
    if not _NOTIFY.match(url):
        return "not an Apprise URL (scheme://..., e.g. json://host/path or mailto://user@host)"
    return None
