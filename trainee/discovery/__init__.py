"""trainee.discovery: static project discovery, init/prepare, tunable suggestions, context.md.

Pure and synchronous; nothing here ever imports or runs the project's code.
"""

from __future__ import annotations

from trainee.discovery.context import build_context, write_context, write_context_if_missing
from trainee.discovery.init import InitResult, PrepareResult, init_project, prepare_project
from trainee.discovery.scan import (
    ConfigFile,
    DataDir,
    Discovery,
    EntryOption,
    Entrypoint,
    LimitFlag,
    discover,
    entrypoint_for_command,
)
from trainee.discovery.tunables import (
    ApplyResult,
    Excluded,
    Skipped,
    Suggestion,
    SuggestionReport,
    TunablesResult,
    apply_suggestions,
    discover_tunables,
    suggest_tunables,
    suggest_tunables_report,
)

__all__ = [
    "ApplyResult",
    "ConfigFile",
    "DataDir",
    "Discovery",
    "EntryOption",
    "Entrypoint",
    "Excluded",
    "InitResult",
    "LimitFlag",
    "PrepareResult",
    "Skipped",
    "Suggestion",
    "SuggestionReport",
    "TunablesResult",
    "apply_suggestions",
    "build_context",
    "discover",
    "discover_tunables",
    "entrypoint_for_command",
    "init_project",
    "prepare_project",
    "suggest_tunables",
    "suggest_tunables_report",
    "write_context",
    "write_context_if_missing",
]
