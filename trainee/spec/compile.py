"""Cross-field checks over project.yaml + tuning.yaml, compiled into one frozen ProjectSpec.

Schema rules live in :mod:`trainee.spec.files`; here are the rules that span fields,
files or the disk: paths stay inside the project (no ``..``, no symlink escapes),
referenced files exist, regexes have a value group, tunables are consistent with
the baseline config. The first violation raises a ConfigError naming file, line,
field and reason. ruamel is imported only when a file is actually read.
"""

from __future__ import annotations

import enum
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, TypeVar, cast

import msgspec

from trainee.errors import ConfigError
from trainee.spec.constraints import Constraint, parse_constraint, unknown_name_reason
from trainee.spec.files import (
    BUILTIN_METRICS,
    SCRATCH_CWD,
    AdvancedSpec,
    ConfigStyle,
    DataSpec,
    DecisionSpec,
    FieldPath,
    HalvingRule,
    IntegrationsSpec,
    LaunchSpec,
    LineMap,
    LlmBudgetSpec,
    MetricSource,
    MetricsSpec,
    OutputSpec,
    ParamSpec,
    ParamType,
    PatienceRule,
    ProjectFileSpec,
    RunSpec,
    SecurityMode,
    SignalType,
    ThresholdRule,
    TuningFileSpec,
    Value,
    config_error,
    decode_file,
    job_path_base,
    line_of,
    uses_scratch_cwd,
)
from trainee.spec.integrations import notify_url_problem, tracking_uri_problem
from trainee.spec.placeholders import placeholders_in
from trainee.spec.regexcheck import check_pattern
from trainee.spec.screencheck import check_screen

__all__ = [
    "HYDRA_CONFIG_FLAGS",
    "HYDRA_OUTPUT_KEYS",
    "PATH_PLACEHOLDERS",
    "ParamSource",
    "ProjectSpec",
    "Source",
    "TunableSpec",
    "check_project",
    "compile_project",
    "load_project",
    "load_project_file",
    "load_tuning_file",
]

PATH_PLACEHOLDERS: dict[str, str] = {
    "trainee_dir": ".trainee",
    "session_dir": ".trainee/artifacts/session-0001",
    "round_dir": ".trainee/runs/session-0001/round-0001",
    "outputs_dir": ".trainee/runs/session-0001/round-0001/outputs",
}
"""Placeholders allowed in log/signal/metric paths, with the representative values
(relative to the project root) used to check where they point."""


_REGEX_SOURCES = (MetricSource.STDOUT_REGEX, MetricSource.LOG_REGEX, MetricSource.LOG_FILE_REGEX)
_PATH_SOURCES = (
    MetricSource.LOG_FILE_REGEX,
    MetricSource.JSONL,
    MetricSource.TENSORBOARD,
    MetricSource.CSV,
)
_NAME_SOURCES = (MetricSource.TENSORBOARD, MetricSource.CSV)
"""Sources whose key is a tag or column name (any text on one line)."""
_FILE_SIGNALS = (SignalType.LOG_FILE_MTIME, SignalType.HEARTBEAT_FILE)
_GLOB = re.compile(r"[*?\[]")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFAULT_CONFIG_FLAG = "--config"

HYDRA_CONFIG_FLAGS: tuple[str, ...] = ("--config-path", "--config-name", "--config-dir")
"""The flags of a ``@hydra.main`` app that pass the round config (config_style hydra)."""

HYDRA_OUTPUT_KEYS: tuple[str, ...] = ("hydra.run.dir", "hydra.sweep.dir")
"""Hydra's output folders, set to the round's ``outputs/`` (config_style hydra)."""

_T = TypeVar("_T", bound=msgspec.Struct)


class ParamSource(enum.StrEnum):
    """How a tunable reaches the training program."""

    FLAG = "flag"
    CONFIG_PATH = "config_path"
    OVERRIDE = "override"


class TunableSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One tuning.yaml param after checks: its source kind and resolved baseline value.

    ``baseline`` is the value in the baseline config (config-backed), else the
    param's ``default``, else ``None`` (the training script's own default applies).
    Numbers are normalized to the param's type (``float`` params hold floats).
    """

    name: str
    type: ParamType
    source: ParamSource
    key: str
    baseline: Value | None
    min_value: int | float | None
    max_value: int | float | None
    choices: tuple[Value, ...] | None
    log: bool
    description: str
    param: ParamSpec


class ProjectSpec(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a session needs from the two files, checked and immutable.

    Paths are absolute: ``project_root`` and ``trainee_dir`` resolved,
    ``baseline_config`` resolved (or None), ``working_dir`` resolved.
    """

    project_root: str
    trainee_dir: str
    project_file: str
    tuning_file: str
    baseline_config: str | None
    working_dir: str
    version: int
    data: tuple[DataSpec, ...]
    launch: LaunchSpec
    run: RunSpec
    output: OutputSpec
    metrics: MetricsSpec
    advanced: AdvancedSpec
    llm: LlmBudgetSpec
    decision: DecisionSpec
    tunables: tuple[TunableSpec, ...]
    constraints: tuple[Constraint, ...] = ()
    """tuning.yaml's constraints, parsed, with the fixed values they name bound."""
    integrations: IntegrationsSpec = IntegrationsSpec()

    @property
    def root_path(self) -> Path:
        return Path(self.project_root)

    @property
    def trainee_path(self) -> Path:
        return Path(self.trainee_dir)

    def tunable(self, name: str) -> TunableSpec | None:
        return next((t for t in self.tunables if t.name == name), None)

    def to_project_file(self) -> ProjectFileSpec:
        """The project.yaml Struct this spec was compiled from."""
        return ProjectFileSpec(
            version=1,
            data=self.data,
            launch=self.launch,
            run=self.run,
            output=self.output,
            metrics=self.metrics,
            advanced=self.advanced,
            llm=self.llm,
            decision=self.decision,
            integrations=self.integrations,
        )

    def to_tuning_file(self) -> TuningFileSpec:
        """The tuning.yaml Struct this spec was compiled from."""
        return TuningFileSpec(
            version=1,
            params=tuple(t.param for t in self.tunables),
            constraints=tuple(c.text for c in self.constraints),
        )


class Source(NamedTuple):
    """Where a Struct came from, for error messages: file name and key lines (if known)."""

    file: str
    lines: LineMap | None = None


# -- public entry points ----------------------------------------------------------------


def load_project_file(path: Path | str) -> ProjectFileSpec:
    """Read and schema-check one project.yaml (no cross-field checks)."""
    return _load(Path(path), ProjectFileSpec)[0]


def load_tuning_file(path: Path | str) -> TuningFileSpec:
    """Read and schema-check one tuning.yaml (no cross-field checks)."""
    return _load(Path(path), TuningFileSpec)[0]


def load_project(root: Path | str) -> ProjectSpec:
    """Load ``<root>/.trainee/project.yaml`` and ``tuning.yaml`` (missing = no params),
    check everything and return the compiled ProjectSpec."""
    root_path = _resolve_root(root)
    trainee_dir = root_path / ".trainee"
    pfile = trainee_dir / "project.yaml"
    tfile = trainee_dir / "tuning.yaml"
    if not pfile.exists() and not pfile.is_symlink():
        raise config_error(str(pfile), None, "", "not found; run `trainee init` first")
    project, psrc = _load(pfile, ProjectFileSpec)
    if tfile.exists() or tfile.is_symlink():
        tuning, tsrc = _load(tfile, TuningFileSpec)
    else:
        tuning, tsrc = TuningFileSpec(), Source(str(tfile), None)
    return compile_project(root_path, project, tuning, psrc, tsrc)


def check_project(
    root: Path | str, project_file: ProjectFileSpec, tuning_file: TuningFileSpec
) -> ProjectSpec:
    """Cross-field checks on already-parsed files (errors carry no line numbers)."""
    root_path = _resolve_root(root)
    trainee_dir = root_path / ".trainee"
    psrc = Source(str(trainee_dir / "project.yaml"))
    tsrc = Source(str(trainee_dir / "tuning.yaml"))
    # Structs built in code skip msgspec's checks: run them first.
    project = decode_file(
        msgspec.to_builtins(project_file), ProjectFileSpec, file=psrc.file, lines=None
    )
    tuning = decode_file(
        msgspec.to_builtins(tuning_file), TuningFileSpec, file=tsrc.file, lines=None
    )
    return compile_project(root_path, project, tuning, psrc, tsrc)


def compile_project(
    root: Path,
    project: ProjectFileSpec,
    tuning: TuningFileSpec,
    psrc: Source,
    tsrc: Source,
) -> ProjectSpec:
    """Run every cross-field check and build the ProjectSpec (``root`` already resolved)."""
    return _Compiler(root, project, tuning, psrc, tsrc).run()


def _load(path: Path, type_: type[_T]) -> tuple[_T, Source]:
    from trainee.spec.yamlio import load_spec_data

    _, data, lines = load_spec_data(path)
    spec = decode_file(data, type_, file=str(path), lines=lines)
    return spec, Source(str(path), lines)


def _resolve_root(root: Path | str) -> Path:
    try:
        resolved = Path(root).resolve(strict=True)
    except (OSError, RuntimeError, ValueError):
        raise config_error(str(root), None, "", "project root does not exist") from None
    if not resolved.is_dir():
        raise config_error(str(root), None, "", "project root is not a directory")
    return resolved


# -- the checks ---------------------------------------------------------------------------


class _Compiler:
    def __init__(
        self,
        root: Path,
        project: ProjectFileSpec,
        tuning: TuningFileSpec,
        psrc: Source,
        tsrc: Source,
    ) -> None:
        self.root = root
        self.trainee_lexical = root / ".trainee"
        self.trainee = _safe_resolve(self.trainee_lexical) or self.trainee_lexical
        self.project = project
        self.tuning = tuning
        self.psrc = psrc
        self.tsrc = tsrc
        self.baseline_path: Path | None = None
        self._baseline_doc: Any = None

    def fail(self, src: Source, path: FieldPath, reason: str) -> ConfigError:
        return config_error(src.file, line_of(src.lines, path), path, reason)

    def run(self) -> ProjectSpec:
        p = self.project
        self._check_launch()
        self._check_run()
        self._check_gpus()
        working_dir = self._check_working_dir()
        self._check_data()
        self._check_read_only_paths()
        self._check_output()
        self._check_metrics()
        self._check_prune()
        self._check_advanced()
        self._check_integrations()
        tunables = self._check_params()
        self._check_noise(tunables)
        problem = check_screen(self.project, self.tuning)
        if problem is not None:
            raise self.fail(self.psrc, *problem)
        constraints = self._check_constraints(tunables)
        return ProjectSpec(
            project_root=str(self.root),
            trainee_dir=str(self.trainee_lexical),
            project_file=self.psrc.file,
            tuning_file=self.tsrc.file,
            baseline_config=str(self.baseline_path) if self.baseline_path else None,
            working_dir=str(working_dir),
            version=1,
            data=p.data,
            launch=p.launch,
            run=p.run,
            output=p.output,
            metrics=p.metrics,
            advanced=p.advanced,
            llm=p.llm,
            decision=p.decision,
            tunables=tunables,
            constraints=constraints,
            integrations=p.integrations,
        )

    # -- project.yaml -------------------------------------------------------------------

    def _check_launch(self) -> None:
        launch = self.project.launch
        env = str(launch.environment)
        if env == "conda" and not launch.env_name:
            raise self.fail(
                self.psrc, ("launch", "env_name"), "required when launch.environment is conda"
            )
        if env != "conda" and launch.env_name is not None:
            raise self.fail(
                self.psrc,
                ("launch", "env_name"),
                f"only used with environment: conda (environment is {env})",
            )
        if launch.command is None:
            if self.project.advanced.shell_command is None:
                raise self.fail(
                    self.psrc,
                    ("launch", "command"),
                    "missing required field (e.g. command: [python, train.py]); it may be "
                    "left out only when advanced.shell_command is set",
                )
        else:
            for i, c in enumerate(launch.command):
                if "\x00" in c:
                    raise self.fail(self.psrc, ("launch", "command", i), "contains a NUL byte")
        for i, name in enumerate(launch.env_passthrough):
            if name.upper().startswith("TRAINEE_"):
                raise self.fail(
                    self.psrc,
                    ("launch", "env_passthrough", i),
                    f"{name}: TRAINEE_* variables are trainee's own and never passed through",
                )
        for i, arg in enumerate(launch.args):
            self._check_arg(("launch", "args", i, "value"), arg.value)
        for i, item in enumerate(self.project.data):
            self._check_arg(("data", i, "path"), item.path)
        for i, arg in enumerate(self.project.run.fixed_args):
            self._check_arg(("run", "fixed_args", i, "value"), arg.value)
        self._check_env()
        self._check_config_style()
        if launch.baseline_config is not None:
            where = ("launch", "baseline_config")
            self.baseline_path = self._inside(
                self.psrc, where, launch.baseline_config, kind="file", label="the project"
            )
            from trainee.spec.yamlio import YamlDocument

            self._baseline_doc = YamlDocument.load(self.baseline_path)
            hydra = ConfigStyle(launch.config_style) == ConfigStyle.HYDRA
            if hydra and self._baseline_doc.kind != "yaml":
                raise self.fail(
                    self.psrc,
                    where,
                    "config_style hydra needs a YAML primary config (Hydra reads no JSON)",
                )

    def _check_arg(self, where: FieldPath, value: Any) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(self.psrc, where, f"must be a finite number, got {value}")
        if isinstance(value, str) and "\x00" in value:
            raise self.fail(self.psrc, where, "contains a NUL byte")
        if isinstance(value, str) and "extra_args" in placeholders_in(value):
            raise self.fail(
                self.psrc,
                where,
                "{extra_args} is filled in only in advanced.shell_command "
                "(write {{extra_args}} for the literal text)",
            )

    def _check_env(self) -> None:
        for name, value in self.project.launch.env.items():
            where: FieldPath = ("launch", "env", name)
            if not _ENV_NAME.fullmatch(name):
                raise self.fail(
                    self.psrc,
                    where,
                    f"{name!r} is not an environment variable name "
                    "(letters, digits and _, not starting with a digit)",
                )
            if name.startswith("TRAINEE_"):
                raise self.fail(
                    self.psrc,
                    where,
                    f"{name}: the TRAINEE_* variables are set by trainee for each round "
                    "(TRAINEE_ROUND_DIR, TRAINEE_SESSION_DIR, ...); use another name",
                )
            self._check_arg(where, value)

    def _check_config_style(self) -> None:
        launch = self.project.launch
        if launch.config_flag == _DEFAULT_CONFIG_FLAG:
            return
        where = ("launch", "config_flag")
        if ConfigStyle(launch.config_style) == ConfigStyle.HYDRA:
            raise self.fail(
                self.psrc,
                where,
                "not used with config_style hydra (the round config is passed as "
                "--config-path DIR --config-name NAME); remove it",
            )
        if launch.baseline_config is None:
            raise self.fail(
                self.psrc, where, "passes launch.baseline_config, which is not set; remove it"
            )

    def _check_run(self) -> None:
        run = self.project.run
        if not math.isfinite(run.timeout_minutes):
            raise self.fail(
                self.psrc,
                ("run", "timeout_minutes"),
                f"must be a finite number > 0, got {run.timeout_minutes}",
            )

    def _check_gpus(self) -> None:
        """``launch.gpus`` and ``launch.rounds_per_gpu`` (trainee.launch.gpus)."""
        launch, backend = self.project.launch, self.project.advanced.backend.type
        if launch.gpus != "none" and backend != "local":
            raise self.fail(
                self.psrc,
                ("launch", "gpus"),
                f"shares this machine's GPUs among local rounds; a {backend} job gets its "
                "GPUs from advanced.backend.gpus",
            )
        if isinstance(launch.gpus, tuple):
            if not launch.gpus:
                raise self.fail(
                    self.psrc, ("launch", "gpus"), "is an empty list; write none for no GPU"
                )
            twice = sorted({i for i in launch.gpus if launch.gpus.count(i) > 1})
            if twice:
                raise self.fail(
                    self.psrc,
                    ("launch", "gpus"),
                    f"names GPU {twice[0]} twice; use launch.rounds_per_gpu to share a GPU",
                )
        if launch.rounds_per_gpu != 1 and launch.gpus == "none":
            raise self.fail(
                self.psrc,
                ("launch", "rounds_per_gpu"),
                "needs launch.gpus (auto or a list of GPU indices)",
            )

    def _check_working_dir(self) -> Path:
        return self._inside(
            self.psrc,
            ("advanced", "working_dir"),
            self.project.advanced.working_dir,
            kind="dir",
            label="the project",
        )

    def _check_data(self) -> None:
        for i, item in enumerate(self.project.data):
            self._inside(self.psrc, ("data", i, "path"), item.path, kind="any", label="the project")

    def _check_read_only_paths(self) -> None:
        homes = {os.path.realpath(os.path.expanduser("~")), "/home", "/root"}
        for i, raw in enumerate(self.project.advanced.read_only_paths):
            where: FieldPath = ("advanced", "read_only_paths", i)
            real = os.path.realpath(self.root / raw)
            if not os.path.exists(real):
                raise self.fail(self.psrc, where, f"{raw!r} does not exist (resolved: {real})")
            held = [h for h in sorted(homes) if h == real or h.startswith(real.rstrip("/") + "/")]
            if real == "/" or held:
                raise self.fail(
                    self.psrc,
                    where,
                    f"{raw!r} is {real}, which holds {held[0] if held else 'everything'}: "
                    "name the folder the job reads, not one holding a HOME",
                )

    def _check_output(self) -> None:
        self._check_output_flag()
        key = self.project.output.config_path
        if key is None:
            return
        where = ("output", "config_path")
        if self._baseline_doc is None:
            raise self.fail(self.psrc, where, "needs launch.baseline_config to be set")
        if not self._baseline_doc.has(key):
            raise self.fail(
                self.psrc,
                where,
                f"'{key}' not found in the baseline config {self._rel(self.baseline_path)}",
            )
        value = self._baseline_doc.get(key)
        if isinstance(value, dict | list):
            raise self.fail(
                self.psrc,
                where,
                f"'{key}' in {self._rel(self.baseline_path)} is not a single value "
                "(it should hold the output folder)",
            )

    def _check_output_flag(self) -> None:
        flag = self.project.output.flag
        if flag is None:
            return
        key = _strip_override(flag)
        # in config_style hydra, output.flag may name hydra.run.dir: it is passed once
        for other, label in self._constant_flags(with_output=False, with_hydra_outputs=False):
            if _strip_override(other) == key:
                raise self.fail(
                    self.psrc,
                    ("output", "flag"),
                    f"'{flag}' is also set by {label}; give the outputs folder in one place "
                    "(remove it there, or keep it there with the value {outputs_dir} and "
                    "remove output.flag)",
                )

    def _check_metrics(self) -> None:
        seen: set[str] = set()
        for i, m in enumerate(self.project.metrics.specs):
            base: FieldPath = ("metrics", "specs", i)
            if m.name in seen:
                raise self.fail(self.psrc, (*base, "name"), f"duplicate metric name '{m.name}'")
            seen.add(m.name)
            source = MetricSource(m.source)
            if source in _REGEX_SOURCES:
                self._check_regex((*base, "key_or_pattern"), m.key_or_pattern)
            elif source in _NAME_SOURCES:
                what = "a scalar tag" if source == MetricSource.TENSORBOARD else "a column name"
                if not m.key_or_pattern.strip() or not m.key_or_pattern.isprintable():
                    raise self.fail(
                        self.psrc,
                        (*base, "key_or_pattern"),
                        f"must be {what} on one line for source {source}, got {m.key_or_pattern!r}",
                    )
            elif not re.fullmatch(r"[^.\s]+(\.[^.\s]+)*", m.key_or_pattern):
                raise self.fail(
                    self.psrc,
                    (*base, "key_or_pattern"),
                    f"must be a key or dotted path for source {source}, got {m.key_or_pattern!r}",
                )
            if source in _PATH_SOURCES:
                if m.path is None:
                    raise self.fail(self.psrc, (*base, "path"), f"required for source {source}")
                self._runtime_path((*base, "path"), m.path)
            elif source == MetricSource.WANDB_SUMMARY:
                if m.path is not None:
                    self._runtime_path((*base, "path"), m.path)
            elif m.path is not None:
                hint = (
                    " (log_regex reads advanced.log_paths)"
                    if source == MetricSource.LOG_REGEX
                    else ""
                )
                raise self.fail(
                    self.psrc, (*base, "path"), f"not used by source {source}{hint}; remove it"
                )

    def _check_prune(self) -> None:
        prune = self.project.run.prune
        if prune is None:
            return
        specs = self.project.metrics.specs
        names = [m.name for m in specs] if specs else list(BUILTIN_METRICS)
        for i, rule in enumerate(prune.rules):
            base: FieldPath = ("run", "prune", "rules", i)
            if rule.metric is not None and rule.metric not in names:
                known = ", ".join(names)
                where = "metrics.specs" if specs else "the built-in metrics (no metrics.specs)"
                raise self.fail(
                    self.psrc,
                    (*base, "metric"),
                    f"'{rule.metric}' is not a metric of {where}; one of {known}",
                )
            if isinstance(rule, ThresholdRule):
                for key in ("above", "below"):
                    bound = getattr(rule, key)
                    if bound is not None and not math.isfinite(bound):
                        raise self.fail(
                            self.psrc, (*base, key), f"must be a finite number, got {bound}"
                        )
                if rule.above is not None and rule.below is not None and rule.below >= rule.above:
                    raise self.fail(
                        self.psrc,
                        (*base, "below"),
                        f"must be less than above ({rule.above}), got {rule.below}: "
                        "every value would be pruned",
                    )
            elif isinstance(rule, PatienceRule) and not math.isfinite(rule.min_delta):
                raise self.fail(
                    self.psrc,
                    (*base, "min_delta"),
                    f"must be a finite number, got {rule.min_delta}",
                )
            elif isinstance(rule, HalvingRule) and any(
                b <= a for a, b in zip(rule.rungs, rule.rungs[1:], strict=False)
            ):
                raise self.fail(
                    self.psrc,
                    (*base, "rungs"),
                    f"must be increasing steps, got {list(rule.rungs)}",
                )

    def _check_noise(self, tunables: tuple[TunableSpec, ...]) -> None:
        noise = self.project.run.noise
        if noise is None:
            return
        where: FieldPath = ("run", "noise", "seed")
        found = next((t for t in tunables if t.name == noise.seed), None)
        if found is None:
            names = ", ".join(t.name for t in tunables) or "none"
            raise self.fail(
                self.psrc,
                where,
                f"'{noise.seed}' is not a param of tuning.yaml (params: {names}); declare the "
                "seed option there (type int) so its rounds can be repeated on other seeds",
            )
        if found.type != ParamType.INT or not isinstance(found.baseline, int):
            raise self.fail(
                self.psrc,
                where,
                f"the param '{noise.seed}' must be of type int with a default (the baseline's "
                f"seed), got type {found.type} default {found.baseline!r}",
            )
        last = found.baseline + noise.repeats - 1
        if found.max_value is not None and last > found.max_value:
            raise self.fail(
                self.psrc,
                ("run", "noise", "repeats"),
                f"{noise.repeats} seeds from the baseline's {found.baseline} need '{noise.seed}' "
                f"up to {last}, above its max_value {found.max_value}",
            )

    def _check_regex(self, where: FieldPath, pattern: str) -> None:
        try:
            compiled = re.compile(pattern)
        except (re.error, OverflowError, RecursionError, ValueError) as exc:
            raise self.fail(self.psrc, where, f"invalid regex: {exc}") from None
        if "value" not in compiled.groupindex and compiled.groups < 1:
            raise self.fail(
                self.psrc,
                where,
                "the regex needs a named group (?P<value>...) or at least one capture group",
            )
        problem = check_pattern(pattern)
        if problem is not None:
            raise self.fail(self.psrc, where, problem)

    def _check_advanced(self) -> None:
        adv = self.project.advanced
        if not math.isfinite(adv.heartbeat_interval_sec):
            raise self.fail(
                self.psrc, ("advanced", "heartbeat_interval_sec"), "must be a finite number > 0"
            )
        for i, sig in enumerate(adv.signal_sources):
            base: FieldPath = ("advanced", "signal_sources", i)
            kind = SignalType(sig.type)
            if kind in _FILE_SIGNALS and not sig.paths:
                raise self.fail(self.psrc, (*base, "paths"), f"signal type {kind} needs paths")
            if kind not in _FILE_SIGNALS and sig.paths:
                raise self.fail(
                    self.psrc, (*base, "paths"), f"signal type {kind} takes no paths; remove them"
                )
            for j, raw in enumerate(sig.paths):
                self._runtime_path((*base, "paths", j), raw)
        for i, raw in enumerate(adv.log_paths):
            self._runtime_path(("advanced", "log_paths", i), raw)
        if adv.shell_command is not None:
            self._check_shell(adv.shell_command)
        self._check_backend()
        self._check_parallel()

    def _check_integrations(self) -> None:
        """URIs and URLs are checked by :mod:`trainee.spec.integrations`; reasons never
        repeat them (a notification URL often holds a token)."""
        spec = self.project.integrations
        if spec.mlflow is not None:
            problem = tracking_uri_problem(spec.mlflow.tracking_uri)
            if problem:
                where: FieldPath = ("integrations", "mlflow", "tracking_uri")
                raise self.fail(self.psrc, where, problem)
        if spec.notify is not None:
            for i, url in enumerate(spec.notify.urls):
                problem = notify_url_problem(url)
                if problem:
                    raise self.fail(self.psrc, ("integrations", "notify", "urls", i), problem)

    def _check_parallel(self) -> None:
        """Rounds of one step run at once: a file they read their metrics or activity
        from must be their own, or one round would take another's result."""
        if self.project.run.parallel <= 1:
            return
        per_round = ("{round_dir}", "{round_index}", "{outputs_dir}", "{config_path}")
        paths: list[tuple[FieldPath, str]] = []
        for i, m in enumerate(self.project.metrics.specs):
            if m.path is not None:
                paths.append((("metrics", "specs", i, "path"), m.path))
            elif m.source == MetricSource.WANDB_SUMMARY:
                raise self.fail(
                    self.psrc,
                    ("metrics", "specs", i, "path"),
                    f"with run.parallel {self.project.run.parallel} rounds run at once, so the "
                    "newest W&B run may be another round's; set path to a per-round summary "
                    "(e.g. {round_dir}/wandb/*run-*/files/wandb-summary.json, with the job's "
                    "WANDB_DIR set to {round_dir})",
                )
        adv = self.project.advanced
        paths += [(("advanced", "log_paths", i), p) for i, p in enumerate(adv.log_paths)]
        for i, sig in enumerate(adv.signal_sources):
            paths += [
                (("advanced", "signal_sources", i, "paths", j), p) for j, p in enumerate(sig.paths)
            ]
        for where, raw in paths:
            if not any(token in raw for token in per_round):
                raise self.fail(
                    self.psrc,
                    where,
                    f"with run.parallel {self.project.run.parallel} rounds run at once, so "
                    f"{raw!r} would be shared by them; make it per round with {{outputs_dir}} "
                    "or {round_dir} (and have the job write there)",
                )

    def _check_backend(self) -> None:
        b = self.project.advanced.backend
        base: FieldPath = ("advanced", "backend")
        only_slurm = ("partition", "time", "mem", "account", "qos", "sbatch_args")
        for name in only_slurm:
            if b.type != "slurm" and getattr(b, name):
                raise self.fail(
                    self.psrc, (*base, name), f"is a Slurm option; backend type is {b.type}"
                )
        if b.type != "ray" and b.address is not None:
            raise self.fail(
                self.psrc, (*base, "address"), f"is a Ray option; backend type is {b.type}"
            )
        for name in ("cpus", "gpus"):
            value = getattr(b, name)
            if value is None:
                continue
            if b.type == "local":
                raise self.fail(
                    self.psrc,
                    (*base, name),
                    "is a cluster option (slurm, ray); local rounds use this machine"
                    + ("; share its GPUs with launch.gpus" if name == "gpus" else ""),
                )
            if b.type == "slurm" and float(value) != int(value):
                raise self.fail(self.psrc, (*base, name), "Slurm needs a whole number")
        if b.type == "ray" and b.address is None:
            raise self.fail(
                self.psrc,
                (*base, "address"),
                "the Ray backend needs the address of the cluster's Jobs API "
                "(e.g. http://head-node:8265)",
            )
        if b.type == "ray" and not b.address.startswith(("http://", "https://")):  # type: ignore[union-attr]
            raise self.fail(
                self.psrc,
                (*base, "address"),
                f"must be the Jobs API URL (http://host:8265), got {b.address!r}",
            )

    def _check_shell(self, command: str) -> None:
        if "extra_args" not in placeholders_in(command):
            raise self.fail(
                self.psrc,
                ("advanced", "shell_command"),
                "must contain {extra_args} where the tuned arguments go",
            )

    # -- paths --------------------------------------------------------------------------

    def _runtime_path(self, where: FieldPath, raw: str) -> None:
        """A log/signal/metric path: placeholders and globs allowed, no existence check;
        inside .trainee/ in guarded mode, inside the project otherwise."""
        text = raw
        for m in _PLACEHOLDER.finditer(raw):
            if m.group(1) not in PATH_PLACEHOLDERS:
                raise self.fail(
                    self.psrc,
                    where,
                    f"unknown placeholder {{{m.group(1)}}} in {raw!r}; expected one of: "
                    + ", ".join(f"{{{n}}}" for n in PATH_PLACEHOLDERS),
                )
        text = _PLACEHOLDER.sub(lambda m: PATH_PLACEHOLDERS[m.group(1)], raw)
        guarded = SecurityMode(self.project.advanced.security_mode) == SecurityMode.GUARDED
        scratch = uses_scratch_cwd(self.project.advanced, self.root, guarded=guarded)
        if scratch and not os.path.isabs(text):
            # a job in its scratch folder writes relative paths there
            cwd = os.path.join(PATH_PLACEHOLDERS["round_dir"], SCRATCH_CWD)
            text = os.path.join(job_path_base(text, cwd=cwd, project_root=""), text)
        self._inside(
            self.psrc,
            where,
            text,
            kind=None,
            label=".trainee/ (guarded mode)" if guarded else "the project",
            glob=True,
            within_trainee=guarded,
            shown=raw,
        )

    def _inside(
        self,
        src: Source,
        where: FieldPath,
        raw: str,
        *,
        kind: str | None,
        label: str,
        glob: bool = False,
        within_trainee: bool = False,
        shown: str | None = None,
    ) -> Path:
        """Resolve ``raw`` against the project root; fail if it escapes (lexically through
        ``..`` or physically through a symlink) or, for ``kind``, does not exist."""
        shown = raw if shown is None else shown
        if "\x00" in raw:
            raise self.fail(src, where, "contains a NUL byte")
        parts = Path(raw).parts
        if glob:
            first = next((i for i, p in enumerate(parts) if _GLOB.search(p)), len(parts))
            if ".." in parts[first:]:
                raise self.fail(src, where, f"'..' is not allowed after a glob in {shown!r}")
            parts = parts[:first]
        candidate = Path(*parts) if parts else Path()
        if not candidate.is_absolute():
            candidate = self.root / candidate
        lexical_base = self.trainee_lexical if within_trainee else self.root
        lexical = Path(os.path.normpath(candidate))
        if not lexical.is_relative_to(lexical_base):
            how = "is outside" if Path(raw).is_absolute() else "escapes"
            if within_trainee and lexical.is_relative_to(self.root):
                raise self.fail(
                    src,
                    where,
                    f"{shown!r} is outside .trainee/; in guarded mode log, signal and metric "
                    "file paths must stay inside .trainee/ (or use security_mode: unsafe)",
                )
            raise self.fail(src, where, f"{shown!r} {how} {label}")
        resolved = _safe_resolve(candidate)
        if resolved is None:
            raise self.fail(src, where, f"{shown!r} cannot be resolved (symlink loop?)")
        allowed = [self.trainee] if within_trainee else [self.root, self.trainee]
        if not any(resolved.is_relative_to(base) for base in allowed):
            raise self.fail(
                src, where, f"{shown!r} resolves to {resolved} through a symlink, outside {label}"
            )
        if kind is not None:
            try:
                exists = resolved.exists()
                is_file = resolved.is_file()
                is_dir = resolved.is_dir()
            except OSError as exc:
                raise self.fail(
                    src, where, f"{shown!r} cannot be checked ({exc.strerror})"
                ) from None
            if not exists:
                raise self.fail(src, where, f"{shown!r} does not exist")
            if kind == "file" and not is_file:
                raise self.fail(src, where, f"{shown!r} is not a file")
            if kind == "dir" and not is_dir:
                raise self.fail(src, where, f"{shown!r} is not a directory")
        return resolved

    def _rel(self, path: Path | None) -> str:
        if path is None:
            return "<none>"
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    # -- tuning.yaml --------------------------------------------------------------------

    def _check_params(self) -> tuple[TunableSpec, ...]:
        fixed = self._fixed_flags()
        hydra = ConfigStyle(self.project.launch.config_style) == ConfigStyle.HYDRA
        seen_names: set[str] = set()
        seen_keys: dict[str, str] = {}
        config_paths: list[tuple[str, str]] = []
        out: list[TunableSpec] = []
        for i, param in enumerate(self.tuning.params):
            base: FieldPath = ("params", i)
            label = f"param '{param.name}'"
            if param.name in seen_names:
                raise self.fail(self.tsrc, (*base, "name"), f"duplicate param name '{param.name}'")
            seen_names.add(param.name)
            source, key = self._param_source(base, param, label)
            if source == ParamSource.FLAG and hydra:
                raise self.fail(
                    self.tsrc,
                    (*base, "flag"),
                    f"{label}: with launch.config_style hydra the tunables are overrides; "
                    f"write override: <key> (e.g. override: optimizer.lr) instead of "
                    f"flag: {param.flag}",
                )
            norm = _strip_override(key) if source == ParamSource.OVERRIDE else key
            if source != ParamSource.CONFIG_PATH:
                if norm in seen_keys:
                    raise self.fail(
                        self.tsrc,
                        (*base, source.value),
                        f"{label}: '{key}' is also used by param '{seen_keys[norm]}'",
                    )
                seen_keys[norm] = param.name
                if norm in fixed:
                    raise self.fail(
                        self.tsrc,
                        (*base, source.value),
                        f"{label}: '{key}' is already set by {fixed[norm]}; "
                        "constant arguments are not tunable",
                    )
            else:
                self._check_config_key(base, label, key, config_paths)
                config_paths.append((key, param.name))
            ptype = ParamType(param.type)
            self._check_types(base, label, param, ptype)
            baseline = self._baseline_value(base, label, param, ptype, source)
            lo = _norm_bound(param.min_value, ptype)
            hi = _norm_bound(param.max_value, ptype)
            self._check_bounds(base, label, param, ptype, lo, hi, baseline, source)
            out.append(
                TunableSpec(
                    name=param.name,
                    type=ptype,
                    source=source,
                    key=key,
                    baseline=baseline,
                    min_value=lo,
                    max_value=hi,
                    choices=param.choices,
                    log=param.log,
                    description=param.description,
                    param=param,
                )
            )
        return tuple(out)

    def _constant_flags(
        self, *, with_output: bool = True, with_hydra_outputs: bool = True
    ) -> list[tuple[str, str]]:
        """Every flag or override key trainee passes with a constant value, with the
        field that sets it, in argument order."""
        out: list[tuple[str, str]] = []
        launch = self.project.launch
        hydra = ConfigStyle(launch.config_style) == ConfigStyle.HYDRA
        if launch.baseline_config is not None:
            if hydra:
                label = "launch.baseline_config (config_style hydra)"
                out += [(flag, label) for flag in (*HYDRA_CONFIG_FLAGS, "-cp", "-cn", "-cd")]
            else:
                out.append((launch.config_flag, "launch.config_flag"))
        out += [(arg.flag, f"launch.args[{i}]") for i, arg in enumerate(launch.args)]
        out += [(d.flag, f"data[{i}]") for i, d in enumerate(self.project.data) if d.flag]
        out += [(a.flag, f"run.fixed_args[{i}]") for i, a in enumerate(self.project.run.fixed_args)]
        if with_output and self.project.output.flag is not None:
            out.append((self.project.output.flag, "output.flag"))
        if hydra and with_hydra_outputs:
            label = "config_style hydra (it holds the round's outputs folder)"
            out += [(key, label) for key in HYDRA_OUTPUT_KEYS]
        return out

    def _fixed_flags(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for flag, label in self._constant_flags():
            out.setdefault(_strip_override(flag), label)
        return out

    def _param_source(
        self, base: FieldPath, param: ParamSpec, label: str
    ) -> tuple[ParamSource, str]:
        given = [
            (ParamSource(name), value)
            for name, value in (
                ("flag", param.flag),
                ("config_path", param.config_path),
                ("override", param.override),
            )
            if value is not None
        ]
        if len(given) != 1:
            got = " and ".join(s.value for s, _ in given) if given else "none"
            raise self.fail(
                self.tsrc,
                base if not given else (*base, given[-1][0].value),
                f"{label}: exactly one of flag, config_path, override is required (got {got})",
            )
        return given[0]

    def _check_config_key(
        self, base: FieldPath, label: str, key: str, seen: list[tuple[str, str]]
    ) -> None:
        where = (*base, "config_path")
        out_key = self.project.output.config_path
        if out_key is not None and _overlaps(key, out_key):
            raise self.fail(
                self.tsrc,
                where,
                f"{label}: '{key}' overlaps output.config_path '{out_key}' of project.yaml; "
                "the output folder is set by trainee and is not tunable",
            )
        for other, name in seen:
            if _overlaps(key, other):
                raise self.fail(
                    self.tsrc, where, f"{label}: '{key}' overlaps config_path '{other}' of '{name}'"
                )

    def _check_types(self, base: FieldPath, label: str, param: ParamSpec, ptype: ParamType) -> None:
        numeric = ptype in (ParamType.FLOAT, ParamType.INT)
        for field in ("min_value", "max_value"):
            value = getattr(param, field)
            if value is None:
                continue
            if not numeric:
                raise self.fail(
                    self.tsrc, (*base, field), f"{label}: {field} does not apply to type {ptype}"
                )
            self._check_number((*base, field), label, value, ptype)
        if param.default is not None:
            self._check_kind((*base, "default"), label, "default", param.default, ptype, param)
        if ptype == ParamType.CHOICE:
            if not param.choices:
                raise self.fail(
                    self.tsrc, (*base, "choices"), f"{label}: type choice needs choices"
                )
            keys = [(type(c) is bool, c) for c in param.choices]
            if len(set(keys)) != len(keys):
                raise self.fail(self.tsrc, (*base, "choices"), f"{label}: choices repeat a value")
            for j, c in enumerate(param.choices):
                if isinstance(c, float) and not math.isfinite(c):
                    raise self.fail(self.tsrc, (*base, "choices", j), f"{label}: must be finite")
        elif param.choices is not None:
            raise self.fail(
                self.tsrc,
                (*base, "choices"),
                f"{label}: choices need type: choice (type is {ptype})",
            )
        if param.log and not numeric:
            raise self.fail(
                self.tsrc, (*base, "log"), f"{label}: log scale needs type float or int"
            )

    def _check_number(self, where: FieldPath, label: str, value: Any, ptype: ParamType) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(self.tsrc, where, f"{label}: must be a number, got {value!r}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(self.tsrc, where, f"{label}: must be a finite number, got {value}")
        if ptype == ParamType.INT and not isinstance(value, int):
            raise self.fail(self.tsrc, where, f"{label}: must be an integer, got {value!r}")

    def _check_kind(
        self,
        where: FieldPath,
        label: str,
        what: str,
        value: Any,
        ptype: ParamType,
        param: ParamSpec,
    ) -> None:
        if ptype in (ParamType.FLOAT, ParamType.INT):
            self._check_number(where, label, value, ptype)
        elif ptype == ParamType.BOOL:
            if not isinstance(value, bool):
                raise self.fail(self.tsrc, where, f"{label}: {what} must be true or false")
        elif (
            ptype == ParamType.CHOICE
            and param.choices
            and not any(type(c) is type(value) and c == value for c in param.choices)
        ):
            raise self.fail(
                self.tsrc,
                where,
                f"{label}: {what} {value!r} is not one of the choices {list(param.choices)}",
            )

    def _baseline_value(
        self,
        base: FieldPath,
        label: str,
        param: ParamSpec,
        ptype: ParamType,
        source: ParamSource,
    ) -> Value | None:
        if source != ParamSource.CONFIG_PATH:
            return _norm(param.default, ptype)
        where = (*base, "config_path")
        key = param.config_path
        assert key is not None
        if self._baseline_doc is None:
            raise self.fail(
                self.tsrc,
                where,
                f"{label}: config-backed params need launch.baseline_config in project.yaml",
            )
        base_file = self._rel(self.baseline_path)
        if not self._baseline_doc.has(key):
            raise self.fail(
                self.tsrc, where, f"{label}: '{key}' not found in the baseline config {base_file}"
            )
        value = self._baseline_doc.get(key)
        if value is None or isinstance(value, dict | list):
            shown = (
                "null" if value is None else ("a mapping" if isinstance(value, dict) else "a list")
            )
            raise self.fail(
                self.tsrc,
                where,
                f"{label}: '{key}' in {base_file} is {shown}, not a {ptype} value",
            )
        ok = (
            (
                ptype == ParamType.FLOAT
                and isinstance(value, int | float)
                and not isinstance(value, bool)
            )
            or (ptype == ParamType.INT and isinstance(value, int) and not isinstance(value, bool))
            or (ptype == ParamType.BOOL and isinstance(value, bool))
            or (
                ptype == ParamType.CHOICE
                and any(type(c) is type(value) and c == value for c in param.choices or ())
            )
        )
        if not ok:
            expected = f"one of {list(param.choices or ())}" if ptype == "choice" else f"a {ptype}"
            raise self.fail(
                self.tsrc,
                where,
                f"{label}: baseline value {value!r} of '{key}' in {base_file} is not {expected}",
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(self.tsrc, where, f"{label}: baseline value {value} is not finite")
        resolved = _norm(value, ptype)
        if param.default is not None and not _equal(_norm(param.default, ptype), resolved):
            raise self.fail(
                self.tsrc,
                (*base, "default"),
                f"{label}: default {param.default!r} differs from {resolved!r} at '{key}' in the "
                f"baseline config {base_file}; do not duplicate baseline defaults in tuning.yaml "
                "(remove default)",
            )
        return resolved

    def _check_bounds(
        self,
        base: FieldPath,
        label: str,
        param: ParamSpec,
        ptype: ParamType,
        lo: Any,
        hi: Any,
        baseline: Any,
        source: ParamSource,
    ) -> None:
        if lo is not None and hi is not None and lo > hi:
            raise self.fail(
                self.tsrc, (*base, "min_value"), f"{label}: min_value {lo!r} > max_value {hi!r}"
            )
        what = "baseline value" if source == ParamSource.CONFIG_PATH else "default"
        field = "config_path" if source == ParamSource.CONFIG_PATH else "default"
        if baseline is not None and ptype in (ParamType.FLOAT, ParamType.INT):
            if lo is not None and baseline < lo:
                raise self.fail(
                    self.tsrc, (*base, field), f"{label}: {what} {baseline!r} < min_value {lo!r}"
                )
            if hi is not None and baseline > hi:
                raise self.fail(
                    self.tsrc, (*base, field), f"{label}: {what} {baseline!r} > max_value {hi!r}"
                )
        if param.log:
            for name, value in (("min_value", lo), (field, baseline), ("max_value", hi)):
                if value is not None and value <= 0:
                    raise self.fail(
                        self.tsrc,
                        (*base, name),
                        f"{label}: log scale needs values > 0, got {value!r}",
                    )

    def _check_constraints(self, tunables: tuple[TunableSpec, ...]) -> tuple[Constraint, ...]:
        """Each constraint parses, names tunables (with a baseline value) or fixed values,
        and holds for the baseline."""
        by_name = {t.name: t for t in tunables}
        fixed = self._fixed_values()
        out: list[Constraint] = []
        for i, text in enumerate(self.tuning.constraints):
            where: FieldPath = ("constraints", i)
            try:
                constraint = parse_constraint(text)
            except ConfigError as exc:
                raise self.fail(self.tsrc, where, exc.reason or exc.message) from None
            bound: dict[str, Value] = {}
            for name in constraint.names:
                tunable = by_name.get(name)
                if tunable is not None:
                    if tunable.baseline is None:
                        raise self.fail(
                            self.tsrc,
                            where,
                            f"param '{name}' has no baseline value (no default, no baseline "
                            "config value), so the constraint cannot be checked; give it a "
                            "default",
                        )
                    continue
                value = fixed(name)
                if value is None:
                    raise self.fail(self.tsrc, where, unknown_name_reason(name, sorted(by_name)))
                bound[name] = value
            if not any(n in by_name for n in constraint.names):
                raise self.fail(
                    self.tsrc,
                    where,
                    f"`{text}` names no tunable param, so no round can change it; "
                    "remove it or name a param of tuning.yaml",
                )
            constraint = constraint.bind(bound)
            baseline = {t.name: t.baseline for t in tunables}
            problem = constraint.problem(baseline)
            if problem is not None:
                raise self.fail(
                    self.tsrc,
                    where,
                    f"the baseline breaks it: {problem}; fix the constraint or the defaults",
                )
            out.append(constraint)
        return tuple(out)

    def _fixed_values(self) -> Callable[[str], Value | None]:
        """A lookup of the fixed values a constraint may name besides the tunables: a
        constant argument (``--grad_accum 4`` is ``grad_accum``), else a top-level key
        of the baseline config."""
        args: dict[str, Value] = {}
        for arg in (*self.project.run.fixed_args, *self.project.launch.args):
            key = _strip_override(arg.flag).lstrip("-").replace("-", "_")
            if key.isidentifier() and arg.value is not None:
                args.setdefault(key, arg.value)

        def lookup(name: str) -> Value | None:
            if name in args:
                return args[name]
            doc = self._baseline_doc
            if doc is not None and "." not in name and doc.has(name):
                value = doc.get(name)
                if isinstance(value, int | float | str) and not (
                    isinstance(value, float) and not math.isfinite(value)
                ):
                    return value
            return None

        return lookup


# -- small helpers --------------------------------------------------------------------------


def _safe_resolve(path: Path) -> Path | None:
    try:
        return path.resolve()
    except (OSError, RuntimeError, ValueError):
        return None


def _strip_override(key: str) -> str:
    return key.lstrip("+~")


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _norm(value: Any, ptype: ParamType) -> Value | None:
    if ptype == ParamType.FLOAT and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return cast(Value | None, value)


def _norm_bound(value: int | float | None, ptype: ParamType) -> int | float | None:
    if ptype == ParamType.FLOAT and value is not None:
        return float(value)
    return value


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)
