"""trainee.spec: the Structs of project.yaml / tuning.yaml and the frozen ProjectSpec.

Importing this package costs msgspec + stdlib only; ruamel (via
:mod:`trainee.spec.yamlio`) is imported when a file is loaded or saved.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainee.spec.args import (
    format_float,
    render_arg,
    render_override_value,
    render_param,
    render_value,
)
from trainee.spec.compile import (
    PATH_PLACEHOLDERS,
    ParamSource,
    ProjectSpec,
    TunableSpec,
    check_project,
    load_project,
    load_project_file,
    load_tuning_file,
)
from trainee.spec.files import (
    AdvancedSpec,
    ArgSpec,
    ArgStyle,
    BackendSpec,
    ConfigStyle,
    DataSpec,
    DecisionSpec,
    Environment,
    Goal,
    LaunchSpec,
    LlmBudgetSpec,
    MetricSource,
    MetricSpec,
    MetricsSpec,
    OutputSpec,
    ParamSpec,
    ParamType,
    ProjectFileSpec,
    RunSpec,
    SecurityMode,
    SignalSourceSpec,
    SignalType,
    TuningFileSpec,
    Value,
    decode_file,
    min_rounds_of,
    struct_to_yaml_data,
)
from trainee.spec.placeholders import ARG_PLACEHOLDERS, SHELL_PLACEHOLDERS, expand

if TYPE_CHECKING:
    from trainee.spec.yamlio import YamlDocument, read_config_value

__all__ = [
    "ARG_PLACEHOLDERS",
    "PATH_PLACEHOLDERS",
    "SHELL_PLACEHOLDERS",
    "AdvancedSpec",
    "ArgSpec",
    "ArgStyle",
    "BackendSpec",
    "ConfigStyle",
    "DataSpec",
    "DecisionSpec",
    "Environment",
    "Goal",
    "LaunchSpec",
    "LlmBudgetSpec",
    "MetricSource",
    "MetricSpec",
    "MetricsSpec",
    "OutputSpec",
    "ParamSource",
    "ParamSpec",
    "ParamType",
    "ProjectFileSpec",
    "ProjectSpec",
    "RunSpec",
    "SecurityMode",
    "SignalSourceSpec",
    "SignalType",
    "TunableSpec",
    "TuningFileSpec",
    "Value",
    "YamlDocument",
    "check_project",
    "decode_file",
    "expand",
    "format_float",
    "load_project",
    "load_project_file",
    "load_tuning_file",
    "min_rounds_of",
    "read_config_value",
    "render_arg",
    "render_override_value",
    "render_param",
    "render_value",
    "save_project_files",
    "struct_to_yaml_data",
]

_LAZY = {"YamlDocument", "read_config_value"}


def save_project_files(root: Path | str, project: ProjectFileSpec, tuning: TuningFileSpec) -> None:
    """Validate, then write ``<root>/.trainee/project.yaml`` and ``tuning.yaml``, merged
    into the user's existing documents (comments and key order survive); files whose
    text would not change are not written. See :func:`trainee.spec.yamlio.save_project_files`.
    """
    from trainee.spec.yamlio import save_project_files as _save

    _save(root, project, tuning)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from trainee.spec import yamlio

        return getattr(yamlio, name)
    raise AttributeError(f"module 'trainee.spec' has no attribute {name!r}")
