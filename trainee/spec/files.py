"""The msgspec Structs of the two user files, ``.trainee/project.yaml`` and ``tuning.yaml``.

Schema-level rules (types, enums, ranges, unknown keys) live in the types; rules
that span fields or touch the disk live in :mod:`trainee.spec.compile`. This
module also turns a ``msgspec.ValidationError`` into a :class:`ConfigError` that
names the file, line, field and reason. Stdlib + msgspec only.
"""

from __future__ import annotations

import difflib
import enum
import os
import re
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta

from trainee.errors import ConfigError
from trainee.spec.kinds import kind_words

__all__ = [
    "BUILTIN_METRICS",
    "SCRATCH_CWD",
    "AdvancedSpec",
    "ArgSpec",
    "ArgStyle",
    "BackendSpec",
    "ConfigStyle",
    "DataSpec",
    "Environment",
    "FieldPath",
    "Goal",
    "HalvingRule",
    "IntegrationsSpec",
    "LaunchSpec",
    "LimitsSpec",
    "LineMap",
    "MedianRule",
    "MetricSource",
    "MetricSpec",
    "MetricsSpec",
    "MlflowSpec",
    "NoiseSpec",
    "NotifyEvent",
    "NotifySpec",
    "OutputSpec",
    "ParamSpec",
    "ParamType",
    "PatienceRule",
    "PercentileRule",
    "ProjectFileSpec",
    "PruneRule",
    "PruneSpec",
    "RunSpec",
    "ScreenSpec",
    "SecurityMode",
    "SignalSourceSpec",
    "SignalType",
    "ThresholdRule",
    "TuningFileSpec",
    "Value",
    "WandbSpec",
    "config_error",
    "decode_file",
    "format_field",
    "job_path_base",
    "line_of",
    "min_rounds_of",
    "struct_to_yaml_data",
    "uses_scratch_cwd",
]

# -- enums ---------------------------------------------------------------------


class Environment(enum.StrEnum):
    """How ``launch.command`` is wrapped."""

    SYSTEM = "system"
    UV = "uv"
    VENV = "venv"
    CONDA = "conda"


class ArgStyle(enum.StrEnum):
    """How a ``--flag`` and its value are written: ``--lr 0.001`` or ``--lr=0.001``."""

    SPACE = "space"
    EQUALS = "equals"


class ConfigStyle(enum.StrEnum):
    """How the per-round copy of ``launch.baseline_config`` reaches the command:
    ``flag`` as ``<launch.config_flag> <path>``, ``hydra`` as ``--config-path DIR
    --config-name NAME`` (a ``@hydra.main`` app), with Hydra's output folder set too."""

    FLAG = "flag"
    HYDRA = "hydra"


class SecurityMode(enum.StrEnum):
    GUARDED = "guarded"
    UNSAFE = "unsafe"


class MetricSource(enum.StrEnum):
    STDOUT_REGEX = "stdout_regex"
    LOG_REGEX = "log_regex"
    LOG_FILE_REGEX = "log_file_regex"
    JSONL = "jsonl"
    WANDB_SUMMARY = "wandb_summary"
    TENSORBOARD = "tensorboard"
    CSV = "csv"


class Goal(enum.StrEnum):
    MIN = "min"
    MAX = "max"


class ParamType(enum.StrEnum):
    FLOAT = "float"
    INT = "int"
    BOOL = "bool"
    CHOICE = "choice"


class NotifyEvent(enum.StrEnum):
    """What a notification is sent for (``integrations.notify.on``)."""

    SESSION_FINISHED = "session_finished"
    SESSION_FAILED = "session_failed"
    NEW_BEST = "new_best"
    ROUND_FAILED = "round_failed"
    STALLED = "stalled"
    BUDGET = "budget"
    RESUMED = "resumed"


class SignalType(enum.StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"
    LOG_FILE_MTIME = "log_file_mtime"
    HEARTBEAT_FILE = "heartbeat_file"


# -- constrained scalar types ----------------------------------------------------

Value = int | float | bool | str
"""A scalar argument or parameter value."""

NonEmptyStr = Annotated[str, Meta(min_length=1)]
Name = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$", max_length=128)]
MetricName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:/\-]*$", max_length=128)]
Flag = Annotated[str, Meta(pattern=r"^--?[A-Za-z0-9][A-Za-z0-9_.\-]*$", max_length=128)]
ArgFlag = Annotated[str, Meta(pattern=r"^[^\s=]+$", max_length=256)]
ConfigPath = Annotated[str, Meta(pattern=r"^[^.\s]+(\.[^.\s]+)*$", max_length=256)]
EnvName = Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=256)]
OverrideKey = Annotated[
    str, Meta(pattern=r"^(\+\+|\+|~)?[A-Za-z_][A-Za-z0-9_\-./@]*$", max_length=256)
]


# -- project.yaml ----------------------------------------------------------------

BUILTIN_METRICS: tuple[str, str] = ("loss", "total_loss")
"""The metrics read from a project's output without ``metrics.specs`` (the first found
is the primary)."""


class DataSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A data folder or file of the project; ``flag`` passes it to the command."""

    path: NonEmptyStr
    flag: ArgFlag | None = None


class ArgSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A constant argument. ``value: null`` passes the bare flag; a flag without a
    leading dash is written override style (``trainer.max_epochs=10``)."""

    flag: ArgFlag
    value: Value | None = None


class LaunchSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``command`` may be left out when ``advanced.shell_command`` replaces it.
    ``env``: variables set for every round (values may use the ``{...}`` variables).
    ``config_flag``: the flag passing the per-round config (``config_style: flag``)."""

    environment: Environment = Environment.SYSTEM
    env_name: NonEmptyStr | None = None
    command: Annotated[tuple[NonEmptyStr, ...], Meta(min_length=1)] | None = None
    baseline_config: NonEmptyStr | None = None
    config_style: ConfigStyle = ConfigStyle.FLAG
    config_flag: ArgFlag = "--config"
    args: tuple[ArgSpec, ...] = ()
    arg_style: ArgStyle = ArgStyle.SPACE
    env: dict[str, Value] = msgspec.field(default_factory=dict)
    env_passthrough: tuple[EnvName, ...] = ()
    """Variables of the caller named like secrets (keys, tokens, passwords) that may
    reach the job; every other secret-named variable is dropped from its environment."""
    gpus: Literal["auto", "none"] | tuple[Annotated[int, Meta(ge=0, le=1023)], ...] = "none"
    """The GPUs of this machine the rounds share (local backend): ``auto`` (every GPU
    NVML reports), a list of device indices, or ``none``. Each running round gets one
    of them in CUDA_VISIBLE_DEVICES (see :mod:`trainee.launch.gpus`)."""
    rounds_per_gpu: Annotated[int, Meta(ge=1, le=64)] = 1
    """Rounds sharing one GPU at once (with ``gpus``)."""


class LimitsSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``run.limits``: per-round limits the round monitor applies to the job's whole
    process tree; a round over one is killed and fails with the reason."""

    memory_mb: Annotated[int, Meta(ge=1, le=1 << 40)] | None = None
    """Resident memory of all the round's processes added up, in MiB."""
    processes: Annotated[int, Meta(ge=1, le=1 << 22)] | None = None
    """Processes the round may have at once (bwrap's own not counted)."""


# -- run.prune ------------------------------------------------------------------------


class _PruneRule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A rule of ``run.prune``; ``metric``: one of metrics.specs (default: the primary)."""

    metric: MetricName | None = None


class ThresholdRule(
    _PruneRule,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="rule",
    tag="threshold",
):
    """Pruned at once when the metric is NaN or infinite (a diverged run never recovers),
    and from ``min_steps`` on when its latest value is above ``above`` or below ``below``."""

    above: float | None = None
    below: float | None = None


class PatienceRule(
    _PruneRule,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="rule",
    tag="patience",
):
    """Pruned when the metric's best value has not improved by more than ``min_delta``
    for ``patience`` steps (a plateau)."""

    patience: Annotated[int, Meta(ge=1)]
    min_delta: Annotated[float, Meta(ge=0)] = 0.0


class MedianRule(
    _PruneRule,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="rule",
    tag="median",
):
    """Pruned when its best value so far is worse than the median of the completed
    rounds' best values up to the same step (Optuna's MedianPruner)."""


class PercentileRule(
    _PruneRule,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="rule",
    tag="percentile",
):
    """Pruned unless its best value so far is within the best ``percentile`` % of the
    completed rounds' at the same step (25: only the top quarter goes on)."""

    percentile: Annotated[float, Meta(gt=0, lt=100)]


class HalvingRule(
    _PruneRule,
    frozen=True,
    kw_only=True,
    forbid_unknown_fields=True,
    tag_field="rule",
    tag="halving",
):
    """Successive-halving rungs: at each step of ``rungs`` it reaches, the round goes on
    only when its best value so far ranks in the best ``keep`` fraction of the rounds that
    reached that rung (the completed ones and itself)."""

    rungs: Annotated[tuple[Annotated[int, Meta(ge=1)], ...], Meta(min_length=1, max_length=32)]
    keep: Annotated[float, Meta(gt=0, lt=1)] = 0.5


PruneRule = ThresholdRule | PatienceRule | MedianRule | PercentileRule | HalvingRule


class PruneSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``run.prune`` (opt-in): stop a losing round early, from the metric points it prints
    while it runs, through the usual stop (SIGTERM, then ``advanced.stop_grace_sec``).
    ``step``: the step a point is at, ``logged`` (the step/epoch/iter number on its line
    or record, else its report count) or ``reports`` (1 for a metric's first value, 2
    for the next...). ``min_steps``: no rule prunes before this step (NaN excepted).
    ``warmup_rounds``: completed rounds needed before median, percentile and halving
    compare. A round is pruned when any rule says so; the baseline never is."""

    rules: Annotated[tuple[PruneRule, ...], Meta(min_length=1, max_length=32)]
    step: Literal["logged", "reports"] = "logged"
    min_steps: Annotated[int, Meta(ge=0)] = 1
    warmup_rounds: Annotated[int, Meta(ge=1)] = 2


class NoiseSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``run.noise`` (opt-in): how much the seed alone moves the primary metric. Right
    after the baseline, its configuration runs again on ``repeats - 1`` other values of
    the ``seed`` tunable (the baseline's + 1, + 2...); ``margin`` times the spread
    (sample standard deviation) of those results is the noise floor, and a change
    becomes the new best only when it beats the best by more than the floor."""

    seed: Name
    repeats: Annotated[int, Meta(ge=2, le=10)] = 3
    margin: Annotated[float, Meta(gt=0, le=100)] = 1.0


class ScreenSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``run.screen`` (opt-in): cheap screening, ASHA-style successive halving. ``budget``
    is the flag of a constant argument (``run.fixed_args`` or ``launch.args``) whose value
    is the full budget (epochs, steps...); ``rungs`` are the budgets a candidate is tried
    at, increasing, the last one the full budget (that value). A new candidate runs at
    the first rung; as soon as a rung has results, the best ``1/eta`` of them (at least
    ``eta`` results for one) is promoted to the next rung. ``resume``: the argument a
    promoted round gets to continue from the round it was promoted from (its value may
    use ``{from_outputs_dir}`` and ``{from_round_dir}``); without it a promoted round runs
    again from the start at the higher budget. Only full-budget results can become the
    best."""

    budget: ArgFlag
    rungs: Annotated[tuple[int | float, ...], Meta(min_length=2, max_length=16)]
    eta: Annotated[float, Meta(gt=1, le=100)] = 3.0
    resume: ArgSpec | None = None


class RunSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``max_session_minutes``: a wall-time budget for the whole session (checked
    before each decision; a running round is never cut short by it)."""

    max_rounds: Annotated[int, Meta(ge=1)] = 3
    timeout_minutes: Annotated[float, Meta(gt=0)] = 60.0
    fixed_args: tuple[ArgSpec, ...] = ()
    max_session_minutes: Annotated[float, Meta(gt=0)] | None = None
    parallel: Annotated[int, Meta(ge=1, le=64)] = 1
    """Candidates tried at once: each decision step proposes this many distinct plans
    and runs them together on the backend (budgets still count rounds)."""
    limits: LimitsSpec = msgspec.field(default_factory=LimitsSpec)
    prune: PruneSpec | None = None
    """Early stopping of losing rounds (see :class:`PruneSpec`); None: every round runs
    to its end."""
    noise: NoiseSpec | None = None
    """Noise-aware acceptance of a new best (see :class:`NoiseSpec`)."""
    screen: ScreenSpec | None = None
    """Cheap screening at low budgets first (see :class:`ScreenSpec`)."""


class LlmBudgetSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Budgets of the decision maker, checked before each decision: total tokens and
    US dollars (litellm's usage and price table, or ``prices`` in config.json)."""

    max_tokens: Annotated[int, Meta(ge=1)] | None = None
    max_usd: Annotated[float, Meta(gt=0)] | None = None


class DecisionSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Who proposes the next parameter set: ``llm`` (default), ``tpe``, ``random`` or
    ``hybrid`` (the LLM choosing among the optimizer's suggestions) or ``external``
    (an agent submits each plan through plan_submit / round_run); ``seed`` makes
    the optimizers reproducible (default: the session's number, so a new session
    does not repeat the last one's points); ``min_rounds``: an LLM's stop is honoured
    only once this many rounds have run, the baseline included (default: a third of
    max_rounds, at least 2; see :func:`min_rounds_of`)."""

    policy: Literal["llm", "tpe", "random", "hybrid", "external"] = "llm"
    seed: Annotated[int, Meta(ge=0)] | None = None
    min_rounds: Annotated[int, Meta(ge=1)] | None = None


def min_rounds_of(configured: int | None, max_rounds: int) -> int:
    """Rounds that must have run before an LLM may stop the session: ``decision.min_rounds``,
    else a third of ``max_rounds`` (rounded up) and at least 2; never more than max_rounds."""
    wanted = configured if configured is not None else max(2, -(-max_rounds // 3))
    return max(1, min(wanted, max_rounds))


class OutputSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``config_path``: the dotted key of the baseline config holding the output folder.
    ``flag``: a flag (``--out_dir``, ``-o``) or an override key (``hydra.run.dir``) given
    the round's outputs folder, rendered with the fixed arguments."""

    config_path: ConfigPath | None = None
    flag: ArgFlag | None = None


class MetricSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``key_or_pattern`` is a regex for the ``*_regex`` sources, a key or dotted path
    for ``jsonl``/``wandb_summary``, a scalar tag for ``tensorboard`` and a column for
    ``csv``; ``path`` (glob allowed) is the file read by ``log_file_regex``, ``jsonl``,
    ``tensorboard`` (event files or their folder), ``csv`` and ``wandb_summary`` (which
    finds the round's W&B run without it)."""

    name: MetricName
    source: MetricSource
    key_or_pattern: NonEmptyStr
    path: NonEmptyStr | None = None
    goal: Goal = Goal.MIN
    required: bool = False


class MetricsSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    specs: tuple[MetricSpec, ...] = ()
    prompt: str = ""


class SignalSourceSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """An activity signal; file-based types watch ``paths`` (globs)."""

    type: SignalType
    paths: tuple[NonEmptyStr, ...] = ()


class BackendSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``advanced.backend``: where rounds run. ``local`` (default): on this machine under
    trainee's round monitor. ``slurm``: batch jobs through sbatch (``partition``, ``time``,
    ``cpus``, ``gpus``, ``mem``, ``account``, ``qos``, ``sbatch_args``). ``ray``: Ray Jobs
    at ``address`` (``cpus``, ``gpus`` per round). Cluster backends need the project on
    a filesystem the nodes share, at the same path."""

    type: Literal["local", "slurm", "ray"] = "local"
    partition: NonEmptyStr | None = None
    time: NonEmptyStr | None = None
    cpus: Annotated[float, Meta(gt=0)] | None = None
    gpus: Annotated[float, Meta(ge=0)] | None = None
    mem: NonEmptyStr | None = None
    account: NonEmptyStr | None = None
    qos: NonEmptyStr | None = None
    sbatch_args: tuple[NonEmptyStr, ...] = ()
    address: NonEmptyStr | None = None
    poll_interval_sec: Annotated[float, Meta(gt=0, le=600)] = 1.0
    command_timeout_sec: Annotated[float, Meta(gt=0, le=3600)] = 30.0


class AdvancedSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    security_mode: SecurityMode = SecurityMode.GUARDED
    working_dir: NonEmptyStr = "."
    scratch_cwd: bool | None = None
    """Run the job in ``{round_dir}/cwd``, a folder of links to the working folder's
    entries: it reads the project as before, and what it writes into its working folder
    (``./mlruns``, ``lightning_logs/``, ``grid.png``) lands in the round's folder instead
    of failing on the read-only project. Default (None): on for guarded rounds whose
    working folder is the project root."""
    read_only_paths: tuple[NonEmptyStr, ...] = ()
    """Folders or files outside the project a guarded job may read (bound read-only at
    the same path), e.g. a dataset folder beside the project: ``../../Datasets``."""
    heartbeat_interval_sec: Annotated[float, Meta(gt=0)] = 5.0
    signal_sources: tuple[SignalSourceSpec, ...] = ()
    log_paths: tuple[NonEmptyStr, ...] = ()
    wandb_enabled: bool = False
    tuning_prompt: str = ""
    shell_command: NonEmptyStr | None = None
    network: bool = True
    stop_grace_sec: Annotated[float, Meta(ge=0)] = 30.0
    backend: BackendSpec = BackendSpec()


SCRATCH_CWD = "cwd"
"""The job's own working folder inside its round folder (``advanced.scratch_cwd``)."""


def uses_scratch_cwd(
    advanced: AdvancedSpec, root: str | os.PathLike[str], *, guarded: bool
) -> bool:
    """Whether a round's job runs in ``{round_dir}/cwd`` (``advanced.scratch_cwd``; by
    default for guarded rounds whose working folder is the project root)."""
    if advanced.scratch_cwd is not None:
        return advanced.scratch_cwd
    work = os.path.join(root, advanced.working_dir)
    return guarded and os.path.realpath(work) == os.path.realpath(root)


def job_path_base(path: str, *, cwd: str, project_root: str) -> str:
    """The folder a relative log, signal or metric ``path`` of a round is taken from: the
    job's working folder (where it wrote it), but the project root for ``.trainee/...``
    (trainee's own folder, never linked into a scratch folder)."""
    first = os.path.normpath(path).split(os.sep, 1)[0]
    return project_root if first == ".trainee" else cwd


class MlflowSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``integrations.mlflow``: each finished round becomes an MLflow run, nested under a
    run per session. ``tracking_uri``: ``http(s)://host:port`` (a tracking server),
    ``sqlite:///file.db``, ``file:/folder`` or a plain folder (MLflow's file store;
    relative paths are taken from the project root). ``experiment``: default the
    project folder's name. ``artifacts``: upload the round log and config."""

    tracking_uri: NonEmptyStr
    experiment: NonEmptyStr | None = None
    artifacts: bool = True


class WandbSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``integrations.wandb``: each finished round becomes an offline W&B run (grouped by
    session) under ``dir`` (relative to the project root), for a later ``wandb sync``.
    ``project``: default the project folder's name."""

    dir: NonEmptyStr = ".trainee/wandb"
    project: NonEmptyStr | None = None
    entity: NonEmptyStr | None = None
    artifacts: bool = True


class NotifySpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``integrations.notify`` (and ``notify`` in ~/.trainee/config.json): Apprise URLs
    told about ``on`` (default: every event); ``stall_minutes`` (default 30): a running
    round without output or heartbeat for that long counts as stalled. The project's
    ``urls`` are added to the user's; its ``on`` and ``stall_minutes`` win."""

    urls: tuple[NonEmptyStr, ...] = ()
    on: tuple[NotifyEvent, ...] | None = None
    stall_minutes: Annotated[float, Meta(gt=0)] | None = None


class IntegrationsSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``integrations``: where a session's rounds are also reported (each an optional
    extra: ``trainee[mlflow]``, ``trainee[wandb]``, ``trainee[notify]``)."""

    mlflow: MlflowSpec | None = None
    wandb: WandbSpec | None = None
    notify: NotifySpec | None = None


class ProjectFileSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``.trainee/project.yaml``."""

    version: Literal[1] = 1
    data: tuple[DataSpec, ...] = ()
    launch: LaunchSpec = msgspec.field(default_factory=LaunchSpec)
    run: RunSpec = msgspec.field(default_factory=RunSpec)
    output: OutputSpec = msgspec.field(default_factory=OutputSpec)
    metrics: MetricsSpec = msgspec.field(default_factory=MetricsSpec)
    advanced: AdvancedSpec = msgspec.field(default_factory=AdvancedSpec)
    llm: LlmBudgetSpec = msgspec.field(default_factory=LlmBudgetSpec)
    decision: DecisionSpec = msgspec.field(default_factory=DecisionSpec)
    integrations: IntegrationsSpec = msgspec.field(default_factory=IntegrationsSpec)


# -- tuning.yaml -----------------------------------------------------------------


class ParamSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One agent-controlled parameter. Exactly one of ``flag`` (``--lr 0.001``),
    ``config_path`` (a key of the baseline config) or ``override`` (``optimizer.lr=0.001``)."""

    name: Name
    flag: Flag | None = None
    config_path: ConfigPath | None = None
    override: OverrideKey | None = None
    type: ParamType
    default: Value | None = None
    min_value: int | float | None = None
    max_value: int | float | None = None
    choices: tuple[Value, ...] | None = None
    log: bool = False
    description: str = ""


class TuningFileSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``.trainee/tuning.yaml``. ``constraints``: conditions every round's values must
    keep (``"n_embd % n_head == 0"``; see :mod:`trainee.spec.constraints`)."""

    version: Literal[1] = 1
    params: tuple[ParamSpec, ...] = ()
    constraints: Annotated[tuple[NonEmptyStr, ...], Meta(max_length=64)] = ()


# -- Struct -> YAML data ---------------------------------------------------------


def struct_to_yaml_data(struct: msgspec.Struct, *, omit_defaults: bool = True) -> dict[str, Any]:
    """Plain dicts/lists/scalars for ``struct``, in field order.

    With ``omit_defaults`` (for new files) a field equal to its default is left out;
    ``version`` is always kept. Without it every field is present, ``None`` included.
    """
    out: dict[str, Any] = {}
    for field in msgspec.structs.fields(struct):
        value = getattr(struct, field.name)
        if omit_defaults and field.name != "version" and _is_default(field, value):
            continue
        out[field.encode_name] = _to_data(value, omit_defaults)
    return out


def _is_default(field: msgspec.structs.FieldInfo, value: Any) -> bool:
    if field.default is not msgspec.NODEFAULT:
        return bool(_same(value, field.default))
    if field.default_factory is not msgspec.NODEFAULT:
        return bool(_same(value, field.default_factory()))
    return False


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same kind (``True`` is not ``1``; ``1`` is ``1.0``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _to_data(value: Any, omit_defaults: bool) -> Any:
    if isinstance(value, msgspec.Struct):
        return struct_to_yaml_data(value, omit_defaults=omit_defaults)
    if isinstance(value, tuple | list):
        return [_to_data(item, omit_defaults) for item in value]
    if isinstance(value, enum.Enum):
        return value.value
    return value


# -- YAML data -> Struct ---------------------------------------------------------

FieldPath = tuple[str | int, ...]
"""A position in a document: ``("params", 1, "min_value")``."""

LineMap = dict[FieldPath, int]
"""1-based line of every mapping key and sequence item, by path (``()`` is line 1)."""

T = TypeVar("T", bound=msgspec.Struct)

_AT = re.compile(r"^(?P<msg>.*?)(?: - at `(?P<path>\$[^`]*)`)?$", re.S)
_SEGMENT = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


def format_field(path: FieldPath) -> str:
    """``("params", 1, "min_value")`` -> ``params[1].min_value``."""
    out = ""
    for seg in path:
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else seg)
    return out


def line_of(lines: LineMap | None, path: FieldPath) -> int | None:
    """The line of ``path``, else of its nearest parent present in ``lines``."""
    if lines is None:
        return None
    for end in range(len(path), -1, -1):
        line = lines.get(path[:end])
        if line is not None:
            return line
    return 1


def config_error(file: str, line: int | None, path: FieldPath | str, reason: str) -> ConfigError:
    """The one way this package builds a ConfigError: ``file:line: field: reason``."""
    field = path if isinstance(path, str) else format_field(path)
    where = file if line is None else f"{file}:{line}"
    message = f"{where}: {field}: {reason}" if field else f"{where}: {reason}"
    return ConfigError(message, file=file, line=line, field=field or None, reason=reason)


def decode_file(data: Any, type_: type[T], *, file: str, lines: LineMap | None) -> T:
    """``msgspec.convert`` plain YAML data into ``type_``; errors name file, line and field."""
    if not isinstance(data, dict):
        line = 1 if lines is not None else None
        raise config_error(
            file, line, "", f"the top level must be a mapping, got {kind_words(data)}"
        )
    _check_integers(data, (), file, lines)
    try:
        return msgspec.convert(data, type=type_)
    except msgspec.ValidationError as exc:
        raise _mapped_error(exc, data, type_, file, lines) from None


INT_LIMIT = 2**63
"""Integers in project and tuning files fit in 64 bits (the store, JSON peers, numpy)."""


def _check_integers(data: Any, path: FieldPath, file: str, lines: LineMap | None) -> None:
    """Refuse an integer of more than 64 bits anywhere in ``data``, naming where."""
    if isinstance(data, bool):
        return
    if isinstance(data, int):
        if not -INT_LIMIT <= data < INT_LIMIT:
            digits = len(str(abs(data))) if abs(data) < 10**4000 else "over 4000"
            raise config_error(
                file,
                line_of(lines, path),
                path,
                f"integer out of range ({digits} digits; integers must fit in 64 bits, "
                f"|n| < 2**63)",
            )
    elif isinstance(data, dict):
        for key, value in data.items():
            _check_integers(value, (*path, str(key)), file, lines)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _check_integers(value, (*path, i), file, lines)


def _mapped_error(
    exc: msgspec.ValidationError, data: Any, type_: type[Any], file: str, lines: LineMap | None
) -> ConfigError:
    match = _AT.match(str(exc))
    msg = match.group("msg") if match else str(exc)
    path = _parse_path(match.group("path") if match and match.group("path") else "$")
    root = msgspec.inspect.type_info(type_)
    info = _info_at(root, path, data)

    unknown = re.match(r"Object contains unknown field `(.*)`$", msg)
    if unknown:
        key = unknown.group(1)
        where = (*path, key)
        names = _field_names(info)
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else f"expected one of: {', '.join(names)}"
        return config_error(file, line_of(lines, where), where, f"unknown key '{key}'; {hint}")

    missing = re.match(r"Object missing required field `(.*)`$", msg)
    if missing:
        where = (*path, missing.group(1))
        return config_error(file, line_of(lines, path), where, "missing required field")

    found, value = _value_at(data, path)
    allowed = _allowed_values(info)
    union = _tags(_info_at_union(root, path[:-1], data)) if path else None
    if union is not None and path[-1] == union[0]:
        allowed = union[1]
    if path == ("version",):
        return config_error(
            file, line_of(lines, path), path, f"unsupported version {_short(value)}; must be 1"
        )
    if allowed is not None:
        reason = f"invalid value {_short(value)}; expected one of: {', '.join(map(str, allowed))}"
        if isinstance(value, str):
            close = difflib.get_close_matches(value, [str(a) for a in allowed], n=1, cutoff=0.6)
            if close:
                reason += f" (did you mean '{close[0]}'?)"
        return config_error(file, line_of(lines, path), path, reason)
    reason = msg[:1].lower() + msg[1:]
    if found and not isinstance(value, dict | list):
        reason += f", got {_short(value)}" if "got" not in msg else f" ({_short(value)})"
    return config_error(file, line_of(lines, path), path, reason)


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_path(text: str) -> FieldPath:
    out: list[str | int] = []
    for m in _SEGMENT.finditer(text[1:]):
        out.append(m.group(1) if m.group(1) is not None else int(m.group(2)))
    return tuple(out)


def _unwrap(info: msgspec.inspect.Type) -> msgspec.inspect.Type:
    """The interesting member of an optional/union type (struct, array or enum first)."""
    if isinstance(info, msgspec.inspect.UnionType):
        for t in info.types:
            if isinstance(
                t,
                msgspec.inspect.StructType
                | msgspec.inspect.VarTupleType
                | msgspec.inspect.ListType
                | msgspec.inspect.EnumType
                | msgspec.inspect.LiteralType,
            ):
                return t
    return info


def _info_at(
    info: msgspec.inspect.Type, path: FieldPath, data: Any = None
) -> msgspec.inspect.Type | None:
    current: msgspec.inspect.Type | None = info
    for seg in path:
        if current is None:
            return None
        current = _unwrap(_tagged(current, data))
        if isinstance(seg, int):
            if isinstance(current, msgspec.inspect.VarTupleType | msgspec.inspect.ListType):
                current = current.item_type
            else:
                return None
        elif isinstance(current, msgspec.inspect.StructType):
            current = next((f.type for f in current.fields if f.encode_name == seg), None)
        else:
            return None
        data = _value_at(data, (seg,))[1]
    return _unwrap(_tagged(current, data)) if current is not None else None


def _info_at_union(
    info: msgspec.inspect.Type, path: FieldPath, data: Any
) -> msgspec.inspect.Type | None:
    """The type at ``path`` before a tagged union is resolved (None when not a union)."""
    parent = _info_at(info, path[:-1], data) if path else info
    if not path:
        return info
    seg = path[-1]
    if isinstance(parent, msgspec.inspect.VarTupleType | msgspec.inspect.ListType) and isinstance(
        seg, int
    ):
        return parent.item_type
    if isinstance(parent, msgspec.inspect.StructType):
        return next((f.type for f in parent.fields if f.encode_name == seg), None)
    return None


def _tags(info: msgspec.inspect.Type | None) -> tuple[str, list[str]] | None:
    """The tag field and the tags of a union of tagged Structs (``run.prune.rules``)."""
    if not isinstance(info, msgspec.inspect.UnionType):
        return None
    structs = [t for t in info.types if isinstance(t, msgspec.inspect.StructType)]
    if not structs or any(t.tag_field is None for t in structs):
        return None
    return str(structs[0].tag_field), [str(t.tag) for t in structs]


def _tagged(info: msgspec.inspect.Type, data: Any) -> msgspec.inspect.Type:
    """The member of a tagged union that ``data`` (a mapping) names by its tag."""
    tags = _tags(info)
    if tags is None or not isinstance(data, dict):
        return info
    assert isinstance(info, msgspec.inspect.UnionType)
    for t in info.types:
        if isinstance(t, msgspec.inspect.StructType) and t.tag == data.get(tags[0]):
            return t
    return info


def _field_names(info: msgspec.inspect.Type | None) -> list[str]:
    if isinstance(info, msgspec.inspect.StructType):
        return [f.encode_name for f in info.fields]
    return []


def _allowed_values(info: msgspec.inspect.Type | None) -> list[Any] | None:
    if isinstance(info, msgspec.inspect.EnumType):
        return [m.value for m in info.cls]
    if isinstance(info, msgspec.inspect.LiteralType):
        return list(info.values)
    return None


def _value_at(data: Any, path: FieldPath) -> tuple[bool, Any]:
    current = data
    for seg in path:
        in_list = isinstance(seg, int) and isinstance(current, list) and 0 <= seg < len(current)
        in_map = isinstance(seg, str) and isinstance(current, dict) and seg in current
        if in_list or in_map:
            current = current[seg]
        else:
            return False, None
    return True, current
