"""The assembled registry: importing this module registers every method.

The modules are imported in the order their methods are listed (``trainee tools``,
docs/api.md): daemon and events, files, project setup, the loop, agents, runtime.
"""

from __future__ import annotations

# isort: off
from trainee.api.methods import registry
from trainee.api import files
from trainee.api import project_methods
from trainee.api import loop_methods
from trainee.api import agent_methods
from trainee.api import runtime_methods

# isort: on

__all__ = [
    "agent_methods",
    "files",
    "loop_methods",
    "project_methods",
    "registry",
    "runtime_methods",
]
