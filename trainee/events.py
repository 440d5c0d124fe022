"""The event stream's types: one Struct per kind, a tagged union on ``kind``.

Every event travels (on the socket, over SSE, in the store) as one envelope::

    {"kind": "round.started", "id": 17, "ts": 1.7e9, "session": "session-0001", "data": {...}}

Each kind has a data Struct (:class:`RoundStarted`) that its producer builds, and an
envelope Struct tagged with the kind (:class:`RoundStartedEvent`, tag
``round.started``) that the bus wraps it in (id, ts, session). :data:`AnyEvent` is
their union: one decoder reads any daemon event, and consumers dispatch on the type
(the CLI's live view, MCP, the integrations) or on :data:`KINDS` (the page, which gets
:func:`events_schema` from the ``events_schema`` method).

Notes (``note`` and ``note.*``, from ``events_publish``) carry any JSON object and are
:class:`NoteEvent`. A kind that is neither is an error (:class:`UnknownEventKind`,
naming it and the known kinds). Like every wire type these accept fields they do not
know, and a field added later gets a default. Stdlib + msgspec + :mod:`trainee.states`
only: the CLI imports this module (lazily, in its live view).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, ClassVar, Literal, TypeAlias, get_args

import msgspec
from msgspec import UNSET, Meta, UnsetType

from trainee.states import RoundStatus, SessionStatus, StopReason

__all__ = [
    "EVENT_TYPES",
    "KINDS",
    "NOTE_PATTERN",
    "OUTPUT_LINES_PER_EVENT",
    "Activity",
    "ActivityEvent",
    "AnyEvent",
    "BatchFinished",
    "BatchFinishedEvent",
    "BatchStarted",
    "BatchStartedEvent",
    "DaemonStarted",
    "DaemonStartedEvent",
    "Decision",
    "DecisionEvent",
    "DecisionStarted",
    "DecisionStartedEvent",
    "Diff",
    "Event",
    "EventData",
    "FailedAttempt",
    "InvalidEvent",
    "Metric",
    "MetricEvent",
    "MetricPoint",
    "NoteEvent",
    "Output",
    "OutputEvent",
    "OutputLine",
    "Params",
    "RoundData",
    "RoundFinished",
    "RoundFinishedEvent",
    "RoundPromoted",
    "RoundPromotedEvent",
    "RoundReadopted",
    "RoundReadoptedEvent",
    "RoundRerun",
    "RoundRerunEvent",
    "RoundStarted",
    "RoundStartedEvent",
    "RoundState",
    "RoundStateEvent",
    "SessionData",
    "SessionFinished",
    "SessionFinishedEvent",
    "SessionStarted",
    "SessionStartedEvent",
    "UnknownEventKind",
    "data_of",
    "decode_event",
    "envelope",
    "events_schema",
    "is_note",
    "kind_of",
    "project_of",
]

OUTPUT_LINES_PER_EVENT = 200
"""An ``output`` event carries at most this many lines (the latest); ``skipped`` counts
the others of the same batch (they are all in the round log)."""

NOTE_PATTERN = r"^note(\.[a-z0-9_]+)*$(?!\n)"
"""The kinds of annotations outside tools may publish (``events_publish``); the lookahead
after ``$``: Python's ``$`` also matches before a final newline, which a kind never has."""
_NOTE = re.compile(NOTE_PATTERN)


def _doc(text: str) -> Meta:
    return Meta(description=text)


# -- the data of each kind -----------------------------------------------------------


class EventData(msgspec.Struct, kw_only=True):
    """Base of every event's ``data``."""


class SessionData(EventData, kw_only=True):
    """Data of an event of a session: the runner sets ``project`` on each (until then
    it is unset, and left out of the JSON)."""

    project: Annotated[str | UnsetType, _doc("the session's project root")] = UNSET


class RoundData(SessionData, kw_only=True):
    round: Annotated[int, _doc("the round's index in its session (1: the baseline)")]


Diff = Annotated[
    dict[str, Any],
    Meta(
        description='the tunables that differ from the baseline: {name: {"from": its '
        'baseline value, "to": the value of this round}}',
        extra_json_schema={
            "additionalProperties": {
                "type": "object",
                "properties": {"from": {}, "to": {}},
            }
        },
    ),
]
Params = Annotated[dict[str, Any], _doc("every tunable's value, by name")]


class DaemonStarted(EventData, kw_only=True):
    pid: int
    http_url: Annotated[str, _doc("the web page and HTTP API ('' when HTTP is off)")]


class SessionStarted(SessionData, kw_only=True):
    max_rounds: int
    policy: str


class DecisionStarted(RoundData, kw_only=True):
    """The policy is asked for the next step (its first round is ``round``)."""

    policy: str
    slots: Annotated[int, _doc("how many rounds the step may run at once")]
    at: Annotated[float, _doc("when the decision started (Unix time)")]


class FailedAttempt(msgspec.Struct, kw_only=True):
    """A provider request of the decision that failed (failover went on)."""

    provider: str | None = None
    model: str | None = None
    url: str | None = None
    kind: Annotated[str | None, _doc("timeout, http, auth, connection, config or other")] = None
    status: Annotated[int | None, _doc("the HTTP status, when one came back")] = None
    error: str | None = None


class Decision(RoundData, kw_only=True):
    """A decided plan (or a stop) for ``round``."""

    source: Annotated[str, _doc("hybrid policy: whose point this is (S2, S2 modified, own)")]
    notes: list[str]
    policy: str
    provider: str
    model: str
    hypothesis: str
    change_summary: str
    params: Params
    diff: Diff
    expected: str
    stop: bool
    stop_reason: str
    repaired: Annotated[bool, _doc("the answer needed the repair request")]
    response_format: str | None
    attempts: Annotated[int, _doc("provider requests the decision took")]
    failed_attempts: list[FailedAttempt]
    batch: Annotated[int | None, _doc("the step (absent on a stop)")] = None
    batch_size: Annotated[int, _doc("rounds decided in this step")] = 1


class BatchStarted(SessionData, kw_only=True):
    """Several rounds of one step start at once (``run.parallel``)."""

    batch: int
    rounds: list[int]


class BatchFinished(SessionData, kw_only=True):
    batch: int
    rounds: list[int]
    statuses: Annotated[list[RoundStatus], _doc("the rounds' statuses, in the order of rounds")]


class RoundStarted(RoundData, kw_only=True):
    params: Params
    diff: Diff
    hypothesis: str
    command: Annotated[str, _doc("the command line as shown to people")]
    attempt: Annotated[int, _doc("0, or the how-manyth re-run of a round whose job was lost")]
    backend: str
    job_id: Annotated[str | None, _doc("the cluster's job id (None on the local backend)")]
    batch: int
    gpus: Annotated[
        list[int] | None, _doc("the GPUs the round was given (launch.gpus); None without")
    ] = None
    rung: Annotated[int, _doc("its run.screen rung (1 = the lowest); 0 without screening")] = 0
    budget: Annotated[float | None, _doc("its run.screen budget; None without screening")] = None
    promoted_from: Annotated[
        int | None, _doc("the round it was promoted from (run.screen); None otherwise")
    ] = None


class RoundReadopted(RoundData, kw_only=True):
    """A daemon that started again watches a round still running."""

    pid: int | None
    job_id: str | None
    backend: str


class RoundRerun(RoundData, kw_only=True):
    """The round's job was lost: it runs again with the same params."""

    attempt: int


class RoundPromoted(RoundData, kw_only=True):
    """``run.screen`` promoted a round's params to the next rung: this new round."""

    from_round: Annotated[int, _doc("the round whose result earned the promotion")]
    rung: Annotated[int, _doc("the rung it runs at (1 = the lowest)")]
    budget: Annotated[float, _doc("the budget argument's value at that rung")]
    reason: Annotated[str, _doc("why, in one line (its rank among the rung's results)")]


class OutputLine(msgspec.Struct, kw_only=True):
    stream: Literal["stdout", "stderr", "log"]
    text: Annotated[str, _doc("one line as the job wrote it, cut at the line limit")]


class Output(RoundData, kw_only=True):
    """The round's latest output lines."""

    lines: Annotated[list[OutputLine], Meta(max_length=OUTPUT_LINES_PER_EVENT)]
    skipped: Annotated[int, _doc("earlier lines of the same batch not sent (in the log)")] = 0


MetricPoint: TypeAlias = tuple[str, float | None, int | None, int]
"""``[name, value, step, seq]``; a value that is not finite is ``null``."""


class Metric(RoundData, kw_only=True):
    points: Annotated[Sequence[MetricPoint], _doc("the latest points as [name, value, step, seq]")]


class Activity(RoundData, kw_only=True):
    last_activity_at: Annotated[
        float | None, _doc("when the round last showed a sign of life (Unix time)")
    ] = None


class RoundState(RoundData, kw_only=True):
    """A cluster job's state as its engine reports it."""

    state: Annotated[str, _doc("queued, running, exited, cancelled or unknown")]
    detail: str


class RoundFinished(RoundData, kw_only=True):
    status: RoundStatus
    metric: Annotated[float | None, _doc("the primary metric's final value")]
    metric_name: str | None
    finals: Annotated[Mapping[str, float | None], _doc("every metric's final value, by name")]
    verdict: Annotated[str | None, _doc("baseline, kept or rejected")]
    verdict_reason: str
    duration_sec: float | None
    returncode: int | None
    error: str | None
    batch: int
    best_round: int | None


class SessionFinished(SessionData, kw_only=True):
    status: SessionStatus
    stop_reason: StopReason | None
    error: str | None
    stop_detail: Annotated[str | None, _doc("why the policy stopped, in its words")]
    policy: str
    best_round: int | None
    best_metric: float | None
    best_params: dict[str, Any] | None
    baseline_metric: float | None
    metric_name: str | None
    report: Annotated[str, _doc("the path of the session's report.md")]
    log_tail: Annotated[list[str], _doc("the failed baseline's last log lines")]


# -- the envelopes -----------------------------------------------------------------------


class _Envelope(msgspec.Struct, kw_only=True):
    id: Annotated[int, _doc("increases across the daemon's life: the cursor of every stream")]
    ts: Annotated[float, _doc("when it was published (Unix time)")]
    session: str | None = None


class _Typed(_Envelope, kw_only=True, tag_field="kind"):
    """An event of a kind the daemon produces; ``kind`` is its tag."""

    data_type: ClassVar[type[EventData]]

    @property
    def kind(self) -> str:
        tag = self.__struct_config__.tag
        assert isinstance(tag, str)
        return tag


class DaemonStartedEvent(_Typed, kw_only=True, tag="daemon.started"):
    data: DaemonStarted


class SessionStartedEvent(_Typed, kw_only=True, tag="session.started"):
    data: SessionStarted


class DecisionStartedEvent(_Typed, kw_only=True, tag="decision.started"):
    data: DecisionStarted


class DecisionEvent(_Typed, kw_only=True, tag="decision"):
    data: Decision


class BatchStartedEvent(_Typed, kw_only=True, tag="batch.started"):
    data: BatchStarted


class BatchFinishedEvent(_Typed, kw_only=True, tag="batch.finished"):
    data: BatchFinished


class RoundStartedEvent(_Typed, kw_only=True, tag="round.started"):
    data: RoundStarted


class RoundReadoptedEvent(_Typed, kw_only=True, tag="round.readopted"):
    data: RoundReadopted


class RoundRerunEvent(_Typed, kw_only=True, tag="round.rerun"):
    data: RoundRerun


class RoundPromotedEvent(_Typed, kw_only=True, tag="round.promoted"):
    data: RoundPromoted


class OutputEvent(_Typed, kw_only=True, tag="output"):
    data: Output


class MetricEvent(_Typed, kw_only=True, tag="metric"):
    data: Metric


class ActivityEvent(_Typed, kw_only=True, tag="activity"):
    data: Activity


class RoundStateEvent(_Typed, kw_only=True, tag="round.state"):
    data: RoundState


class RoundFinishedEvent(_Typed, kw_only=True, tag="round.finished"):
    data: RoundFinished


class SessionFinishedEvent(_Typed, kw_only=True, tag="session.finished"):
    data: SessionFinished


AnyEvent: TypeAlias = (
    DaemonStartedEvent
    | SessionStartedEvent
    | DecisionStartedEvent
    | DecisionEvent
    | BatchStartedEvent
    | BatchFinishedEvent
    | RoundStartedEvent
    | RoundReadoptedEvent
    | RoundRerunEvent
    | RoundPromotedEvent
    | OutputEvent
    | MetricEvent
    | ActivityEvent
    | RoundStateEvent
    | RoundFinishedEvent
    | SessionFinishedEvent
)
"""Every event kind the daemon produces, tagged by ``kind``."""


class NoteEvent(_Envelope, kw_only=True):
    """An annotation from an outside tool (``events_publish``): any JSON object."""

    kind: Annotated[str, Meta(pattern=NOTE_PATTERN)] = "note"
    data: dict[str, Any] = msgspec.field(default_factory=dict)


Event: TypeAlias = AnyEvent | NoteEvent
"""What the bus publishes and :func:`decode_event` returns."""


EVENT_TYPES: dict[str, type[_Typed]] = {}
"""kind -> its envelope Struct."""
for _cls in get_args(AnyEvent):
    _cls.data_type = next(f.type for f in msgspec.structs.fields(_cls) if f.name == "data")
    EVENT_TYPES[_cls.__struct_config__.tag] = _cls

KINDS: tuple[str, ...] = tuple(EVENT_TYPES)
"""Every kind the daemon produces (notes aside), in the order above."""

_ENVELOPE_OF: dict[type[EventData], type[_Typed]] = {c.data_type: c for c in EVENT_TYPES.values()}


class InvalidEvent(ValueError):
    """An event that does not match its kind's Struct (the message names the field)."""


class UnknownEventKind(InvalidEvent):
    """A kind that is neither one of :data:`KINDS` nor a note."""

    def __init__(self, kind: object) -> None:
        self.kind = kind
        super().__init__(
            f"unknown event kind {kind!r}: not a note (note, note.<name>) and not one of "
            f"{', '.join(KINDS)}"
        )


def kind_of(data: type[EventData] | EventData | type[_Typed]) -> str:
    """The kind of an event type, of its data type, or of a data Struct."""
    cls = data if isinstance(data, type) else type(data)
    if issubclass(cls, _Typed):
        tag = cls.__struct_config__.tag
        assert isinstance(tag, str)
        return tag
    try:
        return _kind(_ENVELOPE_OF[cls])
    except KeyError:
        raise TypeError(f"{cls.__name__} is the data of no event kind") from None


def _kind(cls: type[_Typed]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def envelope(data: EventData, *, id: int, ts: float, session: str | None) -> AnyEvent:
    """The event of ``data``: its kind's envelope with the bus's id and time."""
    cls: Any = _ENVELOPE_OF.get(type(data))
    if cls is None:
        raise TypeError(f"{type(data).__name__} is the data of no event kind")
    event: AnyEvent = cls(id=id, ts=ts, session=session, data=data)
    return event


def data_of(kind: str, data: Mapping[str, Any]) -> EventData:
    """``data`` (a JSON object) as the Struct of ``kind``; InvalidEvent naming the field
    and the kind when it does not fit, UnknownEventKind for a kind that is not one."""
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        raise UnknownEventKind(kind)
    try:
        return msgspec.convert(data, cls.data_type)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(f"event {kind!r}: {exc}") from None


_decoder = msgspec.json.Decoder(AnyEvent)


def decode_event(raw: bytes | str | Mapping[str, Any]) -> Event:
    """One event from its JSON (or its decoded object): its kind's Struct or a NoteEvent.

    UnknownEventKind for a kind that is neither; InvalidEvent (naming the field) for an
    event that does not fit its kind's Struct."""
    obj: Any = raw
    if isinstance(raw, bytes | str):
        try:
            return _decoder.decode(raw)
        except msgspec.ValidationError as exc:
            obj = msgspec.json.decode(raw)
            if isinstance(obj, dict) and obj.get("kind") in EVENT_TYPES:
                raise InvalidEvent(f"event {obj.get('kind')!r}: {exc}") from None
    if not isinstance(obj, Mapping):
        raise InvalidEvent(f"an event is a JSON object, got {type(obj).__name__}")
    kind = obj.get("kind")
    try:
        if kind in EVENT_TYPES:
            typed: AnyEvent = msgspec.convert(obj, AnyEvent)
            return typed
        if isinstance(kind, str) and is_note(kind):
            return msgspec.convert(obj, NoteEvent)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(f"event {kind!r}: {exc}") from None
    raise UnknownEventKind(kind)


def is_note(kind: str) -> bool:
    """Whether ``kind`` is a note's (``note``, ``note.<name>``)."""
    return _NOTE.fullmatch(kind) is not None


def project_of(event: Event) -> str | None:
    """The project root a session's event names (None for daemon events and notes)."""
    data = event.data
    if isinstance(data, SessionData) and isinstance(data.project, str):
        return data.project
    return None


def events_schema() -> dict[str, Any]:
    """The JSON schema of one event: the tagged union (its ``discriminator.mapping``
    names every kind) plus notes, the definitions under ``$defs``."""
    (union, note), defs = msgspec.json.schema_components(
        [AnyEvent, NoteEvent], ref_template="#/$defs/{name}"
    )
    return {
        "title": "trainee event",
        "description": "One event: {kind, id, ts, session, data}; data's shape depends on kind.",
        "anyOf": [*union["anyOf"], note],
        "discriminator": union["discriminator"],
        "$defs": defs,
    }
