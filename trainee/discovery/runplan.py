"""What a project's rounds really run with: an entrypoint read together with its
command and the constant arguments of project.yaml.

``trainee init`` uses it to write ``run.fixed_args`` and ``output.flag``; ``trainee
doctor`` uses the same functions for its ``entrypoint``, ``output`` and ``limits``
rows, so both always agree.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from trainee.discovery.hydra import HydraConfig, compose_hydra, leaves
from trainee.discovery.limits import Budget, analyse_budget, is_limit_key, is_tied_key
from trainee.discovery.options import EntryOption, normalize_name
from trainee.discovery.outputs import OutputOption, is_output_key, output_options
from trainee.discovery.scan import Entrypoint, command_settings, script_index

TYPE_CHECKING = False
if TYPE_CHECKING:
    from trainee.spec import ArgSpec

__all__ = [
    "RunView",
    "command_target",
    "entry_words",
    "run_view",
]


class RunView(msgspec.Struct, kw_only=True):
    """An entrypoint as one command runs it.

    ``options`` are the entrypoint's options (for a Hydra app: the leaves of the
    composed config, as ``key`` overrides); ``settings`` maps an option's dest / flag
    to ``(value, where)`` for every value the run sets; ``hydra`` is the composed
    config of a Hydra app."""

    entrypoint: Entrypoint
    options: list[EntryOption]
    settings: dict[str, tuple[Any, str]]
    budget: Budget
    outputs: list[OutputOption]
    hydra: HydraConfig | None = None
    hydra_chdir: bool = False


def _value_type(value: Any) -> Any:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str) or value is None:
        return "str"
    return None


def _hydra_options(cfg: HydraConfig) -> list[EntryOption]:
    out: list[EntryOption] = []
    for key, value in leaves(cfg.data):
        if key.startswith("hydra.") or isinstance(value, list | dict):
            continue
        kind = _value_type(value)
        if kind is None:
            continue
        if not (is_limit_key(key) or is_tied_key(key) or is_output_key(key)):
            continue
        if isinstance(value, str) and "${" in value:
            continue  # an interpolation: follows another key
        out.append(
            EntryOption(
                flag=key,
                dest=key,
                flags=[key],
                type=kind,
                default=value,
                help=f"from {cfg.sources.get(key, cfg.primary)}",
            )
        )
    return out


def run_view(
    root: Path | str,
    ep: Entrypoint,
    command: Sequence[str],
    args: Sequence[ArgSpec] = (),
    *,
    extra_overrides: Sequence[str] = (),
) -> RunView:
    """``ep`` as ``command`` plus the constant ``args`` (launch.args, run.fixed_args,
    data flags) run it."""
    root_path = Path(root).resolve()
    settings: dict[str, tuple[Any, str]] = {}
    for key, text in command_settings(ep, command).items():
        settings[key] = (text, "launch.command")
    overrides = [w for w in entry_words(ep, command) if "=" in w and not w.startswith("-")]
    for arg in args:
        value: Any = "true" if arg.value is None else arg.value
        shown = value if not isinstance(value, bool) else ("true" if value else "false")
        if arg.flag.startswith("-"):
            settings[arg.flag] = (shown, "project.yaml")
            settings[normalize_name(arg.flag)] = (shown, "project.yaml")
        else:
            key = arg.flag.lstrip("+~")
            settings[key] = (shown, "project.yaml")
            overrides.append(f"{arg.flag}={shown}" if arg.value is not None else arg.flag)
    hydra: HydraConfig | None = None
    chdir = False
    if ep.hydra_config_name is not None or ep.hydra_config_path is not None:
        hydra = compose_hydra(root_path, ep, [*overrides, *extra_overrides])
    if hydra is not None:
        options = _hydra_options(hydra)
        chdir = hydra.get("hydra.job.chdir") is True
        for key, where in hydra.sources.items():
            if where == "<override>" and key not in settings:
                settings[key] = (hydra.get(key), "override")
    else:
        options = list(ep.options)
    budget = analyse_budget(options, settings)
    outputs = output_options(options)
    return RunView(
        entrypoint=ep,
        options=options,
        settings=settings,
        budget=budget,
        outputs=outputs,
        hydra=hydra,
        hydra_chdir=chdir,
    )


def command_target(
    root: Path | str, command: Sequence[str], working_dir: str = "."
) -> tuple[str, str | None, bool | None]:
    """(kind, target, exists) of what a command runs: ``("script", "train.py", True)``,
    ``("module", "pkg.train", False)``, ``("module", "pip", None)`` for a module that is
    not in the project (it may be installed), or ``("other", None, None)`` when it names
    no Python script or module (a console script: the launcher check covers it)."""
    root_path = Path(root).resolve()
    words = list(command)
    base = root_path / working_dir
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words):
            module = words[i + 1]
            if module.startswith(("torch.distributed", "accelerate")):
                continue
            parts = module.split(".")
            for prefix in (base, base / "src", root_path, root_path / "src"):
                stem = prefix.joinpath(*parts)
                if (stem.with_suffix(".py")).is_file() or (stem / "__main__.py").is_file():
                    return "module", module, True
                if (stem / "__init__.py").is_file():
                    return "module", module, False
            return "module", module, None
        if word.endswith(".py") and not word.startswith("-"):
            path = Path(os.path.normpath(base / word))
            return "script", word, path.is_file()
    return "other", None, None


def entry_words(ep: Entrypoint, command: Sequence[str]) -> list[str]:
    """The words after the entrypoint in a command."""
    index = script_index(ep, command)
    return list(command[index + 1 :]) if index is not None else []
