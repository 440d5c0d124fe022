"""The decision plan: its JSON schema, tolerant parsing, validation and the repair request.

A plan names only tuning.yaml parameters, by their exact names. Parsing is
tolerant about the wrapping (code fences, prose around the JSON) but never
about the names: a parameter given by its flag or a close synonym is reported
back with a suggestion, it is never renamed. Validation lists every problem at
once, so the model gets exactly one repair request with all of them.

When several rounds run at once the model is asked for k plans in one answer,
``{"plans": [plan, ...]}``: :func:`plans_json_schema`, :func:`parse_plans` and
:func:`validate_plans` are the batch counterparts, reading each plan exactly as a
single one is read. A batch problem names its plan: ``plans[1].params.lr``
(``plans[0]`` is the first plan).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from trainee.research.text import truncate
from trainee.spec import ParamType, TunableSpec
from trainee.spec.constraints import Constraint
from trainee.spec.values import (
    constraint_problems,
    format_value,
    value_problem,
    values_equal,
)

__all__ = [
    "PLAN_KEYS",
    "DecisionPlan",
    "ParseResult",
    "PlansResult",
    "Problem",
    "effective_params",
    "format_value",
    "params_diff",
    "params_equal",
    "parse_plan",
    "parse_plans",
    "placeholder_problem",
    "plan_field",
    "plan_json_schema",
    "plans_json_schema",
    "repair_message",
    "resolve_stop",
    "single_change_exclusions",
    "suggest_name",
    "validate_plan",
    "validate_plans",
    "value_grid",
    "values_equal",
]

PLAN_KEYS = ("hypothesis", "change_summary", "params", "expected", "stop", "stop_reason")
"""The fields of a plan, in the order the model is asked to write them."""

_MAX_TEXT = 200_000
"""Only this many characters of a response are searched for the plan (the tail is kept)."""

_MAX_DECODES = 400
"""At most this many candidate objects are decoded, so garbage input stays cheap."""

_TEXT_FIELDS = ("hypothesis", "change_summary", "expected", "stop_reason")
MAX_PLAN_TEXT = 4000
"""Characters kept of each text field of a plan (hypothesis, change_summary, expected,
stop_reason): an LLM's longer text is cut with a marker (and a note), a program's
(``plan_submit``) is refused; prompts, reports and ledgers then hold at most this."""

_INT_TEXT = re.compile(r"[+-]?\d+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")

_SYNONYMS: dict[str, tuple[str, ...]] = {
    "lr": ("learning_rate", "learningrate", "base_lr", "eta"),
    "batch_size": ("bs", "batch", "batchsize", "train_batch_size"),
    "epochs": ("num_epochs", "max_epochs", "n_epochs", "epoch"),
    "weight_decay": ("wd", "l2", "l2_reg", "decay"),
    "dropout": ("dropout_rate", "drop_rate", "p_dropout", "dropout_prob"),
    "warmup_steps": ("warmup", "num_warmup_steps"),
    "momentum": ("beta", "beta1"),
    "hidden_size": ("hidden_dim", "d_model", "width"),
    "num_layers": ("layers", "n_layers", "depth"),
}
"""Common alternative spellings; used only to *suggest* a name, never to rename."""


# -- the plan ----------------------------------------------------------------------------


class DecisionPlan(msgspec.Struct, kw_only=True):
    """One structured iteration plan: what to change, why, and how to tell if it worked."""

    hypothesis: str
    change_summary: str
    params: dict[str, Any]
    expected: str
    stop: bool = False
    stop_reason: str = ""


class Problem(msgspec.Struct):
    """One thing wrong with a plan: the field (``params.lr``) and why."""

    field: str
    reason: str


class ParseResult(msgspec.Struct):
    """The parsed plan (None when no usable plan object was found), problems and notes.

    ``notes`` record tolerated liberties (a numeric string read as a number, an
    ignored extra field); ``problems`` are what the repair request must list.
    """

    plan: DecisionPlan | None
    problems: list[Problem]
    notes: list[str]


class PlansResult(msgspec.Struct):
    """The plans of a k-plan response: one :class:`ParseResult` per plan kept (at most k).

    ``results[i]`` holds plan i's own problems and notes, fields unprefixed (``params.lr``);
    ``problems`` and ``notes`` are about the response as a whole: field ``response`` when
    no plans could be read, field ``plans`` only for the count ("expected 3 plans, got 2").
    :meth:`all_problems` gives every problem with the plan prefixes, for the repair request.
    """

    results: list[ParseResult]
    problems: list[Problem]
    notes: list[str]

    @property
    def plans(self) -> list[DecisionPlan | None]:
        """The plans in order; None where that item held no usable plan object."""
        return [r.plan for r in self.results]

    def all_problems(self) -> list[Problem]:
        """The response's problems, then each plan's, named ``plans[i].<field>``."""
        out = list(self.problems)
        for i, r in enumerate(self.results):
            out.extend(Problem(plan_field(i, p.field), p.reason) for p in r.problems)
        return out


def plan_field(index: int, field: str) -> str:
    """The name of a field of the plan at ``index`` in a batch: ``plans[1].params.lr``."""
    return f"plans[{index}].{field}" if field else f"plans[{index}]"


# -- schema ------------------------------------------------------------------------------


def plan_json_schema(
    tunables: Sequence[TunableSpec],
    *,
    metric: str | None = None,
    exclude: Mapping[str, Sequence[Any]] | None = None,
) -> dict[str, Any]:
    """The JSON schema of a plan for these tunables (sent to providers that support it).

    Its texts name no example value: a weak model copies examples (a hard-coded
    "val_loss < 0.25" became a stop_reason in a project without val_loss)."""
    name = metric or "the primary metric"
    props: dict[str, Any] = {}
    for t in tunables:
        props[t.name] = _param_schema(t, (exclude or {}).get(t.name, ()))
    return {
        "title": "DecisionPlan",
        "type": "object",
        "properties": {
            "hypothesis": {
                "type": "string",
                "description": "Why this change should improve the primary metric, "
                "given the evidence so far.",
            },
            "change_summary": {
                "type": "string",
                "description": "The change in a few words, and why it beats the alternatives.",
            },
            "params": {
                "type": "object",
                "description": "Only the parameters to change, by their exact names; "
                "the others keep their baseline values.",
                "properties": props,
                "additionalProperties": False,
            },
            "expected": {
                "type": "string",
                "description": f"The success criterion: a threshold or a direction for {name}.",
            },
            "stop": {
                "type": "boolean",
                "description": "false to run this change; true (with params {}) to end the "
                "session.",
            },
            "stop_reason": {
                "type": "string",
                "description": "Why the session should stop (only when stop is true).",
            },
        },
        "required": list(PLAN_KEYS),
        "additionalProperties": False,
        # for servers that generate under a grammar made from the schema (llama.cpp):
        # these texts may not be empty (trainee.llm.client.grammar_schema)
        "x-non-empty": ["hypothesis", "change_summary", "expected"],
    }


def plans_json_schema(
    tunables: Sequence[TunableSpec],
    k: int,
    *,
    metric: str | None = None,
    exclude: Mapping[str, Sequence[Any]] | None = None,
) -> dict[str, Any]:
    """The JSON schema of a k-plan answer: ``{"plans": [plan, ...]}``, exactly k plans
    (what validation asks for)."""
    k = max(1, k)
    item = plan_json_schema(tunables, metric=metric, exclude=exclude)
    return {
        "title": "DecisionPlans",
        "type": "object",
        "properties": {
            "plans": {
                "type": "array",
                "description": f"Exactly {k} plans with different hypotheses; each one is run "
                "as its own round, at the same time as the others.",
                "items": item,
                "minItems": k,
                "maxItems": k,
            },
        },
        "required": ["plans"],
        "additionalProperties": False,
    }


def single_change_exclusions(
    tunables: Sequence[TunableSpec],
    baseline: Mapping[str, Any],
    tried: Sequence[Mapping[str, Any]],
) -> dict[str, list[Any]]:
    """Per tunable, the values a plan changing only that tunable cannot take without
    repeating a run: its baseline value (no change at all) and each value of a tried
    parameter set that differs from the baseline in that tunable alone. A grammar that
    leaves them out keeps a small model from echoing the baseline or a tried single change
    (SmolLM2-135M proposed ``{"batch_size": 16}``, the baseline's value, twice in a row)."""
    out: dict[str, list[Any]] = {}
    for t in tunables:
        if t.name not in baseline:
            continue
        values = [baseline[t.name]]
        for params in tried:
            changed = [
                name
                for name, value in params.items()
                if name in baseline and not values_equal(value, baseline[name])
            ]
            if changed == [t.name]:
                values.append(params[t.name])
        out[t.name] = values
    return out


def _param_schema(t: TunableSpec, exclude: Sequence[Any] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if t.type == ParamType.FLOAT:
        out["type"] = "number"
    elif t.type == ParamType.INT:
        out["type"] = "integer"
    elif t.type == ParamType.BOOL:
        out["type"] = "boolean"
    if t.choices:
        left = [c for c in t.choices if not any(values_equal(c, e) for e in exclude)]
        out["enum"] = left or list(t.choices)  # all excluded: nothing to leave out alone
    if t.min_value is not None:
        out["minimum"] = t.min_value
    elif t.log:
        out["exclusiveMinimum"] = 0
    if t.max_value is not None:
        out["maximum"] = t.max_value
    if t.description:
        out["description"] = t.description
    grid = value_grid(t)
    if grid is not None:
        grid = [g for g in grid if not any(values_equal(g, e) for e in exclude)] or grid
        # for servers that generate under a grammar made from the schema: llama.cpp's
        # grammars enforce no numeric bounds, but they do enforce a list of values
        out["x-grid"] = grid
    return out


GRID_POINTS = 13
"""Values offered for a bounded float (or a wide int range) under a generation grammar."""


def value_grid(t: TunableSpec, points: int = GRID_POINTS) -> list[int | float] | None:
    """The values a bounded numeric tunable may take when a local server generates under a
    grammar (llama.cpp): ``points`` values from min to max, log-spaced for ``log: true``,
    at two significant digits, plus the baseline; every int when the range holds at most
    64. None for choices, bools and unbounded ranges. Only such a grammar sees this list
    (``trainee.llm.client.grammar_schema``); the prompt, the validation and every other
    server keep the whole range."""
    if t.choices or t.type not in (ParamType.FLOAT, ParamType.INT):
        return None
    if t.min_value is None or t.max_value is None or t.max_value < t.min_value:
        return None
    lo, hi = float(t.min_value), float(t.max_value)
    n = max(2, points)
    if t.log and lo > 0:
        raw = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
    else:
        raw = [lo + (hi - lo) * i / (n - 1) for i in range(n)]
    values: set[int | float] = set()
    if t.type == ParamType.INT:
        first, last = math.ceil(lo), math.floor(hi)
        if last - first + 1 <= 64:
            values.update(range(first, last + 1))
        else:
            values.update(min(last, max(first, round(v))) for v in raw)
    else:
        values.update(min(hi, max(lo, float(f"{v:.2g}"))) for v in raw)
        values.update((lo, hi))
    base = t.baseline
    if isinstance(base, int | float) and not isinstance(base, bool) and lo <= base <= hi:
        values.add(int(base) if t.type == ParamType.INT else float(base))
    return sorted(values)


# -- parsing -----------------------------------------------------------------------------


def parse_plan(text: str, tunables: Sequence[TunableSpec]) -> ParseResult:
    """Find the plan in a model response and read it tolerantly; never raises.

    Accepts raw JSON, fenced JSON and JSON wrapped in prose; uses the last
    top-level object that has plan keys. Numeric strings for numeric params are
    read when they parse exactly (with a note). Unknown parameter names become
    problems with a suggestion, and the name is kept as written.
    """
    try:
        return _parse_plan(text, tunables)
    except Exception as exc:  # a parser bug must not take the session down
        return ParseResult(
            plan=None,
            problems=[Problem("response", f"could not be read as a plan ({type(exc).__name__})")],
            notes=[],
        )


def _parse_plan(text: str, tunables: Sequence[TunableSpec]) -> ParseResult:
    notes: list[str] = []
    text, empty = _searchable(text, notes, "one JSON object")
    if empty is not None:
        return ParseResult(plan=None, problems=[empty], notes=notes)
    objects = _top_level_objects(text)
    plans = _plan_objects(objects, notes)
    if not plans:
        return ParseResult(plan=None, problems=[_not_found(objects)], notes=notes)
    if len(plans) > 1:
        notes.append(f"response held {len(plans)} plan objects; the last one was used")
    return _read_plan(plans[-1], tunables, notes)


def _searchable(text: str, notes: list[str], wanted: str) -> tuple[str, Problem | None]:
    """The part of ``text`` that is searched, or a problem when there is nothing to search."""
    if not isinstance(text, str) or not text.strip():
        return "", Problem("response", f"empty; expected {wanted}")
    if len(text) > _MAX_TEXT:
        notes.append(f"response is {len(text)} chars; only the last {_MAX_TEXT} were searched")
        text = text[-_MAX_TEXT:]
    return text, None


def _not_found(objects: list[dict[str, Any]]) -> Problem:
    reason = (
        "no JSON object with the plan fields found"
        if objects
        else "no JSON object found; reply with one JSON object"
    )
    return Problem("response", reason)


def _is_plan(value: Any) -> bool:
    return isinstance(value, dict) and any(k in value for k in PLAN_KEYS)


def _plan_objects(objects: list[dict[str, Any]], notes: list[str]) -> list[dict[str, Any]]:
    """The objects that are plans, or wrap one in a field (read from there with a note)."""
    plans: list[dict[str, Any]] = []
    for obj in objects:
        if _is_plan(obj):
            plans.append(obj)
            continue
        for key, value in obj.items():
            if _is_plan(value):
                notes.append(f"the plan was read from inside the field '{_clip(key)}'")
                plans.append(value)
                break
    return plans


def parse_plans(text: str, tunables: Sequence[TunableSpec], k: int) -> PlansResult:
    """Find the k plans of a batch answer and read each like :func:`parse_plan`; never raises.

    Accepts ``{"plans": [...]}`` (or the list under another field, with a note), a bare
    JSON list of plans, plan objects one after another, and a single plan (a list of one,
    with a note), raw, fenced or wrapped in prose. More than k plans: the first k are kept
    (with a note); fewer than k is the problem ``plans: expected k plans, got n``.
    """
    try:
        return _parse_plans(text, tunables, max(1, k))
    except Exception as exc:  # a parser bug must not take the session down
        return PlansResult(
            results=[],
            problems=[Problem("response", f"could not be read as plans ({type(exc).__name__})")],
            notes=[],
        )


def _parse_plans(text: str, tunables: Sequence[TunableSpec], k: int) -> PlansResult:
    notes: list[str] = []
    text, empty = _searchable(text, notes, '{"plans": [...]} with ' + f"{k} plans")
    if empty is not None:
        return PlansResult(results=[], problems=[empty], notes=notes)
    items, problem = _plan_items(text, notes)
    if problem is not None:
        return PlansResult(results=[], problems=[problem], notes=notes)
    if len(items) > k:
        notes.append(f"response held {len(items)} plans; the first {k} were kept")
        items = items[:k]
    results = [_read_item(item, tunables) for item in items]
    problems: list[Problem] = []
    if len(items) < k:
        problems.append(Problem("plans", f"expected {k} plans, got {len(items)}"))
    for i, r in enumerate(results):
        notes.extend(f"{plan_field(i, '')}: {n}" for n in r.notes)
    return PlansResult(results=results, problems=problems, notes=notes)


def _plan_items(text: str, notes: list[str]) -> tuple[list[Any], Problem | None]:
    """The items of the plan list in ``text`` (plan objects, or whatever the model put in
    the list), or the problem when there is none."""
    objects = _top_level_objects(text)
    # 1. an object holding the list: {"plans": [...]}, or the list under another field
    listed: list[tuple[str, list[Any]]] = []
    for obj in objects:
        if isinstance(obj.get("plans"), list):
            listed.append(("plans", obj["plans"]))
            continue
        for key, value in obj.items():
            if isinstance(value, list) and any(_is_plan(v) for v in value):
                listed.append((key, value))
                break
    if listed:
        key, items = listed[-1]
        if key != "plans":
            notes.append(f"the plans were read from the field '{_clip(key)}'")
        if len(listed) > 1:
            notes.append(f"response held {len(listed)} lists of plans; the last one was used")
        return items, None
    for obj in objects:
        if "plans" in obj and not _is_plan(obj):
            value = obj["plans"]
            if _is_plan(value):
                notes.append("'plans' held a single plan object, not a list; read as one plan")
                return [value], None
            return [], Problem(
                "response", f"'plans' must be a list of plan objects, got {_show(value)}"
            )
    # 2. a bare JSON list, the whole response or a fenced block
    bare = _bare_list(text)
    if bare is not None:
        return bare, None
    # 3. plan objects one after another (in prose, or a list that did not decode as a whole)
    plans = _plan_objects(objects, notes)
    if not plans:
        return [], _not_found(objects)
    if len(plans) == 1:
        notes.append("a single plan object was given, not a list of plans; read as one plan")
    return list(plans), None


_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n(.*?)```", re.S)


def _bare_list(text: str) -> list[Any] | None:
    """The response as a JSON list of plans, when it is one (or one fenced block is)."""
    for candidate in (text, *(m.group(1) for m in _FENCE.finditer(text))):
        stripped = candidate.strip()
        if not stripped.startswith("["):
            continue
        try:
            value = msgspec.json.decode(stripped)
        except (msgspec.DecodeError, ValueError, RecursionError):
            continue
        if isinstance(value, list) and value and any(_is_plan(v) for v in value):
            return value
    return None


def _read_item(item: Any, tunables: Sequence[TunableSpec]) -> ParseResult:
    """One item of the plan list, read as :func:`parse_plan` reads a plan object."""
    notes: list[str] = []
    if not isinstance(item, dict):
        reason = f"must be a plan object with the plan fields, got {_show(item)}"
        return ParseResult(plan=None, problems=[Problem("", reason)], notes=notes)
    if not _is_plan(item):
        nested = _plan_objects([item], notes)
        if not nested:
            return ParseResult(
                plan=None, problems=[Problem("", "an object without the plan fields")], notes=notes
            )
        item = nested[0]
    return _read_plan(item, tunables, notes)


def _read_plan(
    data: dict[str, Any], tunables: Sequence[TunableSpec], notes: list[str]
) -> ParseResult:
    problems: list[Problem] = []
    for key in data:
        if key not in PLAN_KEYS:
            notes.append(f"ignored the extra field '{_clip(key)}'")

    stop = data.get("stop", False)
    if "stop" not in data:
        notes.append("'stop' was missing; read as false")
    if not isinstance(stop, bool):
        problems.append(Problem("stop", f"must be true or false, got {_show(stop)}"))
        stop = False

    texts: dict[str, str] = {}
    for key in _TEXT_FIELDS:
        value = data.get(key)
        if value is None:
            texts[key] = ""
            if key != "stop_reason" and not stop:
                problems.append(Problem(key, "missing; it is required"))
        elif isinstance(value, str):
            texts[key] = truncate(value, MAX_PLAN_TEXT)
            if len(value) > MAX_PLAN_TEXT:
                notes.append(f"'{key}' was {len(value)} chars; cut to {MAX_PLAN_TEXT}")
        else:
            texts[key] = ""
            problems.append(Problem(key, f"must be a string, got {_show(value)}"))

    raw_params = data.get("params")
    params: dict[str, Any] = {}
    if raw_params is None:
        if not stop:
            problems.append(Problem("params", "missing; it is required"))
    elif not isinstance(raw_params, dict):
        problems.append(
            Problem(
                "params",
                f"must be an object mapping parameter names to values, got {_show(raw_params)}",
            )
        )
    else:
        by_name = {t.name: t for t in tunables}
        for name, value in raw_params.items():
            spec = by_name.get(name)
            if spec is None:
                problems.append(Problem(f"params.{_clip(name)}", _unknown_reason(name, tunables)))
                params[name] = value
                continue
            params[name] = _coerce_value(spec, value, notes)

    plan = DecisionPlan(
        hypothesis=texts["hypothesis"],
        change_summary=texts["change_summary"],
        params=params,
        expected=texts["expected"],
        stop=stop,
        stop_reason=texts["stop_reason"],
    )
    return ParseResult(plan=plan, problems=problems, notes=notes)


def _coerce_value(spec: TunableSpec, value: Any, notes: list[str]) -> Any:
    """Numbers in the param's own type: an int for a float param becomes a float, an
    integral float for an int param an int; a numeric string becomes the number, only
    if it parses exactly (with a note). Anything else is left for validation."""
    if spec.type not in (ParamType.FLOAT, ParamType.INT) or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return _as_type(spec, value, notes)
    if not isinstance(value, str):
        return value
    text = value.strip()
    number: int | float
    if _INT_TEXT.fullmatch(text):
        number = int(text)
    elif _FLOAT_TEXT.fullmatch(text):
        number = float(text)
        if not math.isfinite(number):
            return value
    else:
        return value
    notes.append(f"params.{spec.name}: the string {value!r} was read as the number {number!r}")
    return _as_type(spec, number, notes)


def _as_type(spec: TunableSpec, value: int | float, notes: list[str]) -> int | float:
    if spec.type == ParamType.FLOAT and isinstance(value, int):
        return float(value)
    if (
        spec.type == ParamType.INT
        and isinstance(value, float)
        and math.isfinite(value)
        and value.is_integer()
    ):
        notes.append(f"params.{spec.name}: {value!r} was read as the integer {int(value)}")
        return int(value)
    return value


def _top_level_objects(text: str) -> list[dict[str, Any]]:
    """Every JSON object in ``text`` not nested in another decoded one, in order."""
    pairs = sorted(_brace_pairs(text, strings=True) | _brace_pairs(text, strings=False))
    found: list[dict[str, Any]] = []
    covered_end = -1
    decodes = 0
    for start, end in pairs:
        if start <= covered_end:
            continue
        if decodes >= _MAX_DECODES:
            break
        decodes += 1
        try:
            value = msgspec.json.decode(text[start : end + 1])
        except (msgspec.DecodeError, ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            found.append(value)
            covered_end = end
    return found


_BRACE_TOKENS = re.compile(r'[{}"\\]')


def _brace_pairs(text: str, *, strings: bool) -> set[tuple[int, int]]:
    """Matched ``{``/``}`` positions; with ``strings``, braces inside JSON strings
    (tracked only while inside a brace) are skipped."""
    pairs: set[tuple[int, int]] = set()
    stack: list[int] = []
    in_string = False
    escaped_at = -1
    for m in _BRACE_TOKENS.finditer(text):
        ch, pos = m.group(), m.start()
        if in_string:
            if ch == "\\" and escaped_at != pos:
                escaped_at = pos + 1
            elif ch == '"' and escaped_at != pos:
                in_string = False
            continue
        if ch == '"' and strings and stack:
            in_string = True
        elif ch == "{":
            stack.append(pos)
        elif ch == "}" and stack:
            pairs.add((stack.pop(), pos))
    return pairs


# -- names -------------------------------------------------------------------------------


def _norm(name: str) -> str:
    return re.sub(r"[-_.\s]+", "_", name.strip().lstrip("-+~").lower()).strip("_")


def _initials(name: str) -> str:
    parts = [p for p in _norm(name).split("_") if p]
    return "".join(p[0] for p in parts) if len(parts) > 1 else ""


def suggest_name(name: str, tunables: Sequence[TunableSpec]) -> str | None:
    """The tunable ``name`` most likely means (by flag, key, case/underscores,
    abbreviation, common synonyms or spelling), or None. Only ever a suggestion."""
    if not tunables:
        return None
    wanted = _norm(name)
    if not wanted:
        return None
    flat = wanted.replace("_", "")
    for t in tunables:
        aliases = {_norm(t.name), _norm(t.key), _norm(t.key.split(".")[-1])}
        for attr in ("flag", "config_path", "override"):
            value = getattr(t.param, attr, None)
            if isinstance(value, str):
                aliases.add(_norm(value))
                aliases.add(_norm(value.split(".")[-1]))
        if wanted in aliases or flat in {a.replace("_", "") for a in aliases}:
            return t.name
    for t in tunables:
        tn = _norm(t.name)
        if wanted == _initials(t.name) or tn == _initials(wanted):
            return t.name
        for canon, alts in _SYNONYMS.items():
            group = {canon, *alts}
            if wanted in group and tn in group:
                return t.name
    names = {_norm(t.name): t.name for t in tunables}
    close = difflib.get_close_matches(wanted, list(names), n=1, cutoff=0.75)
    return names[close[0]] if close else None


def _unknown_reason(name: str, tunables: Sequence[TunableSpec]) -> str:
    guess = suggest_name(name, tunables)
    if guess is not None and guess != name:
        return f"unknown parameter; did you mean '{guess}'?"
    names = ", ".join(t.name for t in tunables) or "(none)"
    return f"unknown parameter; the tunable parameters are: {names}"


# -- validation --------------------------------------------------------------------------


_PLACEHOLDER = re.compile(
    r"^(?:[\W_]*|<[^<>]*>|\{\{?\w+\}?\}|(?:todo|tbd|tba|n/?a|none|null|string|text|"
    r"placeholder|example|reason|hypothesis|change[ _]summary|expected|x{3,}|\.\.\.|\u2026)"
    r"[\W_]*)$",
    re.IGNORECASE,
)
"""Texts that are no answer: empty, punctuation only (``...``, ``-``), a ``<...>`` or
``{name}`` template slot, or a bare word such as ``TODO``, ``string``, ``hypothesis``."""


def _plain(text: str) -> str:
    return " ".join(re.sub(r"[^\w%<>=.]+", " ", text.lower()).split()).strip(" .")


_TEMPLATE_TEXTS: frozenset[str] = frozenset(
    _plain(t)
    for t in (
        "Why this change should improve the primary metric, given the evidence so far.",
        "The change in a few words, and why it beats the alternatives.",
        "The success criterion: a threshold or a direction for the primary metric.",
        "Why the session should stop (only when stop is true).",
        "why this change should help, given the evidence above",
        "the change in a few words, and why it beats the alternatives",
        "the success criterion as a number or direction",
        "why the session should end",
    )
)
"""The schema's and the prompt's own descriptions: an answer that copies one is a copy."""


def placeholder_problem(text: str) -> str | None:
    """Why ``text`` is no real answer (empty, a template slot or the template's own
    wording copied), or None. Used for hypothesis, change_summary, expected and
    stop_reason: a weak model copies ``"..."`` from the answer example."""
    flat = " ".join(str(text).split())
    if not flat:
        return "must not be empty"
    if _PLACEHOLDER.match(flat):
        return f"{_show(flat)} is a placeholder, not an answer: write it for this change"
    if _plain(flat) in _TEMPLATE_TEXTS:
        return "copies the template's description: write it for this change"
    return None


def resolve_stop(plan: DecisionPlan) -> tuple[DecisionPlan, str | None]:
    """A plan that says ``stop`` but also changes parameters is a change: the change runs
    (the stop is asked again after it). Returns the plan to validate and a note."""
    if plan.stop and plan.params:
        note = (
            "the answer set stop to true but also proposed a change: the change runs, "
            "and stopping is asked again after it"
        )
        return msgspec.structs.replace(plan, stop=False), note
    return plan, None


def validate_plan(
    plan: DecisionPlan,
    tunables: Sequence[TunableSpec],
    *,
    baseline: dict[str, Any],
    tried: Iterable[dict[str, Any]],
    rejected: Iterable[dict[str, Any]],
    constraints: Sequence[Constraint] = (),
    stop_refused: str | None = None,
) -> list[Problem]:
    """Every rule the plan breaks (empty list = runnable).

    ``tried`` and ``rejected`` hold full effective parameter dicts of earlier rounds.
    The full point (the baseline overlaid with the plan's params) must keep every one of
    ``constraints`` (tuning.yaml's; a broken one is the problem ``constraints[i]``).
    ``stop_refused``: why a stop is not honoured now (the session has not run
    ``decision.min_rounds`` rounds yet); None when stopping is allowed.
    """
    problems: list[Problem] = []
    by_name = {t.name: t for t in tunables}
    if plan.stop:
        if stop_refused is not None:
            problems.append(Problem("stop", stop_refused))
        elif (why := placeholder_problem(plan.stop_reason)) is not None:
            problems.append(
                Problem(
                    "stop_reason",
                    f"{why} (required when stop is true); or set stop to false and "
                    "propose a change to run it",
                )
            )
    else:
        for key in ("hypothesis", "change_summary", "expected"):
            why = placeholder_problem(str(getattr(plan, key)))
            if why is not None:
                problems.append(Problem(key, why))
        if not plan.params:
            problems.append(
                Problem(
                    "params",
                    "empty; change at least one parameter, or set stop to true with a stop_reason",
                )
            )
    param_problems: list[Problem] = []
    for name, value in plan.params.items():
        spec = by_name.get(name)
        if spec is None:
            param_problems.append(Problem(f"params.{_clip(name)}", _unknown_reason(name, tunables)))
            continue
        reason = value_problem(spec, value)
        if reason is not None:
            param_problems.append(Problem(f"params.{name}", reason))
    problems.extend(param_problems)
    if not plan.stop and plan.params and not param_problems:
        candidate = effective_params(baseline, plan.params)
        broken = constraint_problems(constraints, candidate)
        problems.extend(
            Problem(field, f"{reason}; choose values that satisfy it") for field, reason in broken
        )
        if not broken and any(params_equal(candidate, r) for r in rejected):
            problems.append(
                Problem(
                    "params",
                    "this exact parameter set was already tried and rejected; propose a "
                    "different change",
                )
            )
        elif not broken and any(params_equal(candidate, t) for t in tried):
            problems.append(
                Problem(
                    "params",
                    "this exact parameter set was already tried; propose a different change",
                )
            )
    return problems


def validate_plans(
    plans: Sequence[DecisionPlan | None],
    tunables: Sequence[TunableSpec],
    *,
    baseline: dict[str, Any],
    tried: Iterable[dict[str, Any]],
    rejected: Iterable[dict[str, Any]],
    constraints: Sequence[Constraint] = (),
    stop_refused: str | None = None,
) -> list[list[Problem]]:
    """Every rule each plan of a batch breaks, one list per plan (None: nothing to check).

    Each plan is checked by :func:`validate_plan`; on top, the earlier plans of the same
    batch count as tried, so the k plans are k different parameter sets. Fields are not
    prefixed (see :func:`plan_field`).
    """
    tried = list(tried)
    rejected = list(rejected)
    out: list[list[Problem]] = []
    earlier: list[tuple[int, dict[str, Any]]] = []
    for i, plan in enumerate(plans):
        if plan is None:
            out.append([])
            continue
        problems = validate_plan(
            plan,
            tunables,
            baseline=baseline,
            tried=tried,
            rejected=rejected,
            constraints=constraints,
            stop_refused=stop_refused,
        )
        if plan.stop or not plan.params:
            out.append(problems)
            continue
        candidate = effective_params(baseline, plan.params)
        if not any(p.field.startswith(("params", "constraints[")) for p in problems):
            same = next((j for j, e in earlier if params_equal(candidate, e)), None)
            if same is not None:
                problems.append(
                    Problem(
                        "params",
                        f"the same parameter set as {plan_field(same, '')}; every plan of the "
                        "batch must change something different",
                    )
                )
        earlier.append((i, candidate))
        out.append(problems)
    return out


# -- params ------------------------------------------------------------------------------


def effective_params(baseline: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """The full parameter set a round runs with: the baseline, overlaid with ``changes``."""
    return {**baseline, **changes}


def params_diff(baseline: dict[str, Any], params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{name: {"from": baseline value, "to": value}}`` for the names whose value changed."""
    out: dict[str, dict[str, Any]] = {}
    for name, value in params.items():
        before = baseline.get(name)
        if name not in baseline or not values_equal(before, value):
            out[name] = {"from": before, "to": value}
    return out


def params_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Same names and equal values (see :func:`values_equal`)."""
    if set(a) != set(b):
        return False
    return all(values_equal(a[k], b[k]) for k in a)


# -- repair ------------------------------------------------------------------------------


def repair_message(problems: list[Problem], *, plans: int = 1, stop_allowed: bool = True) -> str:
    """The one repair request: every problem, the rules again, corrected JSON only.

    With ``plans`` > 1 it asks for the corrected ``{"plans": [...]}`` answer of a batch.
    ``stop_allowed`` False: the session may not stop yet, so the request offers no stop.
    """
    batch = plans > 1
    if batch:
        lines = [
            "Your plans were not accepted. Fix every problem below "
            "(plans[0] is the first plan, plans[1] the second, ...):"
        ]
    else:
        lines = ["Your plan was not accepted. Fix every problem below:"]
    if problems:
        lines.extend(f"- {p.field}: {p.reason}" for p in problems)
    else:
        lines.append("- response: no valid plan was found")
    lines += ["", "Rules:"]
    if batch:
        lines += [
            f'- Reply with exactly one JSON object {{"plans": [...]}} holding {plans} plans; '
            "each plan has the fields hypothesis, change_summary, params, expected, stop, "
            "stop_reason. No prose, no code fences.",
            "- Keep the plans that had no problem as they were.",
            "- Every plan must have its own parameter set: no two plans alike, and none "
            "that was already tried or rejected.",
        ]
    else:
        lines += [
            "- Reply with exactly one JSON object with the fields hypothesis, change_summary, "
            "params, expected, stop, stop_reason. No prose, no code fences.",
        ]
    lines += [
        "- params holds only parameters from the search space, by their exact names "
        "(not flags, not synonyms), with values of the right type inside the bounds or "
        "choices. Parameters you leave out keep their baseline values.",
    ]
    if not batch:
        lines.append("- Do not repeat a parameter set that was already tried or rejected.")
    lines += [
        "- hypothesis, change_summary and expected are your own words for this change "
        '(no placeholders such as "..."); expected states the success criterion for the '
        "primary metric (a threshold or a direction).",
        "- Set stop to false to run a change."
        + (
            " To end the session instead: stop true, params {} and a stop_reason"
            + (", in every plan." if batch else ".")
            if stop_allowed
            else " Stopping is not allowed yet: propose a change."
        ),
        "",
        "Reply with the corrected JSON object only.",
    ]
    return "\n".join(lines)


# -- display -----------------------------------------------------------------------------


def _clip(name: str, limit: int = 80) -> str:
    """A name from the response, cut short so an absurd key cannot flood the repair message."""
    return name if len(name) <= limit else name[: limit - 3] + "..."


def _show(value: Any, limit: int = 80) -> str:
    text = format_value(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
