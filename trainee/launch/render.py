"""A round's command line, environment and working folder, exactly as the spec says.

Arguments follow the launch command in this order: 1. the round config when
``launch.baseline_config`` is set (``<launch.config_flag> <path>``, or for
``config_style: hydra`` ``--config-path DIR --config-name NAME --config-dir
<the baseline's folder>``), 2. ``launch.args``, 3. data entries that have a flag
(their absolute path), 4. ``run.fixed_args``, then ``output.flag`` with the round's
outputs folder (and, for hydra, ``hydra.run.dir`` / ``hydra.sweep.dir``), 5. the
flag and override tunables of tuning.yaml (config-backed ones go into the round
config instead). The ``{...}`` variables of :mod:`trainee.spec.placeholders` are
filled in every value of groups 2-4 and of ``launch.env``.
``launch.environment`` adds its prefix; ``advanced.shell_command`` replaces all of
it with a ``/bin/sh -c`` template (not a login shell, so the caller's PATH holds).
"""

from __future__ import annotations

import difflib
import os
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from trainee.errors import InvalidParams, LaunchError
from trainee.launch import sandbox
from trainee.launch.layout import RoundLayout
from trainee.launch.roundconfig import (
    ParamValues,
    resolve_params,
    round_config_path,
    write_round_config,
)
from trainee.spec import (
    ConfigStyle,
    Environment,
    ParamSource,
    ProjectSpec,
    SecurityMode,
    Value,
    expand,
    render_arg,
    render_param,
)
from trainee.spec.compile import HYDRA_OUTPUT_KEYS
from trainee.spec.files import SCRATCH_CWD, uses_scratch_cwd

__all__ = [
    "DROPPED_ENV",
    "RenderedRound",
    "build_argv",
    "build_env",
    "build_extra_args",
    "build_shell_text",
    "command_prefix",
    "config_diff",
    "env_value",
    "is_secret_name",
    "job_environ",
    "launch_env",
    "render_round",
    "round_values",
    "shell_display",
    "shell_values",
]

DROPPED_ENV: frozenset[str] = frozenset(
    {
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "WATCHDOG_PID",
        "LISTEN_FDS",
        "LISTEN_PID",
        "LISTEN_FDNAMES",
    }
)
"""Variables of the caller (systemd's, mostly) that must not reach the job. Every
inherited ``TRAINEE_*`` variable is dropped too: the job gets its own five."""

_PYTHONS = ("python", "python3")
_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
_SECRET_PARTS = frozenset({"PASS", "PAT", "DSN", "CREDENTIALS", "APIKEY"})


def is_secret_name(name: str) -> bool:
    """The one rule for environment variables that hold secrets (API keys, tokens,
    passwords): never written to the store, never handed to the job unless the project
    lists them in ``launch.env_passthrough``, never shown to a cluster engine that shows
    them to others (Ray's runtime_env).

    A word of the name (split at ``_``) that ends in KEY, TOKEN, SECRET, PASSWORD, ...
    or is PASS, PAT, DSN marks it (``HF_TOKEN``, ``OPENAI_API_KEY``, ``PGPASSWORD``,
    ``GITHUB_ACCESSTOKEN``, ``SENTRY_DSN``); ``TOKENIZERS_PARALLELISM`` or
    ``KEYBOARD_LAYOUT`` are not secrets."""
    parts = name.upper().split("_")
    return any(part in _SECRET_PARTS for part in parts) or any(
        part.endswith(word) for part in parts for word in _SECRET_WORDS
    )


def job_environ(base_env: Mapping[str, str], passthrough: Sequence[str] = ()) -> dict[str, str]:
    """What of the caller's environment reaches the job, in every mode and backend: all
    but :data:`DROPPED_ENV`, inherited ``TRAINEE_*`` and secret-named variables
    (:func:`is_secret_name`) that ``passthrough`` (``launch.env_passthrough``) does not list."""
    allowed = set(passthrough)
    return {
        key: value
        for key, value in base_env.items()
        if key not in DROPPED_ENV
        and not key.startswith("TRAINEE_")
        and (key in allowed or not is_secret_name(key))
    }


class RenderedRound(msgspec.Struct, frozen=True, kw_only=True):
    """What to exec for a round."""

    argv: tuple[str, ...]
    """The command (``("/bin/sh", "-c", text)`` for a shell command; bwrap's after wrap)."""
    env: dict[str, str]
    """The child's full environment."""
    cwd: str
    """``advanced.working_dir``, resolved."""
    config_path: str | None
    """The per-round config (None without ``launch.baseline_config``)."""
    display: str
    """A copy-pasteable shell line of the command, without env (and without bwrap)."""


def render_round(
    spec: ProjectSpec,
    rnd: RoundLayout,
    params: ParamValues,
    *,
    base_env: Mapping[str, str],
    security_mode: SecurityMode | str | None = None,
    write_config: bool = True,
) -> RenderedRound:
    """Check ``params``, write the round config and build argv/env/cwd.

    ``security_mode`` (default: the spec's) does not wrap anything (that is
    :func:`trainee.launch.sandbox.wrap`); in guarded mode it refuses, before anything
    is written, writable folders that a symlink leads out of ``.trainee/``.
    ``write_config=False`` (dry run) writes nothing and creates no folder.
    """
    mode = _security_mode(spec, security_mode)
    resolve_params(spec, params)
    # everything that can refuse runs before anything is written
    if spec.advanced.shell_command is not None:
        text = build_shell_text(spec, rnd, params)
        argv: tuple[str, ...] = ("/bin/sh", "-c", text)
        display = text
    else:
        argv = tuple(build_argv(spec, rnd, params))
        display = shell_display(argv)
    if mode == SecurityMode.GUARDED:
        sandbox.writable_paths(rnd, create=write_config)
    config = round_config_path(spec, rnd) if spec.baseline_config is not None else None
    if write_config:
        rnd.outputs.mkdir(parents=True, exist_ok=True)
        config = write_round_config(spec, rnd, params)
    env = build_env(spec, rnd, base_env, create=write_config)
    cwd = job_cwd(spec, rnd, mode)
    if cwd != spec.working_dir:
        if spec.advanced.shell_command is None:
            argv = tuple(from_scratch(spec, list(argv)))
            display = shell_display(argv)
        if write_config:
            make_scratch_cwd(spec, Path(cwd))
    return RenderedRound(
        argv=argv,
        env=env,
        cwd=cwd,
        config_path=str(config) if config is not None else None,
        display=display,
    )


_NOT_LINKED = frozenset({".trainee"})


def job_cwd(spec: ProjectSpec, rnd: RoundLayout, mode: SecurityMode | str | None = None) -> str:
    """The folder the round's job runs in: its scratch folder, or the working folder."""
    guarded = _security_mode(spec, mode) == SecurityMode.GUARDED
    if uses_scratch_cwd(spec.advanced, spec.project_root, guarded=guarded):
        return str(rnd.dir / SCRATCH_CWD)
    return spec.working_dir


def relative_base(
    spec: ProjectSpec, rnd: RoundLayout, mode: SecurityMode | str | None = None
) -> str:
    """Where the round's relative metric, log and signal paths start: the scratch folder
    the job writes in, else the project root (as they always did)."""
    cwd = job_cwd(spec, rnd, mode)
    return spec.project_root if cwd == spec.working_dir else cwd


def from_scratch(spec: ProjectSpec, argv: list[str]) -> list[str]:
    """``argv`` as it works from a scratch folder: the command's scripts of the project
    by their real path (so ``__file__`` and ``sys.path[0]`` are the project's, and
    ``dirname(__file__)/..`` too), every ``../`` path taken from the working folder, and
    ``uv run`` told its project."""
    work = os.path.realpath(spec.working_dir)
    end = len(command_prefix(spec))
    start = end - len(spec.launch.command or ())
    out: list[str] = []
    for i, token in enumerate(argv):
        flag, eq, value = token.partition("=") if token.startswith("-") else ("", "", token)
        if flag and not eq:
            out.append(token)  # a bare option
            continue
        if value == ".." or value.startswith("../"):
            value = os.path.normpath(os.path.join(work, value))
        elif (
            start <= i < end
            and not os.path.isabs(value)
            and os.path.isfile(os.path.join(work, value))
        ):
            value = os.path.join(work, value)
        out.append(f"{flag}={value}" if eq else value)
    if out[:2] == ["uv", "run"]:
        out[2:2] = ["--project", work]
    return out


def make_scratch_cwd(spec: ProjectSpec, folder: Path) -> None:
    """Fill ``folder`` with a link to each entry of the working folder (its real path,
    as the sandbox binds it), but trainee's own ``.trainee``. Entries already there (a
    round run again, or the job's own files) are left as they are."""
    folder.mkdir(parents=True, exist_ok=True)
    source = os.path.realpath(spec.working_dir)
    with os.scandir(source) as entries:
        names = sorted(e.name for e in entries if e.name not in _NOT_LINKED)
    for name in names:
        link = folder / name
        if link.is_symlink() or link.exists():
            continue
        os.symlink(os.path.join(source, name), link)


def _security_mode(spec: ProjectSpec, mode: SecurityMode | str | None) -> SecurityMode:
    if mode is None:
        return SecurityMode(spec.advanced.security_mode)
    try:
        return SecurityMode(mode)
    except ValueError:
        allowed = ", ".join(m.value for m in SecurityMode)
        raise InvalidParams(
            f"unknown security mode {mode!r}; expected one of: {allowed}",
            {"field": "security_mode", "value": str(mode)},
        ) from None


# -- argv ----------------------------------------------------------------------------------


def round_values(spec: ProjectSpec, rnd: RoundLayout) -> dict[str, str]:
    """The values of the ``{...}`` variables for this round (unquoted), by name."""
    where = rnd.placeholders()
    return {
        "project_root": where["project_root"],
        "working_dir": spec.working_dir,
        "trainee_dir": where["trainee_dir"],
        "session_id": where["session_id"],
        "round_index": where["round_index"],
        "session_dir": where["session_dir"],
        "round_dir": where["round_dir"],
        "outputs_dir": where["outputs_dir"],
        "config_path": str(round_config_path(spec, rnd)),
    }


def _filled(value: Value | None, values: Mapping[str, str]) -> Value | None:
    return expand(value, values) if isinstance(value, str) else value


def build_extra_args(spec: ProjectSpec, rnd: RoundLayout, params: ParamValues) -> list[str]:
    """Argument groups 1-5, in order, without the command."""
    values = resolve_params(spec, params)
    where = round_values(spec, rnd)
    style = spec.launch.arg_style
    hydra = ConfigStyle(spec.launch.config_style) == ConfigStyle.HYDRA
    out: list[str] = []
    if spec.baseline_config is not None:
        config = round_config_path(spec, rnd)
        if hydra:
            # the round's copy is the primary config; the baseline's own folder stays
            # searchable so its defaults list finds the config groups
            out += render_arg("--config-path", str(config.parent), style)
            out += render_arg("--config-name", config.stem, style)
            out += render_arg("--config-dir", str(Path(spec.baseline_config).parent), style)
        else:
            out += render_arg(spec.launch.config_flag, str(config), style)
    given: set[str] = set()
    for arg in spec.launch.args:
        out += render_arg(arg.flag, _filled(arg.value, where), style)
        given.add(arg.flag.lstrip("+~"))
    for item in spec.data:
        if item.flag:
            path = os.path.normpath(os.path.join(spec.project_root, expand(item.path, where)))
            out += render_arg(item.flag, path, style)
    for arg in spec.run.fixed_args:
        out += render_arg(arg.flag, _filled(arg.value, where), style)
        given.add(arg.flag.lstrip("+~"))
    outputs = where["outputs_dir"]
    if spec.output.flag is not None:
        out += render_arg(spec.output.flag, outputs, style)
        given.add(spec.output.flag.lstrip("+~"))
    if hydra:
        # Hydra's own output folder would land in the read-only project (or vanish in
        # the sandbox's private /tmp): the round's outputs/, unless the user set it
        for key in HYDRA_OUTPUT_KEYS:
            if key not in given:
                out += render_arg(key, outputs, style)
    for tunable in spec.tunables:
        if tunable.source in (ParamSource.FLAG, ParamSource.OVERRIDE):
            try:
                out += render_param(tunable, values[tunable.name], style)
            except (TypeError, ValueError) as exc:
                raise InvalidParams(
                    f"param '{tunable.name}': {exc}", {"param": tunable.name}
                ) from None
    return out


def build_argv(spec: ProjectSpec, rnd: RoundLayout, params: ParamValues) -> list[str]:
    """``launch.command`` with the environment's prefix, then argument groups 1-5."""
    return [*command_prefix(spec), *build_extra_args(spec, rnd, params)]


def command_prefix(spec: ProjectSpec) -> list[str]:
    """``launch.command`` wrapped for ``launch.environment``."""
    if spec.launch.command is None:
        raise LaunchError(
            "launch.command is not set (advanced.shell_command runs the round instead)",
            {"field": "launch.command"},
        )
    command = list(spec.launch.command)
    env = Environment(spec.launch.environment)
    if env == Environment.UV:
        return ["uv", "run", *command]
    if env == Environment.CONDA:
        if not spec.launch.env_name:
            raise LaunchError("launch.environment is conda but launch.env_name is not set")
        # --no-capture-output: conda run would otherwise hold the job's output until
        # it exits; trainee tails it live.
        return ["conda", "run", "--no-capture-output", "-n", spec.launch.env_name, *command]
    if env == Environment.VENV:
        bindir = Path(spec.project_root) / ".venv" / "bin"
        if command[0] in _PYTHONS:
            python = bindir / "python"
            if not os.path.exists(python):
                raise LaunchError(
                    f"launch.environment is venv but {python} does not exist; create the "
                    "virtualenv (python -m venv .venv) or set launch.environment: system",
                    {"field": "launch.environment", "path": str(python)},
                )
            return [str(python), *command[1:]]
        if "/" not in command[0] and os.path.exists(bindir / command[0]):
            return [str(bindir / command[0]), *command[1:]]
    return command


# -- shell command -----------------------------------------------------------------------


def shell_values(spec: ProjectSpec, rnd: RoundLayout, params: ParamValues) -> dict[str, str]:
    """The template variables of ``advanced.shell_command``, each shell-quoted."""
    values = {name: shlex.quote(value) for name, value in round_values(spec, rnd).items()}
    values["extra_args"] = shlex.join(build_extra_args(spec, rnd, params))
    return values


def build_shell_text(spec: ProjectSpec, rnd: RoundLayout, params: ParamValues) -> str:
    """``advanced.shell_command`` with its ``{variables}`` filled in (shell-quoted);
    any other ``{...}`` and every ``${...}`` are left as written."""
    template = spec.advanced.shell_command
    if template is None:
        raise LaunchError("advanced.shell_command is not set")
    return expand(template, shell_values(spec, rnd, params))


# -- environment -------------------------------------------------------------------------


def build_env(
    spec: ProjectSpec, rnd: RoundLayout, base_env: Mapping[str, str], *, create: bool = True
) -> dict[str, str]:
    """The child's environment: ``base_env`` (PATH and all) filtered by :func:`job_environ`
    (no secrets unless passed through), plus PYTHONUNBUFFERED=1, the round's
    ``TRAINEE_*``, the cache variables redirected into ``.trainee/cache/`` (created)
    and, last, ``launch.env``."""
    env = job_environ(base_env, spec.launch.env_passthrough)
    where = rnd.placeholders()
    env["PYTHONUNBUFFERED"] = "1"
    env["TRAINEE_SESSION_ID"] = where["session_id"]
    env["TRAINEE_ROUND_INDEX"] = where["round_index"]
    env["TRAINEE_SESSION_DIR"] = where["session_dir"]
    env["TRAINEE_ROUND_DIR"] = where["round_dir"]
    env["TRAINEE_CONFIG_PATH"] = str(round_config_path(spec, rnd))
    for var, path in rnd.session.project.cache_dirs().items():
        if create:
            path.mkdir(parents=True, exist_ok=True)
        env[var] = str(path)
    env.update(launch_env(spec, rnd))  # the project's own variables win
    return env


def env_value(value: Value) -> str:
    """A ``launch.env`` value as text: ``true``/``false`` as YAML writes them, numbers
    as written (``1``, ``0.5``), strings unchanged."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def launch_env(spec: ProjectSpec, rnd: RoundLayout) -> dict[str, str]:
    """``launch.env`` for this round, its ``{...}`` variables filled in."""
    if not spec.launch.env:
        return {}
    where = round_values(spec, rnd)
    return {name: expand(env_value(value), where) for name, value in spec.launch.env.items()}


# -- display -------------------------------------------------------------------------------


def shell_display(argv: Sequence[str]) -> str:
    """A shell line that runs ``argv`` when pasted."""
    return shlex.join(argv)


def config_diff(baseline: Path, round_config: Path, *, text: str | None = None) -> str:
    """A unified diff of the round config against the baseline (empty when equal).

    ``text`` is the round config's text when it was not written (a dry run: see
    :func:`trainee.launch.roundconfig.round_config_text`); ``round_config`` labels it.
    """
    old = baseline.read_text(encoding="utf-8").splitlines(keepends=True)
    if text is None:
        text = round_config.read_text(encoding="utf-8")
    new = text.splitlines(keepends=True)
    out: list[str] = []
    for line in difflib.unified_diff(old, new, fromfile=str(baseline), tofile=str(round_config)):
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)
