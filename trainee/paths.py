"""Where trainee keeps its files outside a project. Stdlib only (the CLI imports it)."""

from __future__ import annotations

import os
from pathlib import Path

SOCKET_NAME = "trainee.sock"


def home_dir() -> Path:
    """``~/.trainee``: provider settings (config.json) and service data."""
    return Path(os.path.expanduser("~")) / ".trainee"


def runtime_dir() -> Path:
    """Folder for the socket, lock, token and daemon log (created 0700 by the daemon)."""
    explicit = os.environ.get("TRAINEE_SOCKET")
    if explicit:
        return Path(explicit).parent
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "trainee"
    return home_dir() / "run"


def socket_path() -> Path:
    """``$TRAINEE_SOCKET``, else ``$XDG_RUNTIME_DIR/trainee/trainee.sock``, else
    ``~/.trainee/run/trainee.sock``."""
    explicit = os.environ.get("TRAINEE_SOCKET")
    if explicit:
        return Path(explicit)
    return runtime_dir() / SOCKET_NAME


def service_data_dir() -> Path:
    """Runtime data when no project is bound: ``$TRAINEE_DATA_DIR`` or ``~/.trainee/runtime``."""
    explicit = os.environ.get("TRAINEE_DATA_DIR")
    if explicit:
        return Path(explicit)
    return home_dir() / "runtime"


def config_path() -> Path:
    """Provider settings, written 0600."""
    return home_dir() / "config.json"
