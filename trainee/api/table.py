"""The assembled registry: importing this module registers every method."""

from __future__ import annotations

from trainee.api import agent_methods, loop_methods, project_methods, runtime_methods
from trainee.api.methods import registry

__all__ = ["agent_methods", "loop_methods", "project_methods", "registry", "runtime_methods"]
