"""Training budgets: which options limit a round's training, whether the value they
start with is bounded, and which schedule lengths are tied to them.

One source of truth for ``trainee init`` (what goes into ``run.fixed_args`` and what
it says) and ``trainee doctor`` (its ``limits`` row). A value means "no limit" when
it is None, 0 or negative (``--max-steps -1``: train forever) and is *very long* at
or above :data:`HUGE_STEPS` steps / :data:`HUGE_EPOCHS` epochs (nanoGPT's 600000
iterations). A budget is bounded when at least one limit has a finite value that is
not very long; a very long value is flagged even then.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import msgspec

from trainee.discovery.options import EntryOption, normalize_name

__all__ = [
    "HUGE_EPOCHS",
    "HUGE_STEPS",
    "Budget",
    "LimitOption",
    "analyse_budget",
    "is_limit_key",
    "is_tied_key",
    "parse_value",
]

HUGE_STEPS = 100_000
"""Steps / iterations at or above this are a very long run for one tuning round."""
HUGE_EPOCHS = 1_000
"""Epochs at or above this are a very long run (Lightning's default max_epochs)."""

_LIMIT = re.compile(
    r"^(?:(?:max|num|n|total|train|training)_){0,2}"
    r"(?:epochs?|steps?|iters?|iterations?|updates?|batches)(?:_per_epoch)?$"
)
_TIME = re.compile(
    r"^(?:max_(?:time|duration|minutes|hours|seconds|runtime|wall_?time)|"
    r"time_(?:limit|budget)|(?:train|training)_time(?:_limit)?|budget_(?:minutes|hours|seconds))$"
)
_TIED = re.compile(
    r"^(?:(?:lr|num|n)_)?(?:decay|warmup|warm_up|cooldown|anneal(?:ing)?|cosine|cycle|"
    r"ramp(?:_?up)?|schedule|scheduler|lr_decay|lr_warmup)_(?:steps?|iters?|iterations?|"
    r"epochs?|updates?|length)$|^t_max$|^(?:lr_)?(?:decay|schedule)_(?:len|length|horizon)$"
)
_PER_EPOCH = re.compile(r"_per_epoch$")


def _leaf(name: str) -> str:
    return normalize_name(name).rsplit(".", 1)[-1]


def is_limit_key(name: str) -> bool:
    """A training budget name: epochs, steps, iterations, a time limit."""
    leaf = _leaf(name)
    return bool(_LIMIT.match(leaf) or _TIME.match(leaf))


def is_tied_key(name: str) -> bool:
    """A schedule length that follows the budget (lr_decay_iters, warmup_steps, T_max)."""
    return bool(_TIED.match(_leaf(name)))


def _unit(name: str) -> str:
    leaf = _leaf(name)
    if _TIME.match(leaf):
        return "time"
    if "epoch" in leaf and not _PER_EPOCH.search(leaf):
        return "epochs"
    return "steps"


def parse_value(text: str) -> Any:
    """A command-line value as a number when it reads as one (``2000``, ``3.0``, ``1e4``)."""
    low = text.strip().lower()
    if low in ("none", "null", ""):
        return None
    try:
        return int(low)
    except ValueError:
        pass
    try:
        return float(low)
    except ValueError:
        return text


class LimitOption(msgspec.Struct, kw_only=True):
    """One budget option of an entrypoint (``kind: limit``) or a schedule length tied
    to it (``kind: tied``), with the value a round starts with.

    ``set_by`` says where that value comes from when it is not the code's default
    (``launch.command``, ``run.fixed_args``); ``problem`` says why it must be chosen.
    """

    flag: str
    name: str
    kind: Literal["limit", "tied"]
    unit: str
    value: Any
    default: Any = None
    set_by: str | None = None
    problem: str | None = None
    help: str = ""


class Budget(msgspec.Struct, kw_only=True):
    """The limits of one entrypoint. ``bounded``: a finite, not very long limit is set."""

    limits: list[LimitOption]
    tied: list[LimitOption]
    bounded: bool

    @property
    def problems(self) -> list[LimitOption]:
        return [x for x in self.limits + self.tied if x.problem]

    @property
    def primary(self) -> LimitOption | None:
        """The limit a user should choose first: steps over epochs over time."""
        order = {"steps": 0, "epochs": 1, "time": 2}
        ranked = sorted(self.limits, key=lambda x: order.get(x.unit, 3))
        return ranked[0] if ranked else None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _unlimited(value: Any, unit: str) -> bool:
    if unit == "time":
        return value is None or (_is_number(value) and value <= 0)
    return value is None or (_is_number(value) and value <= 0)


def _huge(value: Any, unit: str) -> bool:
    if not _is_number(value):
        return False
    if unit == "epochs":
        return bool(value >= HUGE_EPOCHS)
    if unit == "steps":
        return bool(value >= HUGE_STEPS)
    return False


def _option_ok(o: EntryOption) -> bool:
    return o.nargs in (None, "?") and o.type in ("int", "float", "str", None)


def analyse_budget(
    options: Iterable[EntryOption],
    settings: Mapping[str, tuple[Any, str]] | None = None,
) -> Budget:
    """The budget of an entrypoint's options. ``settings`` maps an option's dest (or
    flag) to the value the run gives it and where (``("2000", "run.fixed_args")``)."""
    given = dict(settings or {})
    limits: list[LimitOption] = []
    tied: list[LimitOption] = []
    for o in options:
        if not _option_ok(o):
            continue
        kind: Literal["limit", "tied"]
        if is_limit_key(o.dest):
            kind = "limit"
        elif is_tied_key(o.dest):
            kind = "tied"
        else:
            continue
        if o.type == "str" and _unit(o.dest) != "time":
            continue
        value, set_by = o.default, None
        for key in (o.dest, normalize_name(o.dest), *o.flags):
            if key in given:
                raw, set_by = given[key]
                value = parse_value(raw) if isinstance(raw, str) else raw
                break
        item = LimitOption(
            flag=o.flag,
            name=o.dest,
            kind=kind,
            unit=_unit(o.dest),
            value=value,
            default=o.default,
            set_by=set_by,
            help=o.help,
        )
        (limits if kind == "limit" else tied).append(item)
    bounded = any(not _unlimited(x.value, x.unit) and not _huge(x.value, x.unit) for x in limits)
    for x in limits:
        if _huge(x.value, x.unit):
            x.problem = (
                f"{x.flag} = {x.value} is a very long run for one tuning round; choose a "
                "smaller value (rounds should be short and all equal)"
            )
        elif not bounded and x.unit != "time" and _unlimited(x.value, x.unit):
            what = "not set" if x.value is None else f"{x.value}"
            x.problem = (
                f"{x.flag} is {what}, which sets no limit: a round would train until its "
                "timeout; choose a finite value"
            )
    for t in tied:
        if _huge(t.value, t.unit):
            t.problem = (
                f"{t.flag} = {t.value} is a schedule length tied to the training limit; "
                "set it together with the limit"
            )
    return Budget(limits=limits, tied=tied, bounded=bounded)


def tied_mismatches(budget: Budget) -> list[str]:
    """Tied schedule lengths longer than the limit of the same unit (the schedule
    would never finish)."""
    out: list[str] = []
    for t in budget.tied:
        same = [
            x for x in budget.limits if x.unit == t.unit and _is_number(x.value) and x.value > 0
        ]
        if same and _is_number(t.value) and t.value > min(x.value for x in same):
            limit = min(same, key=lambda x: x.value)
            out.append(
                f"{t.flag} = {t.value} is longer than {limit.flag} = {limit.value}: the "
                "schedule never completes; set them together"
            )
    return out
