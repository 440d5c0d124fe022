"""Project setup methods: init, prepare, tunables, doctor, dry run, register, get, context."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import anyio
import msgspec

from trainee.api import resolve
from trainee.api.context import CallContext
from trainee.api.methods import registry
from trainee.atomic import write_atomic
from trainee.discovery.init import InitResult, PrepareResult, init_project, prepare_project
from trainee.discovery.tunables import TunablesResult, discover_tunables
from trainee.errors import ConfigError, InvalidParams, InvalidState
from trainee.integrations.config import masked_integrations, restore_masked
from trainee.launch.layout import ProjectLayout
from trainee.launch.render import config_diff, render_round
from trainee.launch.sandbox import check_bwrap
from trainee.session.doctor import DoctorReport, run_doctor
from trainee.spec import (
    ProjectFileSpec,
    ProjectSpec,
    SecurityMode,
    TuningFileSpec,
    check_project,
    load_project,
    load_project_file,
    save_project_files,
)
from trainee.spec import wire as w
from trainee.spec.files import IntegrationsSpec
from trainee.store.records import SessionRecord


def project_policy(root: str) -> str:
    """The project's ``decision.policy`` (``llm`` when project.yaml is missing or invalid:
    the setup commands report that file's problems themselves)."""
    try:
        return str(load_project_file(Path(root) / ".trainee" / "project.yaml").decision.policy)
    except (ConfigError, OSError):
        return "llm"


async def _provider_test(
    ctx: CallContext, skip: bool, env: dict[str, str] | None, policy: str
) -> dict[str, Any]:
    """The provider's live test as init and prepare report it: ``needed`` says whether
    the project's policy asks a provider (a failed test then fails the command)."""
    from trainee.llm.client import provider_test

    return await provider_test(env or dict(os.environ), policy=policy, skip=skip)


class InitOutput(msgspec.Struct, kw_only=True):
    init: InitResult
    provider_test: dict[str, Any]


@registry.method(w.ProjectInitParams, InitOutput)
async def project_init(ctx: CallContext, params: w.ProjectInitParams) -> InitOutput:
    """Create the .trainee/ files of a project (non-destructive unless ``force``).

    Writes project.yaml (from static discovery: entrypoint or the given
    ``command``, environment, output flag, fixed limit flags), an empty
    tuning.yaml, context.md, README.md (what was detected and why), logs/,
    runs/, artifacts/ and a .gitignore. Existing files are kept and reported as
    kept; with ``force`` project.yaml is regenerated but fields the user
    changed are kept (``kept_fields``) or listed with a backup (``replaced_fields``).
    ``provider_test`` is the live test of the LLM provider when the project's decision
    policy needs one (``needed``).
    """
    root = resolve.project_root(ctx, params.project_root)
    result = await anyio.to_thread.run_sync(
        lambda: init_project(
            root,
            baseline_config=params.baseline_config,
            force=params.force,
            command=params.command,
            env=params.env,
        )
    )
    policy = await anyio.to_thread.run_sync(project_policy, root)
    return InitOutput(
        init=result,
        provider_test=await _provider_test(ctx, params.skip_provider_test, params.env, policy),
    )


class PrepareOutput(msgspec.Struct, kw_only=True):
    prepare: PrepareResult
    provider_test: dict[str, Any]


@registry.method(w.ProjectPrepareParams, PrepareOutput)
async def project_prepare(ctx: CallContext, params: w.ProjectPrepareParams) -> PrepareOutput:
    """Validate a project and fill an empty tuning.yaml from discovery; write context.md if missing.

    Never lists output.config_path, launch.args, run.fixed_args or data flags.
    ``replace`` regenerates tuning.yaml and context.md. Review the result.
    """
    root = resolve.project_root(ctx, params.project_root)
    result = await anyio.to_thread.run_sync(lambda: prepare_project(root, replace=params.replace))
    policy = await anyio.to_thread.run_sync(project_policy, root)
    return PrepareOutput(
        prepare=result,
        provider_test=await _provider_test(ctx, params.skip_provider_test, params.env, policy),
    )


@registry.method(w.TunablesDiscoverParams, TunablesResult)
async def tunables_discover(ctx: CallContext, params: w.TunablesDiscoverParams) -> TunablesResult:
    """Suggest tunable parameters with the reason for each; ``apply`` writes them to tuning.yaml.

    Suggestions come from the baseline config and the entrypoint's options,
    ranked by hyperparameter names, with bounds from the value's magnitude.
    """
    root = resolve.project_root(ctx, params.project_root)
    return await anyio.to_thread.run_sync(
        lambda: discover_tunables(
            root, limit=params.limit, apply=params.apply, replace=params.replace
        )
    )


@registry.method(w.DoctorParams, DoctorReport)
async def project_doctor(ctx: CallContext, params: w.DoctorParams) -> DoctorReport:
    """Check that a project is ready to run: one row per check, each pass / warn / fail with a fix.

    Config, data paths, environment, launcher, sandbox, paths inside
    .trainee/, output.config_path, the provider live test (only for the policies that
    need one: ``policy``, default decision.policy), and each metric spec tried on the
    last round log when there is one, read as the runtime reads it.
    """
    root = resolve.project_root(ctx, params.project_root)
    env = params.env if params.env is not None else dict(os.environ)
    return await run_doctor(
        root, env=env, skip_provider_test=params.skip_provider_test, policy=params.policy
    )


class DryRunResult(msgspec.Struct, kw_only=True):
    project_root: str
    session: str
    """The id the next session would get (``session-0003`` once two exist)."""
    round: int
    """The round shown: the next session's baseline, round 1."""
    security_mode: str
    command: str
    argv: list[str]
    cwd: str
    config_path: str | None
    config_diff: str
    env: dict[str, str]


@registry.method(w.DryRunParams, DryRunResult)
async def loop_dry_run(ctx: CallContext, params: w.DryRunParams) -> DryRunResult:
    """Preflight, then the exact baseline command and the round config diff; starts nothing.

    Shows the session and round numbers (and so the paths and TRAINEE_* values) the
    next session would really get. Creates no runtime database and no round folder:
    the round config is rendered to a temporary file only to show its diff.
    """
    root = resolve.project_root(ctx, params.project_root)
    spec = await anyio.to_thread.run_sync(load_project, root)
    session = await _next_session_index(ctx, root)
    mode = params.security_mode or str(spec.advanced.security_mode)
    if mode not in ("guarded", "unsafe"):
        raise InvalidParams(
            f"security_mode must be guarded or unsafe, got {mode!r}", {"field": "security_mode"}
        )
    if mode == SecurityMode.GUARDED:
        await anyio.to_thread.run_sync(check_bwrap)
    env = params.env or dict(os.environ)
    return await anyio.to_thread.run_sync(lambda: _dry_run(spec, mode, env, session))


async def _next_session_index(ctx: CallContext, root: str) -> int:
    """The index ``loop_start`` would give the next session, read from the same store;
    1 while the project has no runtime database (none is created to find out)."""
    if not ProjectLayout.for_root(root).database.exists():
        return 1
    store = await resolve.project_store(ctx, root)
    assert store is not None
    return await store.next_session_index()


def _dry_run(spec: ProjectSpec, mode: str, env: dict[str, str], session: int) -> DryRunResult:
    import tempfile

    from trainee.launch.layout import ProjectLayout as _PL

    baseline = {t.name: t.baseline for t in spec.tunables}
    # Render against a throwaway copy of the layout so nothing is created in the project.
    with tempfile.TemporaryDirectory(prefix="trainee-dry-") as tmp:
        real = ProjectLayout.for_root(spec.project_root, env)
        rnd = real.session(session).round(1)
        shown = render_round(
            spec, rnd, baseline, base_env=env, security_mode=mode, write_config=False
        )
        diff = ""
        if spec.baseline_config:
            scratch = _PL(Path(spec.project_root), Path(tmp) / ".trainee", Path(tmp) / ".trainee")
            scratch_rnd = scratch.session(session).round(1)
            from trainee.launch.roundconfig import write_round_config

            written = write_round_config(spec, scratch_rnd, baseline)
            if written is not None:
                text = config_diff(Path(spec.baseline_config), written)
                diff = text.replace(str(scratch_rnd.dir), str(rnd.dir))
    visible_env = {
        k: v
        for k, v in shown.env.items()
        if k.startswith("TRAINEE_") or k in _SHOWN_ENV or k in spec.launch.env
    }
    return DryRunResult(
        project_root=spec.project_root,
        session=rnd.session.id,
        round=rnd.index,
        security_mode=mode,
        command=shown.display,
        argv=list(shown.argv),
        cwd=shown.cwd,
        config_path=shown.config_path,
        config_diff=diff,
        env=visible_env,
    )


_SHOWN_ENV = {
    "PYTHONUNBUFFERED",
    "HOME",
    "XDG_CACHE_HOME",
    "HF_HOME",
    "TORCH_HOME",
    "MPLCONFIGDIR",
    "WANDB_DIR",
}


class ProjectGetResult(msgspec.Struct, kw_only=True):
    project_root: str
    project: dict[str, Any]
    tuning: dict[str, Any]
    tunables: list[dict[str, Any]]
    baseline_config: str | None


@registry.method(w.ProjectRootParams, ProjectGetResult)
async def project_get(ctx: CallContext, params: w.ProjectRootParams) -> ProjectGetResult:
    """Return a project's configuration as loaded and checked (project.yaml, tuning.yaml, tunables).

    Each tunable carries its resolved baseline value (config-backed params read
    it from the baseline config).
    """
    root = resolve.project_root(ctx, params.project_root)
    spec = await anyio.to_thread.run_sync(load_project, root)
    return ProjectGetResult(
        project_root=spec.project_root,
        project=_masked(msgspec.to_builtins(spec.to_project_file())),
        tuning=msgspec.to_builtins(spec.to_tuning_file()),
        tunables=[
            {k: v for k, v in msgspec.to_builtins(t).items() if k != "param"} for t in spec.tunables
        ],
        baseline_config=spec.baseline_config,
    )


def _masked(project: dict[str, Any]) -> dict[str, Any]:
    """project.yaml as plain data with the integrations' secrets masked."""
    if isinstance(project.get("integrations"), dict):
        project["integrations"] = masked_integrations(project["integrations"])
    return project


def _saved_integrations(root: str) -> IntegrationsSpec:
    try:
        return load_project_file(Path(root) / ".trainee" / "project.yaml").integrations
    except ConfigError:
        return IntegrationsSpec()


@registry.method(w.ProjectRegisterParams, ProjectGetResult)
async def project_register(ctx: CallContext, params: w.ProjectRegisterParams) -> ProjectGetResult:
    """Write normalized project.yaml and tuning.yaml for a project, keeping the user's comments.

    Takes the project.yaml fields at top level plus ``tuning`` (the tuning.yaml
    content) and ``project_root``. Everything is validated first; on any error
    nothing is written.
    """
    root = resolve.project_root(ctx, params.project_root)
    raw = msgspec.to_builtins(params)
    tuning_raw = raw.pop("tuning") or {}
    raw.pop("project_root")
    if raw.get("integrations"):
        # a masked URL sent back (the page saves what project_get showed) keeps the saved one
        saved = await anyio.to_thread.run_sync(_saved_integrations, root)
        raw["integrations"] = restore_masked(raw["integrations"], saved)
    try:
        project = msgspec.convert(raw, ProjectFileSpec)
        tuning = msgspec.convert(tuning_raw or {"version": 1}, TuningFileSpec)
    except msgspec.ValidationError as exc:
        raise ConfigError(
            f"project_register: {exc}", field=_path_of(str(exc)), reason=str(exc)
        ) from None

    def write() -> None:
        check_project(root, project, tuning)
        (Path(root) / ".trainee").mkdir(exist_ok=True)
        save_project_files(root, project, tuning)

    await anyio.to_thread.run_sync(write)
    return await project_get(ctx, w.ProjectRootParams(project_root=root))


def _path_of(message: str) -> str | None:
    marker = "at `$."
    if marker in message:
        return message.split(marker, 1)[1].rstrip("`")
    return None


class ContextResult(msgspec.Struct, kw_only=True):
    path: str
    content: str


@registry.method(w.ProjectUpdateContextParams, ContextResult)
async def project_update_context(
    ctx: CallContext, params: w.ProjectUpdateContextParams
) -> ContextResult:
    """Replace (or ``append`` to) a project's .trainee/context.md; returns the new content.

    This file is part of every decision prompt: what the project is, what
    matters, what must not change.
    """
    root = resolve.project_root(ctx, params.project_root)
    path = Path(root) / ".trainee" / "context.md"
    if not path.parent.is_dir():
        raise InvalidParams(
            f"{path.parent} does not exist: run trainee init first", {"field": "project_root"}
        )
    if len(params.content) > 256 * 1024:
        raise InvalidParams("context.md content is limited to 256 KiB", {"field": "content"})

    def write() -> str:
        current = path.read_text() if path.exists() and params.append else ""
        text = current + ("\n" if current and not current.endswith("\n") else "") + params.content
        write_atomic(path, text)
        return text

    content = await anyio.to_thread.run_sync(write)
    return ContextResult(path=str(path), content=content)


class KnownProject(w.Wire):
    """A project the daemon knows. ``running``: the ids of its running sessions."""

    root: str
    name: str
    bound: bool
    """The project the daemon is bound to (``trainee serve PROJECT``)."""
    exists: bool
    configured: bool
    """It has a .trainee/project.yaml."""
    running: list[str]


class ProjectsListResult(w.Wire):
    bound: str | None
    projects: list[KnownProject]


@registry.method(w.NoParams, ProjectsListResult)
async def projects_list(ctx: CallContext, params: w.NoParams) -> ProjectsListResult:
    """List the projects the daemon knows: the bound one, those added or run in, running ones.

    Each with its name, whether it exists and is configured, and its running sessions.
    The daemon's one list of projects (``projects.json`` in its state folder): the web
    page shows it and changes it with ``projects_add`` and ``projects_remove``.
    """
    manager = resolve.manager_of(ctx)
    running = manager.running_sessions()
    bound = _bound(ctx)
    roots: list[str] = []
    for root in [bound, *manager.known_projects(), *(r.project_root for r in running)]:
        if root and root not in roots:
            roots.append(root)
    return ProjectsListResult(
        bound=bound, projects=[_known_project(root, bound, running) for root in roots]
    )


def _bound(ctx: CallContext) -> str | None:
    return str(ctx.services.project_root) if ctx.services.project_root else None


def _known_project(root: str, bound: str | None, running: list[SessionRecord]) -> KnownProject:
    return KnownProject(
        root=root,
        name=os.path.basename(root.rstrip("/")) or root,
        bound=root == bound,
        exists=os.path.isdir(root),
        configured=os.path.isfile(os.path.join(root, ".trainee", "project.yaml")),
        running=[r.id for r in running if r.project_root == root],
    )


class ProjectsAddParams(w.Wire):
    project_root: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]


class ProjectsAddResult(w.Wire):
    project: KnownProject
    """As ``projects_list`` shows it (``root``: the folder's real path)."""
    added: bool
    """False when the daemon knew it already."""


MAX_KNOWN_PROJECTS = 1000
"""How many projects ``projects_add`` lets the daemon list (a session start always adds
its own)."""


@registry.method(ProjectsAddParams, ProjectsAddResult)
async def projects_add(ctx: CallContext, params: ProjectsAddParams) -> ProjectsAddResult:
    """Add a project folder to the daemon's list of known projects (``projects_list``).

    The folder must exist (an absolute path; it need not be configured yet: register
    it with ``project_register`` or ``project_init``). Adding a known one changes nothing.
    """
    root = resolve.project_root(ctx, params.project_root)
    manager = resolve.manager_of(ctx)
    # on the event loop, as a session start's: no lost update
    added = manager.remember(root, limit=MAX_KNOWN_PROJECTS)
    project = _known_project(root, _bound(ctx), manager.running_sessions())
    return ProjectsAddResult(project=project, added=added)


class ProjectsRemoveResult(w.Wire):
    removed: bool
    """False when it was not in the list (nothing changed)."""
    message: str


@registry.method(ProjectsAddParams, ProjectsRemoveResult)
async def projects_remove(ctx: CallContext, params: ProjectsAddParams) -> ProjectsRemoveResult:
    """Take a project off the daemon's list of known projects; its files stay as they are.

    The daemon's bound project and one with a running session stay listed: removing
    them is InvalidState. A folder that is gone can be removed; one not in the list is
    no error (``removed`` false).
    """
    given = params.project_root
    if not os.path.isabs(given):
        raise InvalidParams(
            f"project_root must be an absolute path, got {given!r}",
            {"field": "project_root", "reason": "not absolute"},
        )
    manager = resolve.manager_of(ctx)
    known = manager.known_projects()
    root = given if given in known else os.path.realpath(given)
    if root == _bound(ctx):
        raise InvalidState(
            f"{root} is the project the daemon is bound to: it stays listed",
            {"project_root": root, "reason": "bound"},
        )
    running = [r.id for r in manager.running_sessions() if r.project_root == root]
    if running:
        raise InvalidState(
            f"{root} has a running session ({', '.join(running)}): stop it first",
            {"project_root": root, "reason": "a session runs", "sessions": running},
        )
    removed = manager.forget(root)
    message = f"removed {root} from the known projects" if removed else f"{root} was not listed"
    return ProjectsRemoveResult(removed=removed, message=message)
