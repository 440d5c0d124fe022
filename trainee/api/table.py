"""The assembled registry: import every module that registers methods, then the pending ones."""

from __future__ import annotations

from trainee.api.methods import register_pending, registry

register_pending()

__all__ = ["registry"]
