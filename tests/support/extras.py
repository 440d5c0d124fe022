"""Tests of what an optional extra (or a system package) brings skip, with the reason, when
it is missing: the one table of which module each extra provides, and the one check.

- ``needs("optuna")``: a mark for a test or a module (``pytestmark``).
- ``require("hydra")``: at the top of a module, before importing the extra: skips it whole.
- ``require_chromium()``: the browser tests' Debian chromium (an error on CI, where
  ``make test`` installs it).
"""

from __future__ import annotations

import importlib.util
import os

import pytest

EXTRAS: dict[str, tuple[str, ...]] = {
    "optuna": ("optuna",),
    "hydra": ("hydra",),
    "tensorboard": ("tensorboard",),
    "mlflow": ("mlflow",),
    "wandb": ("wandb",),
    "notify": ("apprise",),
    "ray": ("ray", "ray.dashboard"),
    "playwright": ("playwright",),
}
"""The pyproject extra (``pip install 'trainee[<extra>]'``; playwright is in ``dev``) and
the modules a test of it imports."""

CHROMIUM = "/usr/bin/chromium"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def missing(extra: str) -> str | None:
    """Why the tests of ``extra`` cannot run here, or None when they can."""
    absent = [m for m in EXTRAS[extra] if not _installed(m)]
    if not absent:
        return None
    group = "dev" if extra == "playwright" else extra
    return f"{' and '.join(absent)} not installed (pip install 'trainee[{group}]')"


def needs(extra: str) -> pytest.MarkDecorator:
    """Skip the marked test (or module) with the reason when ``extra`` is missing."""
    reason = missing(extra)
    return pytest.mark.skipif(reason is not None, reason=reason or "")


def require(extra: str) -> None:
    """At a module's top: skip the whole module when ``extra`` is missing."""
    reason = missing(extra)
    if reason is not None:
        pytest.skip(reason, allow_module_level=True)


def require_chromium() -> None:
    """At a module's top: skip the browser tests without Debian's chromium (fail on CI)."""
    if os.path.exists(CHROMIUM):
        return
    if os.environ.get("CI"):  # pragma: no cover - depends on the machine
        raise RuntimeError(f"{CHROMIUM} is missing: `make test` installs Debian's chromium")
    pytest.skip(
        f"{CHROMIUM} is missing (Debian package chromium; `make test` installs it)",
        allow_module_level=True,
    )
