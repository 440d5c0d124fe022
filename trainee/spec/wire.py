"""Wire types: the Params and Result Structs of every registry method, and events.

Every field has a default where that makes sense, so old clients keep working.
The registry decodes params strictly (:meth:`trainee.api.registry.Method.decode_params`):
a param a method does not take is refused with -32602 naming it (a typo is never
ignored), an int is a JSON integer (``32.0`` is refused), a ``SessionRef`` takes
any form of :mod:`trainee.ids` (``1``, ``0001``, ``session-0001``) and arrives as
``session-0001``, and a ``RoundRef`` (``1``, ``0001``, ``round-0001``) arrives as an int. Results may grow fields: clients ignore the ones they do not know.
Stdlib + msgspec only: the CLI may import this module.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import Meta

from trainee.events import NOTE_PATTERN
from trainee.ids import ROUND_PATTERN, SESSION_PATTERN

NonNegInt = Annotated[int, Meta(ge=0)]
PosInt = Annotated[int, Meta(ge=1)]

SESSION_META = Meta(
    description="a session: session-0001, 0001 or 1",
    extra_json_schema={"type": ["string", "integer"], "minimum": 1, "pattern": SESSION_PATTERN},
)
SessionRef = Annotated[str, SESSION_META]
"""A param naming a session: the registry parses it with :func:`trainee.ids.canonical_session`
and the handler gets the canonical ``session-0001``."""

ROUND_META = Meta(
    description="a round: 1, 0001 or round-0001",
    extra_json_schema={"type": ["integer", "string"], "minimum": 1, "pattern": ROUND_PATTERN},
)
RoundRef = Annotated[int, ROUND_META]
"""A param naming a round: the registry parses it with :func:`trainee.ids.parse_round`
(a JSON integer, ``"0001"`` or ``"round-0001"``) and the handler gets the int."""


class Wire(msgspec.Struct, kw_only=True, omit_defaults=False):
    """Base of every Params/Result Struct."""


# -- events ----------------------------------------------------------------------


class Event(Wire):
    """One entry of the event stream, whatever its kind (as the store keeps it).

    ``id`` increases monotonically across the daemon's life (and so within each
    session); it is the cursor of ``events_watch`` and the SSE ``id:``. The shape of
    ``data`` for each ``kind`` is the kind's Struct in :mod:`trainee.events`, served by
    ``events_schema``.
    """

    id: int
    kind: str
    ts: float
    session: str | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)


# -- daemon ----------------------------------------------------------------------


class NoParams(Wire):
    pass


class PublishedStates(Wire):
    """The statuses and stop reasons (``trainee.states.published()``): clients decide by
    these instead of spelling them again."""

    round_statuses: list[str]
    round_finished: list[str]
    """A round in one of these is over."""
    session_statuses: list[str]
    session_ended: list[str]
    """A session in one of these has ended (it may be resumed)."""
    stop_reasons: dict[str, str]
    """Each stop reason and the status a session ends with for it."""


class HelloResult(Wire):
    name: str
    version: str
    api_version: int
    pid: int
    started_at: float
    socket: str
    http_url: str | None
    project_root: str | None
    capabilities: list[str]
    states: PublishedStates
    policies: dict[str, bool]
    """Each decision policy by name: whether it needs an LLM provider."""


class ToolsListParams(Wire):
    name: str | None = None


class StopDaemonResult(Wire):
    stopping: bool


class EventsWatchParams(Wire):
    """Stream events as ``events`` notifications on this connection."""

    since: NonNegInt | None = None
    session: SessionRef | None = None
    kinds: list[str] | None = None


class EventsWatchResult(Wire):
    watch_id: int
    cursor: int
    oldest: int


class EventsUnwatchParams(Wire):
    watch_id: int


class EventsUnwatchResult(Wire):
    stopped: bool


class EventsListParams(Wire):
    since: NonNegInt = 0
    session: SessionRef | None = None
    limit: Annotated[int, Meta(ge=1, le=10_000)] = 1000


class EventsListResult(Wire):
    events: list[Event]
    cursor: int
    gap: bool = False


class EventsSchemaResult(Wire):
    """The event stream's types (:mod:`trainee.events`)."""

    kinds: list[str]
    """Every kind the daemon produces (notes, ``note`` and ``note.*``, aside)."""
    schema: dict[str, Any]
    """The JSON schema of one event: a union tagged by ``kind`` (its
    ``discriminator.mapping`` names each kind's definition) plus notes."""


class EventsPublishParams(Wire):
    """An annotation from an outside tool, appended to the event stream."""

    kind: Annotated[str, Meta(pattern=NOTE_PATTERN)] = "note"
    session: SessionRef | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)


MAX_TAIL_LINES = 10_000


class LogsTailParams(Wire):
    """Read a round log from an offset, like Supervisor's tailProcessStdoutLog."""

    session: SessionRef
    round: RoundRef
    offset: int = -65536
    length: Annotated[int, Meta(ge=0, le=16 * 2**20)] = 65536
    project_root: str | None = None
    tail: (
        Annotated[
            int,
            Meta(
                description="only the last N lines (offset and length are then ignored)",
                extra_json_schema={"minimum": 1, "maximum": MAX_TAIL_LINES},
            ),
        ]
        | None
    ) = None
    """Only the last ``tail`` lines (1 to MAX_TAIL_LINES; checked by logs_tail with a
    message naming the range)."""


class LogsTailResult(Wire):
    path: str
    data: str
    offset: int
    next_offset: int
    size: int
    overflow: bool


# -- the spec's tools (their handlers land with their issues) --------------------


class ProjectRootParams(Wire):
    project_root: str | None = None


class ProjectRegisterParams(Wire):
    """project.yaml fields at top level, plus ``tuning`` and ``project_root``."""

    project_root: str
    version: int = 1
    data: list[dict[str, Any]] = msgspec.field(default_factory=list)
    launch: dict[str, Any] = msgspec.field(default_factory=dict)
    run: dict[str, Any] = msgspec.field(default_factory=dict)
    output: dict[str, Any] = msgspec.field(default_factory=dict)
    metrics: dict[str, Any] = msgspec.field(default_factory=dict)
    advanced: dict[str, Any] = msgspec.field(default_factory=dict)
    llm: dict[str, Any] = msgspec.field(default_factory=dict)
    decision: dict[str, Any] = msgspec.field(default_factory=dict)
    integrations: dict[str, Any] = msgspec.field(default_factory=dict)
    tuning: dict[str, Any] = msgspec.field(default_factory=dict)


class ProjectUpdateContextParams(Wire):
    project_root: str | None = None
    content: str = ""
    append: bool = False


class ProviderFields(Wire, forbid_unknown_fields=True):
    """One provider's saved fields: None leaves a field alone, "" clears it."""

    model: str | None = None
    api_key: str | None = None
    base_url: str | None = None


class ProviderUpdateParams(Wire, forbid_unknown_fields=True):
    """``provider`` makes that provider the active one; ``model`` / ``api_key`` /
    ``base_url`` belong to it. ``providers`` saves other providers without switching
    (``{"openai_compatible": {"base_url": ..., "model": ...}}``), and ``failover`` is the
    order in which they are tried when the active one fails. Unknown keys are an error."""

    provider: str | None = None
    model: str | None = None
    api_key: str | None = None
    base_url: str | None = None
    providers: dict[str, ProviderFields] | None = None
    failover: list[str] | None = None
    llm_timeout_sec: Annotated[float, Meta(gt=0)] | None = None
    llm_temperature: Annotated[float, Meta(ge=0, le=2)] | None = None


class DebugUpdateParams(Wire):
    enabled: bool


class SystemPromptUpdateParams(Wire):
    prompt: str


class PromptPreviewParams(Wire):
    project_root: str | None = None
    session: SessionRef | None = None


class PromptPresetSaveParams(Wire):
    name: Annotated[str, Meta(min_length=1, max_length=100)]
    prompt: str
    kind: str = "system"


class LoopStartParams(Wire):
    project_root: str | None = None
    security_mode: str | None = None
    max_rounds: PosInt | None = None
    policy: str | None = None
    resume: SessionRef | None = None
    env: dict[str, str] | None = None
    cwd: str | None = None


class SessionParams(Wire):
    session: SessionRef | None = None
    project_root: str | None = None


class RunsListParams(Wire):
    project_root: str | None = None
    session: SessionRef | None = None
    limit: Annotated[int, Meta(ge=1, le=10_000)] = 100


class RunsGetParams(Wire):
    run_id: PosInt
    project_root: str | None = None


class ProjectInitParams(Wire):
    project_root: str
    baseline_config: str | None = None
    force: bool = False
    command: str | None = None
    """The training command (split like a shell); its script or module must exist."""
    skip_provider_test: bool = False
    env: dict[str, str] | None = None


class ProjectPrepareParams(Wire):
    project_root: str
    replace: bool = False
    skip_provider_test: bool = False
    env: dict[str, str] | None = None


TUNABLES_LIMIT = 16
"""Suggestions per ``tunables discover`` / ``prepare`` unless asked otherwise: the known
hyperparameter families rank first, and a search over more knobs learns little in a
session's few rounds."""


class TunablesDiscoverParams(Wire):
    project_root: str
    apply: bool = False
    replace: bool = False
    limit: Annotated[int, Meta(ge=1, le=1000)] = TUNABLES_LIMIT


class DoctorParams(Wire):
    project_root: str
    skip_provider_test: bool = False
    env: dict[str, str] | None = None
    policy: str | None = None
    """The policy the session will use (``trainee run --policy``); default: decision.policy."""


class DryRunParams(Wire):
    project_root: str
    security_mode: str | None = None
    env: dict[str, str] | None = None


# -- analysis (session_analysis) ---------------------------------------------------------


class SessionAnalysisParams(Wire):
    """A session's analysis; with ``left_round`` / ``right_round`` / ``right_session`` also
    a comparison of two rounds: left is this session's ``left_round`` (default its best
    round), right is ``right_session``'s (default this session) ``right_round`` (default:
    that session's best round, or this session's baseline when both sides are one session)."""

    session: SessionRef | None = None
    project_root: str | None = None
    left_round: RoundRef | None = None
    right_round: RoundRef | None = None
    right_session: SessionRef | None = None
    compare: bool = False
    """Compare even without any of the three (best against baseline, or the other best);
    no comparison while the session has no round."""


class AnalysisTunable(Wire):
    """One plotted axis: a tunable's type, bounds, choices and scale."""

    name: str
    type: str
    log: bool = False
    min_value: float | None = None
    max_value: float | None = None
    choices: list[Any] | None = None


class AnalysisRound(Wire):
    """One round as the parallel-coordinates and slice plots draw it."""

    index: int
    status: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    metric: float | None = None
    verdict: str | None = None
    hypothesis: str = ""


class ParamImportance(Wire):
    """Optuna's importance of each tunable (shares summing to 1), or why there is none."""

    available: bool
    evaluator: str
    values: dict[str, float] = msgspec.field(default_factory=dict)
    note: str = ""


class ComparedRound(Wire):
    """One side of a comparison; ``curves``: every metric's points as ``[step, value]``
    (the step, else the point's position in the log), at most a few hundred per metric."""

    session: str
    round: int
    status: str
    metric: float | None = None
    verdict: str | None = None
    verdict_reason: str = ""
    hypothesis: str = ""
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    curves: dict[str, list[tuple[float, float]]] = msgspec.field(default_factory=dict)


class ParamDiff(Wire):
    name: str
    left: Any = None
    right: Any = None
    changed: bool = False


class Comparison(Wire):
    """``curve_metric``: the curve shown first: the primary metric when a side has more
    than its final value, else the metric logged most often (by either side)."""

    metric: str
    left: ComparedRound
    right: ComparedRound
    params: list[ParamDiff] = msgspec.field(default_factory=list)
    curve_metric: str = ""


class SessionAnalysis(Wire):
    """The analysis views' data: axes, rounds, importance, and an optional comparison."""

    session: str
    metric: str
    goal: str
    importance: ParamImportance
    baseline_round: int | None = None
    best_round: int | None = None
    tunables: list[AnalysisTunable] = msgspec.field(default_factory=list)
    rounds: list[AnalysisRound] = msgspec.field(default_factory=list)
    comparison: Comparison | None = None
