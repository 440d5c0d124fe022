"""Static project discovery: entrypoints and their options, data folders, config files,
environment type and fixed training-limit flags.

Nothing here runs project code. Python files are read with :mod:`ast` (see
:mod:`trainee.discovery.options`), pyproject with :mod:`tomllib`, YAML as text (a Hydra
``defaults:`` list, a conda ``name:``) or through trainee's safe YAML reader (a Hydra
primary config). The walk skips VCS, virtualenv, cache and output folders and stops after
:data:`MAX_FILES` files; Python files larger than :data:`MAX_PY_BYTES` are not parsed.
A file that cannot be read or parsed becomes a note, never an exception.
"""

from __future__ import annotations

import ast
import os
import re
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from trainee.discovery.limits import is_limit_key, is_tied_key
from trainee.discovery.options import (
    EntryOption,
    Framework,
    ModuleInfo,
    normalize_name,
    read_module,
)
from trainee.errors import ConfigError

__all__ = [
    "MAX_FILES",
    "MAX_PY_BYTES",
    "ConfigFile",
    "DataDir",
    "Discovery",
    "EntryOption",
    "Entrypoint",
    "LimitFlag",
    "command_settings",
    "discover",
    "entrypoint_for_command",
    "is_data_option",
    "is_limit_name",
    "limit_flags",
    "module_assignments",
    "normalize_name",
    "scan_python_file",
    "script_index",
    "with_command",
]

MAX_FILES = 5_000
"""Files looked at by one walk; the rest of a big tree is ignored (noted)."""
MAX_PY_BYTES = 1 << 20
"""Python files larger than this are not parsed."""
MAX_DEPTH = 6
"""Folders deeper than this below the root are not walked."""
MAX_ENTRYPOINTS = 20
MAX_CONFIG_FILES = 50
MAX_DATA_DIRS = 10


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


SKIP_DIRS = _words(
    ".git .hg .svn .venv venv env .env node_modules .trainee __pycache__ site-packages .tox "
    ".nox .mypy_cache .pytest_cache .ruff_cache .ipynb_checkpoints build dist wandb mlruns "
    "lightning_logs outputs multirun runs checkpoints logs"
)
"""Folder names never walked (hidden folders are skipped too)."""

_TEST_DIRS = _words("tests test testing")
_AUX_DIRS = _words("examples example docs doc notebooks benchmarks bench")
_DATA_DIR_NAMES = _words("data datasets dataset data_dir corpus corpora")
_DATA_EXTS = _words(
    ".csv .tsv .npy .npz .parquet .feather .arrow .jsonl .h5 .hdf5 .tfrecord .tfrecords "
    ".png .jpg .jpeg .wav .flac .mat .bin .idx .txt"
)
_CONFIG_EXTS: dict[str, Literal["yaml", "json", "toml"]] = {
    ".yaml": "yaml",
    ".yml": "yaml",
    ".json": "json",
    ".toml": "toml",
}
_CONFIG_DIR_NAMES = _words("config configs conf cfg cfgs hparams params experiments recipes")
_NOT_CONFIG = _words(
    "environment.yml environment.yaml conda-lock.yml conda-lock.yaml mkdocs.yml mkdocs.yaml "
    "docker-compose.yml docker-compose.yaml compose.yml compose.yaml codecov.yml "
    "codecov.yaml package.json package-lock.json tsconfig.json renovate.json pyproject.toml "
    "poetry.lock cargo.toml ruff.toml pixi.toml netlify.toml vercel.json tokenizer.json "
    "tokenizer_config.json vocab.json special_tokens_map.json citation.cff"
)
_MAX_CONFIG_BYTES = 1 << 20
_MAX_JSON_BYTES = 256 << 10

_DATA_OPTION_RE = re.compile(
    r"^(?:train_)?(?:data|dataset|datadir|datapath|dataroot)"
    r"(?:_(?:root|dir|directory|path|folder))?$"
)
_HYDRA_DEFAULTS = re.compile(r"^defaults\s*:", re.M)
_CONDA_NAME = re.compile(r"""^name\s*:\s*['"]?([^'"#\s]+)['"]?\s*(?:#.*)?$""", re.M)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

EntryKind = Literal["script", "module", "pyproject_script"]
EnvironmentName = Literal["system", "uv", "venv", "conda"]


# -- result Structs -----------------------------------------------------------------


class Entrypoint(msgspec.Struct, kw_only=True):
    """A likely training entrypoint.

    ``path`` is relative to the project root; ``module`` is the dotted module for
    ``kind: module`` and the ``module:function`` target of a pyproject script;
    ``command`` the suggested ``launch.command``. ``choice_hints`` maps names annotated
    ``Literal[...]`` in the file to their values (choices for config keys of that name).
    """

    path: str
    kind: EntryKind
    reason: str
    options: list[EntryOption] = msgspec.field(default_factory=list)
    framework: Framework = "none"
    docstring: str = ""
    command: list[str] = msgspec.field(default_factory=list)
    module: str | None = None
    script_name: str | None = None
    options_from: str | None = None
    hydra_config_path: str | None = None
    hydra_config_name: str | None = None
    choice_hints: dict[str, list[Any]] = msgspec.field(default_factory=dict)
    metric_names: list[str] = msgspec.field(default_factory=list)
    score: int = 0
    notes: list[str] = msgspec.field(default_factory=list)
    main_guard: bool = False
    training: bool = False
    relative_imports: bool = False
    subcommands: list[str] = msgspec.field(default_factory=list)
    readme_refs: list[str] = msgspec.field(default_factory=list)
    """Where the docs run it (``README.md:12``)."""
    readme_args: list[str] = msgspec.field(default_factory=list)
    """The words after the script in the first command of the docs that runs it."""
    config_file: str | None = None
    """The config file the command passes (a nanoGPT config module given as a
    positional word); option defaults above are already overridden by it."""


class DataDir(msgspec.Struct, kw_only=True):
    path: str
    reason: str
    outside: bool = False


class ConfigFile(msgspec.Struct, kw_only=True):
    """A config file (or Hydra config folder): a suggestion only, never chosen."""

    path: str
    kind: Literal["yaml", "json", "toml", "hydra"]
    reason: str


class LimitFlag(msgspec.Struct, kw_only=True):
    """A training-budget option proposed as ``run.fixed_args`` (value None: no default).

    ``kind: tied`` is a schedule length that follows the budget (lr_decay_iters,
    warmup_steps): pinned with it, never tuned. ``problem`` says why the value must be
    chosen (it means "no limit", or it is a very long run)."""

    flag: str
    value: Any
    reason: str
    entrypoint: str
    kind: Literal["limit", "tied"] = "limit"
    problem: str | None = None


class Discovery(msgspec.Struct, kw_only=True):
    project_root: str
    environment: EnvironmentName
    environment_reason: str
    env_name: str | None = None
    entrypoints: list[Entrypoint] = msgspec.field(default_factory=list)
    data_dirs: list[DataDir] = msgspec.field(default_factory=list)
    config_files: list[ConfigFile] = msgspec.field(default_factory=list)
    fixed_limit_flags: list[LimitFlag] = msgspec.field(default_factory=list)
    readme: str | None = None
    files_scanned: int = 0
    truncated: bool = False
    notes: list[str] = msgspec.field(default_factory=list)

    @property
    def best(self) -> Entrypoint | None:
        return self.entrypoints[0] if self.entrypoints else None


# -- names ----------------------------------------------------------------------------


def is_limit_name(name: str) -> bool:
    """Whether ``name`` (a dest or key leaf) reads as a training budget (epochs, max
    steps, a time limit) or a schedule length tied to it (lr_decay_iters, warmup_steps):
    never a tunable."""
    return is_limit_key(name) or is_tied_key(name)


def is_data_option(name: str) -> bool:
    """Whether an option named ``name`` takes the data folder (``--data-root``, ``--data_dir``)."""
    return bool(_DATA_OPTION_RE.match(normalize_name(name)))


# -- the walk --------------------------------------------------------------------------


@dataclass
class _Tree:
    root: Path
    files: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    ext_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    file_counts: dict[str, int] = field(default_factory=dict)
    symlink_dirs: dict[str, bool] = field(default_factory=dict)
    truncated: bool = False
    notes: list[str] = field(default_factory=list)


def _walk(root: Path, max_files: int) -> _Tree:
    tree = _Tree(root)
    count = 0
    for dirpath, dirnames, filenames in os.walk(root, onerror=None, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir
        depth = 0 if not rel_dir else rel_dir.count("/") + 1
        keep: list[str] = []
        for name in sorted(dirnames):
            child = f"{rel_dir}/{name}" if rel_dir else name
            if name.startswith(".") or name in SKIP_DIRS or name.endswith(".egg-info"):
                continue
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                tree.symlink_dirs[child] = _inside(root, Path(full))
                tree.dirs.append(child)
                continue
            if os.path.exists(os.path.join(full, "pyvenv.cfg")) or depth + 1 > MAX_DEPTH:
                continue
            keep.append(name)
            tree.dirs.append(child)
        dirnames[:] = keep
        counts = tree.ext_counts.setdefault(rel_dir, {})
        for name in sorted(filenames):
            if count >= max_files:
                tree.truncated = True
                break
            count += 1
            full = os.path.join(dirpath, name)
            if os.path.islink(full) and not _inside(root, Path(full)):
                continue
            ext = os.path.splitext(name)[1].lower()
            counts[ext] = counts.get(ext, 0) + 1
            tree.file_counts[rel_dir] = tree.file_counts.get(rel_dir, 0) + 1
            tree.files.append(f"{rel_dir}/{name}" if rel_dir else name)
        if tree.truncated:
            dirnames[:] = []
            break
    if tree.truncated:
        tree.notes.append(f"stopped after {max_files} files; a bigger tree is only partly scanned")
    return tree


def _inside(root: Path, path: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError, ValueError):
        return False


def _read_text(path: Path, limit: int) -> str | None:
    try:
        with path.open("rb") as fh:
            raw = fh.read(limit + 1)
    except OSError:
        return None
    if len(raw) > limit:
        return None
    return raw.decode("utf-8", "replace")


# -- public entry points -------------------------------------------------------------------


def discover(root: Path | str, *, max_files: int = MAX_FILES) -> Discovery:
    """Everything trainee can learn about the project at ``root`` without running it.

    At most ``max_files`` files are looked at (``truncated`` and a note say so)."""
    root_path = resolve_root(root)
    tree = _walk(root_path, max_files)
    notes = list(tree.notes)
    env, env_reason, env_name = _environment(root_path, notes)
    pyproject = _pyproject(root_path, notes)
    entrypoints = _entrypoints(root_path, tree, pyproject, notes)
    data_dirs = _data_dirs(root_path, tree, entrypoints)
    config_files = _config_files(root_path, tree, entrypoints, data_dirs)
    limits = [lim for ep in entrypoints for lim in limit_flags(root_path, ep, ep.command)]
    readme = next(
        (
            n
            for n in ("README.md", "README.rst", "README.txt", "README", "readme.md")
            if (root_path / n).is_file()
        ),
        None,
    )
    return Discovery(
        project_root=str(root_path),
        environment=env,
        environment_reason=env_reason,
        env_name=env_name,
        entrypoints=entrypoints,
        data_dirs=data_dirs,
        config_files=config_files,
        fixed_limit_flags=limits,
        readme=readme,
        files_scanned=len(tree.files),
        truncated=tree.truncated,
        notes=notes,
    )


def resolve_root(root: Path | str) -> Path:
    try:
        resolved = Path(root).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        raise ConfigError(
            f"{root}: project root does not exist", file=str(root), reason="does not exist"
        ) from None
    if not resolved.is_dir():
        raise ConfigError(
            f"{root}: project root is not a directory", file=str(root), reason="not a directory"
        )
    return resolved


def entrypoint_for_command(
    root: Path | str,
    discovery: Discovery,
    command: Iterable[str],
    working_dir: str = ".",
) -> Entrypoint | None:
    """The entrypoint a ``launch.command`` (or shell command's words) runs, if any.

    Matches ``*.py`` words against discovered scripts (a file not discovered is scanned
    now), ``-m module`` against modules and a bare first word against pyproject scripts.
    The result's option defaults are those the command really starts with: a nanoGPT
    config module given as a positional word overrides the script's globals
    (``config_file`` names it).
    """
    top = str(Path(root).resolve())
    base = os.path.normpath(os.path.join(top, working_dir))
    # a shell command names the script through trainee's placeholders
    words = [w.replace("{project_root}", top).replace("{working_dir}", base) for w in command]
    ep = _match_command(root, discovery, words, working_dir)
    if ep is None:
        return None
    return with_command(root, ep, words, working_dir)


def script_index(ep: Entrypoint, words: Sequence[str]) -> int | None:
    """The index of the word that names ``ep`` in a command (the script, the module
    after ``-m`` or the console script), or None."""
    for i, word in enumerate(words):
        if ep.kind == "module" and word == ep.module and i > 0 and words[i - 1] == "-m":
            return i
        if word.endswith(".py") and os.path.normpath(word) == ep.path:
            return i
        if ep.kind == "pyproject_script" and word == ep.script_name:
            return i
    for i, word in enumerate(words):
        if word.endswith(".py") and word.endswith(ep.path.rsplit("/", 1)[-1]):
            return i
    return None


def with_command(
    root: Path | str, ep: Entrypoint, words: Sequence[str], working_dir: str = "."
) -> Entrypoint:
    """A copy of ``ep`` whose defaults are those ``words`` start it with: for a
    configurator script, the literal assignments of the config modules given as
    positional words (``python train.py config/small.py``) override its globals."""
    if ep.framework != "configurator":
        return ep
    index = script_index(ep, words)
    if index is None:
        return ep
    root_path = Path(root).resolve()
    out = msgspec.structs.replace(ep, options=[msgspec.structs.replace(o) for o in ep.options])
    by_dest = {o.dest: o for o in out.options}
    for word in words[index + 1 :]:
        if word.startswith("-") or not word.endswith(".py"):
            continue
        rel = _relative(root_path, root_path / working_dir / word)
        if rel is None or not (root_path / rel).is_file():
            continue
        parsed = _parse(root_path, rel, out.notes)
        if parsed is None:
            continue
        for name, value in module_assignments(parsed[0]).items():
            option = by_dest.get(name)
            if option is not None:
                option.default = value
                option.default_source = None
                option.help = (option.help + f" (set by {rel})").strip()
        out.config_file = rel
    return out


def module_assignments(tree: ast.Module) -> dict[str, Any]:
    """``name = <literal>`` statements at the top level of a module (a nanoGPT config)."""
    out: dict[str, Any] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                continue
            if isinstance(value, bool | int | float | str):
                out[node.targets[0].id] = value
    return out


def command_settings(ep: Entrypoint, words: Sequence[str]) -> dict[str, str]:
    """What the words after the entrypoint set: option dest -> value text (``true``
    for a bare flag), and ``key=value`` overrides as key -> value."""
    index = script_index(ep, words)
    rest = list(words[index + 1 :]) if index is not None else []
    by_flag = {f: o for o in ep.options for f in o.flags}
    out: dict[str, str] = {}
    i = 0
    while i < len(rest):
        word = rest[i]
        i += 1
        if word.startswith("-"):
            flag, eq, value = word.partition("=")
            option = by_flag.get(flag)
            dest = option.dest if option is not None else normalize_name(flag)
            if eq:
                out[dest] = value
            elif option is not None and option.type == "bool":
                out[dest] = "false" if flag == option.negative_flag else "true"
            elif i < len(rest) and not rest[i].startswith("-"):
                out[dest] = rest[i]
                i += 1
            else:
                out[dest] = "true"
        elif "=" in word:
            key, _, value = word.partition("=")
            out[key.lstrip("+~")] = value
    return out


def _match_command(
    root: Path | str,
    discovery: Discovery,
    command: Iterable[str],
    working_dir: str = ".",
) -> Entrypoint | None:
    """The entrypoint a ``launch.command`` (or shell command's words) runs, if any.

    Matches ``*.py`` words against discovered scripts (a file not discovered is scanned
    now), ``-m module`` against modules and a bare first word against pyproject scripts.
    """
    root_path = Path(root).resolve()
    words = list(command)
    by_path = {ep.path: ep for ep in discovery.entrypoints}
    for i, word in enumerate(words):
        if word == "-m" and i + 1 < len(words):
            module = words[i + 1]
            for ep in discovery.entrypoints:
                if ep.kind == "module" and ep.module == module:
                    return ep
            mod_file = _module_file(root_path, module)
            if mod_file is not None:
                return scan_python_file(
                    root_path, mod_file, kind="module", reason=f"python -m {module}"
                )
        if word.endswith(".py"):
            rel = _relative(root_path, root_path / working_dir / word)
            if rel is None:
                continue
            if rel in by_path:
                return by_path[rel]
            if (root_path / rel).is_file():
                return scan_python_file(root_path, rel, kind="script", reason=f"named by {word}")
    if words:
        for ep in discovery.entrypoints:
            if ep.kind == "pyproject_script" and ep.script_name == words[0]:
                return ep
    return None


def _relative(root: Path, path: Path) -> str | None:
    normal = Path(os.path.normpath(path))
    if not normal.is_relative_to(root):
        return None
    return normal.relative_to(root).as_posix()


def _module_file(root: Path, module: str) -> str | None:
    parts = module.split(".")
    if not all(_IDENT.match(p) for p in parts):
        return None
    for base in ("", "src/"):
        stem = base + "/".join(parts)
        for candidate in (f"{stem}/__main__.py", f"{stem}.py"):
            if (root / candidate).is_file():
                return candidate
    return None


# -- environment ---------------------------------------------------------------------------


def _environment(root: Path, notes: list[str]) -> tuple[EnvironmentName, str, str | None]:
    if (root / "uv.lock").is_file():
        return "uv", "uv.lock at the project root", None
    pyproject = _pyproject(root, [])
    if isinstance(pyproject.get("tool"), dict) and "uv" in pyproject["tool"]:
        return "uv", "pyproject.toml has a [tool.uv] table", None
    for python in (".venv/bin/python", ".venv/bin/python3", ".venv/Scripts/python.exe"):
        if (root / python).exists() or (root / python).is_symlink():
            return "venv", f"{python} exists", None
    if (root / ".venv" / "pyvenv.cfg").is_file():
        return "venv", ".venv/pyvenv.cfg exists", None
    for name in ("environment.yml", "environment.yaml", "conda-lock.yml", "conda-lock.yaml"):
        path = root / name
        if not path.is_file():
            continue
        text = _read_text(path, _MAX_CONFIG_BYTES) or ""
        match = _CONDA_NAME.search(text)
        if match:
            env_name = match.group(1)
            return "conda", f"{name} at the project root (name: {env_name})", env_name
        notes.append(f"{name} has no `name:`; set launch.env_name to the conda environment")
        return "conda", f"{name} at the project root (it names no environment)", None
    extra = ""
    for name in ("requirements.txt", "setup.py", "pyproject.toml"):
        if (root / name).is_file():
            extra = f"; {name} lists what `python` needs"
            break
    return "system", f"no uv.lock, [tool.uv], .venv or conda environment file{extra}", None


def _pyproject(root: Path, notes: list[str]) -> dict[str, Any]:
    path = root / "pyproject.toml"
    if not path.is_file():
        return {}
    text = _read_text(path, _MAX_CONFIG_BYTES)
    if text is None:
        notes.append("pyproject.toml could not be read or is too large; skipped")
        return {}
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        notes.append(f"pyproject.toml is not valid TOML ({exc}); skipped")
        return {}


# -- entrypoints -----------------------------------------------------------------------------


def _entry_score(rel: str) -> tuple[int, str] | None:
    """(score, why) for a script path, or None when the name is not an entrypoint name."""
    parts = rel.split("/")
    name = parts[-1]
    stem = name[:-3]
    depth = len(parts) - 1
    if (
        any(p in _TEST_DIRS for p in parts[:-1])
        or name.startswith("test_")
        or name
        in (
            "conftest.py",
            "setup.py",
        )
    ):
        return None
    if stem == "train":
        score, why = 100, "named train.py"
    elif stem.startswith("train"):
        score, why = 90, f"named {name} (train*.py)"
    elif stem.endswith("_train") or stem.startswith(("finetune", "pretrain", "fine_tune")):
        score, why = 70, f"named {name} (a training script name)"
    elif stem == "main":
        score, why = 60, "named main.py"
    else:
        return None
    score -= 8 * depth
    if any(p in _AUX_DIRS for p in parts[:-1]):
        score -= 45
    where = "at the project root" if depth == 0 else f"in {'/'.join(parts[:-1])}/"
    return score, f"{why} {where}"


_CLI_SIGNAL = re.compile(
    r"__main__|hydra|configurator|parse_args|LightningCLI|HfArgumentParser|click|typer|"
    r"jsonargparse|\bCLI\("
)
_NOT_TRAINING = re.compile(
    r"^(?:sample\w*|generate\w*|gen|eval\w*|test\w*|predict\w*|infer\w*|prepare\w*|"
    r"preprocess\w*|download\w*|export\w*|convert\w*|bench\w*|plot\w*|visuali[sz]\w*|setup|"
    r"configurator|utils?|helpers?|demo\w*|serve\w*|server|app|make_\w+|build_\w+|score\w*|"
    r"tokeni[sz]\w*|chat\w*|interactive|profile\w*|check\w*|compare\w*|analy[sz]\w*)$"
)
_HELPER_WORD = re.compile(
    r"tokeni[sz]er|prepare|preprocess|download|eval|sample|generate|export|convert|bench|"
    r"plot|visuali[sz]|vocab|split|clean"
)
README_SCORE = 50
"""Bonus of a script the README or docs run (the project's own word)."""


def _content_score(rel: str, ep: Entrypoint) -> tuple[int, str] | None:
    """(score, why) of a file that reads the command line but has no entrypoint name."""
    if not (ep.main_guard and (ep.options or ep.framework != "none")):
        return None
    parts = rel.split("/")
    stem = parts[-1][:-3]
    score = 40
    what = f"{ep.framework} options" if ep.options else f"a {ep.framework} app"
    why = f"{parts[-1]} reads the command line ({what}) under a __main__ guard"
    if _NOT_TRAINING.match(stem):
        score -= 35
    score -= 8 * (len(parts) - 1)
    if any(p in _AUX_DIRS for p in parts[:-1]):
        score -= 45
    return score, why


def _module_name(rel: str) -> str | None:
    parts = rel[:-3].split("/")
    if parts[0] == "src":
        parts = parts[1:]
    if parts and parts[-1] == "__main__":
        parts = parts[:-1]
    if not parts or not all(_IDENT.match(p) for p in parts):
        return None
    return ".".join(parts)


def _in_package(root: Path, rel: str) -> bool:
    return "/" in rel and (root / rel.rsplit("/", 1)[0] / "__init__.py").is_file()


def _entrypoints(
    root: Path, tree: _Tree, pyproject: dict[str, Any], notes: list[str]
) -> list[Entrypoint]:
    from trainee.discovery.readme import readme_commands

    commands = readme_commands(root)
    by_script: dict[str, list[Any]] = {}
    by_module: dict[str, list[Any]] = {}
    for cmd in commands:
        if cmd.script is not None:
            target = _relative(root, root / cmd.script)
            if target is not None:
                by_script.setdefault(target, []).append(cmd)
        elif cmd.module is not None:
            by_module.setdefault(cmd.module, []).append(cmd)
    found: dict[str, Entrypoint] = {}
    for rel in tree.files:
        if not rel.endswith(".py"):
            continue
        parts = rel.split("/")
        name = parts[-1]
        if any(p in _TEST_DIRS for p in parts[:-1]) or name.startswith("test_"):
            continue
        module = _module_name(rel)
        refs = by_script.get(rel, []) + (by_module.get(module, []) if module else [])
        if name == "__main__.py":
            mod_parts = parts[:-1]
            if not mod_parts or module is None:
                continue
            score = 65 - 5 * (len(module.split(".")) - 1) + (10 if "train" in module else 0)
            if any(p in _AUX_DIRS for p in parts):
                score -= 45
            reason = f"package {module} has a __main__.py (runs as python -m {module})"
            if parts[0] == "src":
                reason += "; src/ layout, needs the package installed or PYTHONPATH=src"
            ep = scan_python_file(root, rel, kind="module", reason=reason, module=module)
        else:
            named = _entry_score(rel)
            if named is None and not refs:
                text = _read_text(root / rel, MAX_PY_BYTES)
                if text is None or not _CLI_SIGNAL.search(text):
                    continue
            ep = scan_python_file(root, rel, kind="script", reason="")
            if named and not (ep.main_guard or ep.options or refs):
                if any(p.lower() in _CONFIG_DIR_NAMES for p in parts[:-1]) and not ep.training:
                    continue  # a config module (config/train_small.py), not a script
                named = (named[0] - 30, named[1] + " (but reads no command line)")
            elif named and not ep.options and ep.framework == "none":
                named = (named[0] - 20, named[1] + " (reads no options)")
            if named and _HELPER_WORD.search(name[:-3]) and name[:-3] != "train":
                named = (named[0] - 35, named[1] + " (a helper's name)")
            scored = named or _content_score(rel, ep)
            if scored is None and refs:
                scored = (40 - 8 * (len(parts) - 1), f"{name} is run by the docs")
            if scored is None:
                continue
            score, ep.reason = scored
            by_module_ref = module is not None and module in by_module
            if module and (by_module_ref or (ep.relative_imports and _in_package(root, rel))):
                ep.kind, ep.module = "module", module
                ep.command = _command_for(ep)
                why = "the docs run it" if by_module_ref else "it uses relative imports"
                ep.reason += f"; runs as python -m {module} ({why})"
        if ep.training:
            score += 15
        if refs:
            score += README_SCORE + min(10, 3 * (len(refs) - 1))
            ep.readme_refs = [f"{c.file}:{c.line}" for c in refs][:5]
            ep.readme_args = list(refs[0].args)
            ep.reason += f"; run by {refs[0].file} line {refs[0].line}"
        ep.score += score
        found.setdefault(rel, ep)
    for script, target, table in _pyproject_scripts(pyproject):
        module = target.split(":", 1)[0].strip()
        target_file = _module_file(root, module) if module else None
        reason = f"[{table}] script {script} = {target!r}"
        if target_file is None:
            notes.append(f"{reason}: module {module} not found in the project")
            continue
        ep = scan_python_file(
            root,
            target_file,
            kind="pyproject_script",
            reason=reason,
            module=target,
            script_name=script,
        )
        ep.score += 75 + (10 if "train" in script else 0)
        key = f"script:{script}"
        found[key] = ep
    ordered = sorted(found.values(), key=lambda e: (-e.score, e.path, e.kind))
    for ep in ordered:
        notes.extend(n for n in ep.notes if "could not" in n)
    return ordered[:MAX_ENTRYPOINTS]


def _pyproject_scripts(pyproject: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    project = pyproject.get("project")
    if isinstance(project, dict) and isinstance(project.get("scripts"), dict):
        for name, target in project["scripts"].items():
            if isinstance(target, str):
                yield str(name), target, "project.scripts"
    tool = pyproject.get("tool")
    poetry = tool.get("poetry") if isinstance(tool, dict) else None
    if isinstance(poetry, dict) and isinstance(poetry.get("scripts"), dict):
        for name, target in poetry["scripts"].items():
            if isinstance(target, str):
                yield str(name), target, "tool.poetry.scripts"


def scan_python_file(
    root: Path | str,
    rel: str,
    *,
    kind: EntryKind = "script",
    reason: str = "",
    module: str | None = None,
    script_name: str | None = None,
) -> Entrypoint:
    """Read one Python file (never import it) into an Entrypoint with its options.

    A file that defines no options but imports a project module that does (a thin
    ``__main__.py``) takes that module's options; ``options_from`` names it.
    """
    root_path = Path(root)
    ep = Entrypoint(path=rel, kind=kind, reason=reason, module=module, script_name=script_name)
    ep.command = _command_for(ep)
    parsed = _parse(root_path, rel, ep.notes)
    if parsed is None:
        ep.score -= 40
        return ep
    tree, text = parsed
    _fill(ep, read_module(tree, text))
    ep.command = _command_for(ep)
    if ep.main_guard:
        ep.score += 10
    if kind == "pyproject_script" and module and ":" in module:
        func = module.split(":", 1)[1].strip()
        if not any(isinstance(n, ast.FunctionDef) and n.name == func for n in tree.body):
            ep.notes.append(f"function {func} not found in {rel}")
    if not ep.options:
        for other in _project_imports(root_path, rel, tree)[:5]:
            sub = _parse(root_path, other, [])
            if sub is None:
                continue
            info = read_module(*sub)
            if info.options:
                ep.options = info.options
                ep.framework = info.framework
                ep.options_from = other
                ep.choice_hints = {**info.choice_hints, **ep.choice_hints}
                break
    if ep.options:
        ep.score += 5
    return ep


def _fill(ep: Entrypoint, info: ModuleInfo) -> None:
    ep.main_guard = info.main_guard
    ep.training = info.training
    ep.relative_imports = info.relative_imports
    ep.subcommands = list(info.subcommands)
    ep.docstring = info.docstring
    ep.options = info.options
    ep.framework = info.framework
    ep.hydra_config_path = info.hydra_config_path
    ep.hydra_config_name = info.hydra_config_name
    ep.choice_hints = info.choice_hints
    ep.metric_names = info.metric_names


def _command_for(ep: Entrypoint) -> list[str]:
    if ep.kind == "module" and ep.module:
        return ["python", "-m", ep.module, *ep.subcommands]
    if ep.kind == "pyproject_script" and ep.script_name:
        return [ep.script_name, *ep.subcommands]
    return ["python", ep.path, *ep.subcommands]


def _parse(root: Path, rel: str, notes: list[str]) -> tuple[ast.Module, str] | None:
    path = root / rel
    if path.is_symlink() and not _inside(root, path):
        notes.append(f"{rel} is a symlink out of the project; not read")
        return None
    text = _read_text(path, MAX_PY_BYTES)
    if text is None:
        notes.append(f"{rel} could not be read or is larger than {MAX_PY_BYTES} bytes; skipped")
        return None
    try:
        return ast.parse(text, filename=rel), text
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        notes.append(f"{rel} could not be parsed as Python{where}; its options are unknown")
        return None


def _project_imports(root: Path, rel: str, tree: ast.Module) -> list[str]:
    """Project files imported by ``rel`` (relative or package-absolute imports)."""
    package = rel.rsplit("/", 1)[0] if "/" in rel else ""
    out: list[str] = []
    for node in tree.body:
        targets: list[tuple[int, str]] = []
        if isinstance(node, ast.ImportFrom):
            targets.append((node.level, node.module or ""))
            if node.module is None:
                targets.extend((node.level, a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            targets.extend((0, a.name) for a in node.names)
        for level, name in targets:
            cand: str | None
            if level:
                base = package.split("/") if package else []
                base = base[: len(base) - (level - 1)] if level > 1 else base
                stem = "/".join([*base, *name.split(".")]) if name else "/".join(base)
                cand = next(
                    (c for c in (f"{stem}.py", f"{stem}/__init__.py") if (root / c).is_file()),
                    None,
                )
            else:
                cand = _module_file(root, name) if name else None
                if cand is None and name:
                    stem = "/".join(name.split("."))
                    for prefix in ("", "src/"):
                        if (root / f"{prefix}{stem}/__init__.py").is_file():
                            cand = f"{prefix}{stem}/__init__.py"
                            break
            if cand and cand != rel and cand not in out:
                out.append(cand)
    return out


# -- data folders ---------------------------------------------------------------------------


def _data_dirs(root: Path, tree: _Tree, entrypoints: list[Entrypoint]) -> list[DataDir]:
    found: dict[str, DataDir] = {}
    for rel in tree.dirs:
        parts = rel.split("/")
        if len(parts) > 2 or parts[-1].lower() not in _DATA_DIR_NAMES:
            continue
        if any(p in _TEST_DIRS or p in _AUX_DIRS for p in parts[:-1]):
            continue
        if rel in tree.symlink_dirs:
            inside = tree.symlink_dirs[rel]
            where = "inside" if inside else "outside"
            found[rel] = DataDir(
                path=rel,
                reason=f"folder named '{parts[-1]}' (a symlink to a folder {where} the project)",
                outside=not inside,
            )
            continue
        if _code_or_config(tree, rel):
            continue  # a Python package (src/data) or a config group (configs/data)
        n = _count_below(tree, rel)
        found[rel] = DataDir(path=rel, reason=f"folder named '{parts[-1]}' ({n} files)")
    for rel_dir, counts in tree.ext_counts.items():
        if not rel_dir or any(rel_dir == d or rel_dir.startswith(d + "/") for d in found):
            continue
        parts = rel_dir.split("/")
        if len(parts) > 3 or any(p in _TEST_DIRS or p in _RESULT_DIRS for p in parts):
            continue
        if ".py" in counts:
            continue
        total = sum(counts.values())
        data = {e: c for e, c in counts.items() if e in _DATA_EXTS and e != ".txt"}
        n = sum(data.values())
        if n >= 3 and n >= 0.6 * total:
            top = ", ".join(f"{c} {e}" for e, c in sorted(data.items(), key=lambda x: -x[1])[:3])
            found[rel_dir] = DataDir(path=rel_dir, reason=f"holds data files ({top})")
    for ep in entrypoints[:3]:
        for o in ep.options:
            if not is_data_option(o.dest) or not isinstance(o.default, str):
                continue
            if os.path.normpath(o.default.strip() or ".") == ".":
                continue  # '' or '.': a name or "the current folder", not a data folder
            target = _relative(root, root / o.default)
            if target and target not in found and (root / target).is_dir():
                found[target] = DataDir(
                    path=target, reason=f"default of {ep.path} option {o.flag} ({o.default!r})"
                )
    ordered = sorted(found.values(), key=lambda d: (d.path.count("/"), d.path))
    return ordered[:MAX_DATA_DIRS]


_RESULT_DIRS = _words("results result output figures plots images_out samples")


def _code_or_config(tree: _Tree, rel: str) -> bool:
    """A folder holding Python code or only config files (not data)."""
    below = {d: c for d, c in tree.ext_counts.items() if d == rel or d.startswith(rel + "/")}
    exts: dict[str, int] = {}
    for counts in below.values():
        for ext, n in counts.items():
            exts[ext] = exts.get(ext, 0) + n
    if ".py" in exts:
        return True
    return bool(exts) and set(exts) <= {".yaml", ".yml"}


def _count_below(tree: _Tree, rel: str) -> int:
    return sum(c for d, c in tree.file_counts.items() if d == rel or d.startswith(rel + "/"))


# -- config files ----------------------------------------------------------------------------


def _config_files(
    root: Path, tree: _Tree, entrypoints: list[Entrypoint], data_dirs: list[DataDir]
) -> list[ConfigFile]:
    hydra_dirs: dict[str, str] = {}
    for ep in entrypoints:
        if ep.hydra_config_path is None:
            continue
        base = ep.path.rsplit("/", 1)[0] if "/" in ep.path else ""
        conf_rel = _relative(root, root / base / ep.hydra_config_path)
        if conf_rel and (root / conf_rel).is_dir():
            name = f" (config_name {ep.hydra_config_name})" if ep.hydra_config_name else ""
            hydra_dirs[conf_rel] = f"@hydra.main config_path of {ep.path}{name}"
    scored: list[tuple[int, ConfigFile]] = []
    for rel in tree.files:
        name = rel.rsplit("/", 1)[-1]
        ext = Path(name).suffix.lower()
        kind = _CONFIG_EXTS.get(ext)
        if kind is None or name.lower() in _NOT_CONFIG:
            continue
        parts = rel.split("/")
        if any(rel.startswith(d.path + "/") for d in data_dirs):
            continue
        if any(p in _TEST_DIRS for p in parts[:-1]):
            continue
        try:
            size = (root / rel).stat().st_size
        except OSError:
            continue
        if size > (_MAX_JSON_BYTES if kind == "json" else _MAX_CONFIG_BYTES):
            continue
        folder = "/".join(parts[:-1])
        if kind == "yaml" and folder not in hydra_dirs:
            head = _read_text(root / rel, _MAX_CONFIG_BYTES) or ""
            if _HYDRA_DEFAULTS.search(head):
                hydra_dirs[folder or "."] = f"{rel} has a Hydra `defaults:` list"
        score = 0
        in_config_dir = any(p.lower() in _CONFIG_DIR_NAMES for p in parts[:-1])
        stem = Path(name).stem.lower()
        hints = [
            w for w in ("config", "conf", "cfg", "base", "default", "train", "hparam") if w in stem
        ]
        if in_config_dir:
            score += 20
        if hints:
            score += 10
        score -= 3 * (len(parts) - 1)
        reasons: list[str] = []
        if in_config_dir:
            reasons.append(f"in {folder}/")
        if hints:
            reasons.append(f"name contains '{hints[0]}'")
        if not reasons:
            reasons.append(f"a {kind.upper()} file")
        if kind == "toml":
            reasons.append("TOML cannot be a baseline_config (YAML or JSON only)")
        scored.append((score, ConfigFile(path=rel, kind=kind, reason="; ".join(reasons))))
    out: list[ConfigFile] = []
    for folder, why in sorted(hydra_dirs.items()):
        groups = (
            sorted(
                d.rsplit("/", 1)[-1]
                for d in tree.dirs
                if d.startswith(folder + "/") and d.count("/") == folder.count("/") + 1
            )
            if folder != "."
            else []
        )
        extra = f"; groups: {', '.join(groups)}" if groups else ""
        out.append(
            ConfigFile(path=folder, kind="hydra", reason=f"Hydra config folder: {why}{extra}")
        )
    hydra_prefixes = tuple(f + "/" for f in hydra_dirs if f != ".")
    rest = [
        c
        for s, c in sorted(scored, key=lambda x: (-x[0], x[1].path))
        if not (hydra_prefixes and c.path.startswith(hydra_prefixes))
    ]
    out.extend(rest)
    return out[:MAX_CONFIG_FILES]


# -- training limits -------------------------------------------------------------------------


def limit_flags(
    root: Path | str, ep: Entrypoint, command: Sequence[str], args: Sequence[Any] = ()
) -> list[LimitFlag]:
    """The budget options of ``ep`` that ``command`` does not set itself, and the
    schedule lengths tied to them, each with the reason to pin it (and a problem when
    its value must be chosen). A Hydra app's come from its composed config, as
    override keys (``trainer.max_epochs``). ``args`` (ArgSpecs, e.g. the values of the
    README's own command) give a limit its value instead of the code's default."""
    from trainee.discovery.runplan import run_view

    view = run_view(root, ep, command, args)
    out: list[LimitFlag] = []
    where = view.hydra.primary if view.hydra is not None else ep.path
    for item in view.budget.limits + view.budget.tied:
        if item.set_by == "launch.command":
            continue
        shown = f"default {item.value}" if item.value is not None else "no default"
        if item.set_by is not None:
            shown = f"{item.value} as the docs run it"
        if item.kind == "limit":
            reason = (
                f"{where} {item.flag} ({shown}) limits training; kept the same in every "
                "round so rounds compare fairly"
            )
        else:
            reason = (
                f"{where} {item.flag} ({shown}) is a schedule length tied to the training "
                "limit; pinned with it, not tuned"
            )
        out.append(
            LimitFlag(
                flag=item.flag,
                value=item.value,
                reason=reason,
                entrypoint=ep.path,
                kind=item.kind,
                problem=item.problem,
            )
        )
    return out
