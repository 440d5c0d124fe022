"""Where trainee keeps its files outside a project. Stdlib only (the CLI imports it).

Each function reads the process environment, or ``env`` when given (the sandbox
computes the places of the caller's environment as well as the daemon's own).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

SOCKET_NAME = "trainee.sock"
HTTP_PORT_ENV = "TRAINEE_HTTP_PORT"
DEFAULT_HTTP_PORT = 8000


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def home_dir(env: Mapping[str, str] | None = None) -> Path:
    """``~/.trainee``: provider settings (config.json) and service data."""
    home = _env(env).get("HOME") if env is not None else None
    return Path(home or os.path.expanduser("~")) / ".trainee"


def runtime_dir(env: Mapping[str, str] | None = None) -> Path:
    """Folder for the socket, lock, token and daemon log (created 0700 by the daemon)."""
    e = _env(env)
    explicit = e.get("TRAINEE_SOCKET")
    if explicit:
        return Path(explicit).parent
    xdg = e.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "trainee"
    return home_dir(env) / "run"


def socket_path(env: Mapping[str, str] | None = None) -> Path:
    """``$TRAINEE_SOCKET``, else ``$XDG_RUNTIME_DIR/trainee/trainee.sock``, else
    ``~/.trainee/run/trainee.sock``."""
    explicit = _env(env).get("TRAINEE_SOCKET")
    if explicit:
        return Path(explicit)
    return runtime_dir(env) / SOCKET_NAME


def service_data_dir(env: Mapping[str, str] | None = None) -> Path:
    """Runtime data when no project is bound: ``$TRAINEE_DATA_DIR`` or ``~/.trainee/runtime``."""
    explicit = _env(env).get("TRAINEE_DATA_DIR")
    if explicit:
        return Path(explicit)
    return home_dir(env) / "runtime"


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents 0700 (existing folders are left as they are)."""
    missing = []
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    return path


def config_path(env: Mapping[str, str] | None = None) -> Path:
    """Provider settings, written 0600."""
    return home_dir(env) / "config.json"


def http_port(env: Mapping[str, str] | None = None) -> tuple[int, bool]:
    """The daemon's HTTP port: ``$TRAINEE_HTTP_PORT``, else 8000; and whether it was asked
    for (a port asked for is kept or refused, the default gives way to a free one).

    InvalidParams when the variable is not a port number (0 picks a free port).
    """
    value = (os.environ if env is None else env).get(HTTP_PORT_ENV, "").strip()
    if not value:
        return DEFAULT_HTTP_PORT, False
    if not (value.isascii() and value.isdigit()) or int(value) > 65535:
        from trainee.errors import InvalidParams

        raise InvalidParams(
            f"{HTTP_PORT_ENV}={value!r} is not a port number (0-65535; 0 picks a free port)",
            {"field": HTTP_PORT_ENV, "reason": "not a port number"},
        )
    return int(value), True
