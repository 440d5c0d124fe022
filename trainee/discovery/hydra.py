"""The composed config of a ``@hydra.main`` app, read statically (no project code runs).

:func:`compose_hydra` follows Hydra's composition rules for the common cases: the
primary config's ``defaults:`` list (config groups, ``override``, ``optional``,
``group@package``, nested defaults of group configs, plain config names, ``_self_``,
implicitly last), ``# @package`` headers (``_global_``, ``_group_``), then command-line
style overrides: group choices (``model=mlp``, ``+experiment=x``), values
(``trainer.max_epochs=3``), additions (``+key=v``, ``++key=v``) and deletions
(``~key``). ``${...}`` interpolations are kept as text, never resolved. Structured
configs registered from Python (``ConfigStore``) are not seen: that would mean
importing the project.

:func:`hydra_overrides` gives the overrides a project's runs pass (the words after
the script in ``launch.command``, then ``launch.args`` and ``run.fixed_args`` entries
without a leading dash), so what discovery reads is what a round composes.
"""

from __future__ import annotations

import copy
import re
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from trainee.errors import ConfigError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from trainee.discovery.scan import Entrypoint
    from trainee.spec import ProjectFileSpec

__all__ = [
    "HydraConfig",
    "compose_hydra",
    "hydra_overrides",
    "hydra_primary",
    "leaves",
]

MAX_DEPTH = 12
_PACKAGE = re.compile(r"^#\s*@package\s+(\S+)")
_GROUP = re.compile(r"^[A-Za-z0-9_\-./]+$")


class HydraConfig(msgspec.Struct, kw_only=True):
    """The composed config. Paths are relative to the project root.

    ``groups``: each config group of the defaults list -> the option chosen (None when
    the group is set to null); ``group_options``: the options found on disk per group;
    ``sources``: each leaf key -> the file that set it last (``<override>`` for a
    command-line value)."""

    config_dir: str
    primary: str
    data: dict[str, Any]
    groups: dict[str, str | None] = msgspec.field(default_factory=dict)
    group_options: dict[str, list[str]] = msgspec.field(default_factory=dict)
    sources: dict[str, str] = msgspec.field(default_factory=dict)
    overrides: list[str] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)

    def get(self, key: str) -> Any:
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def has(self, key: str) -> bool:
        node: Any = self.data
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True


def hydra_primary(root: Path, ep: Entrypoint) -> tuple[Path, Path] | None:
    """(config folder, primary config file) of a Hydra entrypoint, inside the root."""
    if ep.hydra_config_name is None and ep.hydra_config_path is None:
        return None
    base = (root / ep.path).parent
    conf_dir = Path(_norm(base / (ep.hydra_config_path or ".")))
    if not conf_dir.is_relative_to(root) or not conf_dir.is_dir():
        return None
    name = ep.hydra_config_name or "config"
    if not name.endswith((".yaml", ".yml")):
        name += ".yaml"
    primary = conf_dir / name
    if not primary.is_file():
        return None
    return conf_dir, primary


def _norm(path: Path) -> str:
    import os

    return os.path.normpath(path)


def leaves(node: Any, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """(dotted key, value) of every non-mapping value."""
    if isinstance(node, dict):
        for key, value in node.items():
            dotted = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(value, dict) and value:
                yield from leaves(value, dotted)
            else:
                yield dotted, value
    elif prefix:
        yield prefix, node


def _load(path: Path) -> tuple[dict[str, Any], str | None]:
    from trainee.spec.yamlio import YamlDocument

    data, _ = YamlDocument.load(path).to_plain()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a mapping", file=str(path), reason="not a mapping")
    header: str | None = None
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for _ in range(5):
                match = _PACKAGE.match(fh.readline())
                if match:
                    header = match.group(1)
                    break
    except OSError:
        pass
    return data, header


def _merge(base: dict[str, Any], extra: Any, package: str) -> None:
    target = base
    if package:
        for part in package.split("."):
            nxt = target.get(part)
            if not isinstance(nxt, dict):
                nxt = {}
                target[part] = nxt
            target = nxt
    if not isinstance(extra, dict):
        return
    _deep_merge(target, extra)


def _deep_merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def _join(a: str, b: str) -> str:
    return ".".join(p for p in (a, b) if p)


class _Composer:
    def __init__(self, root: Path, conf_dir: Path, choices: dict[str, str | None]):
        self.root = root
        self.conf_dir = conf_dir
        self.cli_choices = choices
        self.groups: dict[str, str | None] = {}
        self.sources: dict[str, str] = {}
        self.notes: list[str] = []
        self.data: dict[str, Any] = {}

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def group_file(self, group: str, option: str) -> Path | None:
        for ext in (".yaml", ".yml"):
            path = self.conf_dir / group / f"{option}{ext}"
            if path.is_file() and Path(_norm(path)).is_relative_to(self.conf_dir):
                return path
        return None

    def compose(self, path: Path, group: str, package: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.notes.append(f"{self.rel(path)}: defaults nested too deep; not followed")
            return
        try:
            data, header = _load(path)
        except ConfigError as exc:
            self.notes.append(f"{self.rel(path)} could not be read ({exc.reason or exc.message})")
            return
        if header is not None:
            if header.startswith("_global_"):
                package = header[len("_global_") :].lstrip(".")
            else:
                package = header.replace("_group_", group.replace("/", "."))
        defaults = data.pop("defaults", None)
        items = defaults if isinstance(defaults, list) else []
        # `override group: option` entries set choices before the list is walked
        overrides: dict[str, str | None] = {}
        for item in items:
            if isinstance(item, dict) and len(item) == 1:
                ((key, value),) = item.items()
                if isinstance(key, str) and key.startswith("override "):
                    name = key.removeprefix("override ").strip()
                    overrides[self.abs_group(name.split("@", 1)[0], group)] = (
                        value if isinstance(value, str) or value is None else None
                    )
        self_done = False
        for item in items:
            if item == "_self_":
                self.merge_self(data, package, path)
                self_done = True
            elif isinstance(item, str):
                target = self.abs_group(item, group)
                file = self.plain_file(target)
                if file is None:
                    self.notes.append(f"{self.rel(path)}: default {item!r} not found")
                    continue
                parent = target.rsplit("/", 1)[0] if "/" in target else ""
                self.compose(file, parent, package, depth + 1)
            elif isinstance(item, dict) and len(item) == 1:
                ((key, value),) = item.items()
                if not isinstance(key, str) or key.startswith("override "):
                    continue
                optional = key.startswith("optional ")
                name = key.removeprefix("optional ").strip()
                name, _, pkg = name.partition("@")
                abs_group = self.abs_group(name, group)
                if not _GROUP.match(abs_group):
                    continue
                chosen: Any = value
                if abs_group in overrides:
                    chosen = overrides[abs_group]
                if abs_group in self.cli_choices:
                    chosen = self.cli_choices[abs_group]
                options = chosen if isinstance(chosen, list) else [chosen]
                self.groups[abs_group] = (
                    chosen
                    if isinstance(chosen, str) or chosen is None
                    else ",".join(map(str, options))
                )
                for option in options:
                    if option is None or option == "???":
                        continue
                    file = self.group_file(abs_group, str(option))
                    if file is None:
                        if not optional:
                            self.notes.append(
                                f"{self.rel(path)}: {abs_group}/{option}.yaml not found"
                            )
                        continue
                    if pkg:
                        sub_pkg = (
                            pkg[len("_global_") :].lstrip(".")
                            if pkg.startswith("_global_")
                            else _join(package, pkg.replace("_group_", abs_group.replace("/", ".")))
                        )
                    else:
                        sub_pkg = abs_group.replace("/", ".")
                    self.compose(file, abs_group, sub_pkg, depth + 1)
        if not self_done:
            self.merge_self(data, package, path)

    def abs_group(self, name: str, group: str) -> str:
        name = name.strip()
        if name.startswith("/"):
            return name.lstrip("/")
        return f"{group}/{name}" if group else name

    def plain_file(self, target: str) -> Path | None:
        for ext in ("", ".yaml", ".yml"):
            path = self.conf_dir / f"{target}{ext}"
            if path.is_file() and path.suffix in (".yaml", ".yml"):
                return path
        return None

    def merge_self(self, data: dict[str, Any], package: str, path: Path) -> None:
        _merge(self.data, data, package)
        rel = self.rel(path)
        for key, _ in leaves(data, package):
            self.sources[key] = rel


def _parse_scalar(text: str) -> Any:
    from trainee.spec.yamlio import YamlDocument

    if "${" in text:
        return text
    try:
        data, _ = YamlDocument.from_text(f"v: {text}\n").to_plain()
    except ConfigError:
        return text
    return data.get("v") if isinstance(data, dict) else text


def _set(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        nxt = node.get(part)
        if not isinstance(nxt, dict):
            nxt = {}
            node[part] = nxt
        node = nxt
    node[parts[-1]] = value


def _delete(data: dict[str, Any], key: str) -> None:
    parts = key.split(".")
    node: Any = data
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(parts[-1], None)


def compose_hydra(
    root: Path | str,
    ep: Entrypoint,
    overrides: Sequence[str] = (),
    *,
    use_library: bool = True,
) -> HydraConfig | None:
    """The config a run of the Hydra entrypoint ``ep`` composes with ``overrides``
    (``model=mlp``, ``trainer.max_epochs=3``); None when it has no primary config
    inside the project.

    With hydra-core installed (the ``hydra`` extra) and ``use_library``, Hydra's own
    compose API builds ``data`` and ``groups`` (interpolations unresolved); when it is
    missing or cannot compose the config (a structured config registered from Python,
    say), the static composer below does, and a note says why. ``sources`` always
    come from the static reading."""
    root_path = Path(root).resolve()
    found = hydra_primary(root_path, ep)
    if found is None:
        return None
    conf_dir, primary = found
    choices: dict[str, str | None] = {}
    values: list[tuple[str, str, str]] = []
    for raw in overrides:
        text = raw.strip()
        if text.startswith("~"):
            values.append(("~", text[1:].split("=", 1)[0], ""))
            continue
        if "=" not in text:
            continue
        key, _, value = text.partition("=")
        op = "++" if key.startswith("++") else "+" if key.startswith("+") else ""
        key = key[len(op) :]
        group = key.split("@", 1)[0].replace(".", "/") if "@" in key else key
        if (conf_dir / group).is_dir() and not key.startswith("hydra"):
            choices[group] = None if value in ("null", "") else value
            continue
        values.append((op, key, value))
    composer = _Composer(root_path, conf_dir, choices)
    composer.compose(primary, "", "", 0)
    for group, option in choices.items():
        if group not in composer.groups:
            # `+group=option`: a group the defaults list does not have
            composer.groups[group] = option
            file = composer.group_file(group, option) if option else None
            if file is not None:
                composer.compose(file, group, group.replace("/", "."), 1)
    applied: list[str] = []
    for op, key, value in values:
        if op == "~":
            _delete(composer.data, key)
        else:
            _set(composer.data, key, _parse_scalar(value))
            composer.sources[key] = "<override>"
        applied.append(f"{op}{key}={value}" if op != "~" else f"~{key}")
    data, groups = composer.data, composer.groups
    if use_library:
        composed = _library_compose(conf_dir, primary.name, overrides)
        if isinstance(composed, str):
            composer.notes.append(composed)
        elif composed is not None:
            data, groups = composed
    group_options: dict[str, list[str]] = {}
    for group in groups:
        folder = conf_dir / group
        if folder.is_dir():
            group_options[group] = sorted(
                p.stem for p in folder.iterdir() if p.suffix in (".yaml", ".yml")
            )
    return HydraConfig(
        config_dir=conf_dir.relative_to(root_path).as_posix() or ".",
        primary=primary.relative_to(root_path).as_posix(),
        data=data,
        groups=groups,
        group_options=group_options,
        sources=composer.sources,
        overrides=[*(f"{g}={o}" for g, o in choices.items()), *applied],
        notes=composer.notes,
    )


_LIBRARY_LOCK = threading.Lock()
"""Hydra's compose API keeps one global instance: one composition at a time."""
_KEPT_HYDRA_KEYS = ("run", "sweep", "job")


def _quote(override: str) -> str:
    """``key={outputs_dir}/x`` -> ``key='{outputs_dir}/x'``: trainee's placeholders are
    no Hydra syntax; quoted they are a plain string."""
    key, eq, value = override.partition("=")
    if eq and ("{" in value or "$" in value) and "'" not in value and "${" not in value:
        return f"{key}='{value}'"
    return override


def _library_compose(
    conf_dir: Path, name: str, overrides: Sequence[str]
) -> tuple[dict[str, Any], dict[str, str | None]] | str | None:
    """(data, group choices) from hydra-core's compose API; None when hydra-core is not
    installed, a note when it cannot compose this config."""
    try:
        from hydra import compose, initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra
        from omegaconf import OmegaConf
    except ImportError:
        return None
    with _LIBRARY_LOCK:
        GlobalHydra.instance().clear()
        try:
            with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
                cfg = compose(
                    config_name=name.rsplit(".", 1)[0],
                    overrides=[_quote(o) for o in overrides],
                    return_hydra_config=True,
                )
            plain = OmegaConf.to_container(cfg, resolve=False)
        except Exception as exc:  # hydra raises many kinds for a config it cannot compose
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            return f"hydra-core could not compose {name} ({type(exc).__name__}: {first}); read statically"
        finally:
            GlobalHydra.instance().clear()
    if not isinstance(plain, dict):
        return None
    data: dict[str, Any] = {str(k): v for k, v in plain.items()}
    node = data.pop("hydra", None)
    hydra_node = node if isinstance(node, dict) else {}
    runtime = hydra_node.get("runtime")
    raw = runtime.get("choices") if isinstance(runtime, dict) else None
    groups: dict[str, str | None] = {
        str(k): (None if v is None else str(v))
        for k, v in (raw or {}).items()
        if not str(k).startswith("hydra/")
    }
    kept = {k: hydra_node[k] for k in _KEPT_HYDRA_KEYS if k in hydra_node}
    if kept:
        data["hydra"] = kept
    return data, groups


def hydra_overrides(project: ProjectFileSpec, ep: Entrypoint | None = None) -> list[str]:
    """The overrides every round of ``project`` passes: ``key=value`` words after the
    script in launch.command, then launch.args and run.fixed_args entries whose flag
    has no leading dash (rendered ``flag=value``)."""
    from trainee.discovery.scan import script_index

    words = list(project.launch.command or ())
    start = script_index(ep, words) if ep is not None else None
    rest = words[start + 1 :] if start is not None else words[1:]
    out = [w for w in rest if "=" in w and not w.startswith("-")]
    for arg in (*project.launch.args, *project.run.fixed_args):
        if arg.flag.startswith("-"):
            continue
        if arg.value is None:
            out.append(arg.flag)
        else:
            value = arg.value
            text = ("true" if value else "false") if isinstance(value, bool) else str(value)
            out.append(f"{arg.flag}={text}")
    return out
