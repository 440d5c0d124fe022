"""The assembled registry: import every module that registers methods, then the pending ones."""

from __future__ import annotations

from trainee.api import loop_methods, project_methods, runtime_methods
from trainee.api.methods import register_pending, registry

register_pending()

__all__ = ["loop_methods", "project_methods", "registry", "runtime_methods"]
