"""The per-round config: a round-trip copy of ``launch.baseline_config`` with the
output folder and the config-backed tunables rewritten, and the checked parameter
values every other part of a round is rendered from.

The copy goes through :class:`trainee.spec.yamlio.YamlDocument`, so comments, key
order, quoting, ``${...}`` interpolations and a missing trailing newline survive and
the file differs from the baseline only in the rewritten fields. A JSON baseline
stays JSON (``config.json``).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from trainee.atomic import write_atomic
from trainee.errors import InvalidParams, LaunchError
from trainee.launch.layout import RoundLayout
from trainee.spec import ParamSource, ParamType, ProjectSpec, TunableSpec, Value
from trainee.spec.values import point_problems, value_problem, values_equal

__all__ = [
    "ParamValues",
    "coerce_value",
    "resolve_params",
    "round_config_path",
    "write_round_config",
]

ParamValues = Mapping[str, Value | None]
"""The agent's values for tunables, by name; ``None`` means "not passed"."""


def round_config_path(spec: ProjectSpec, rnd: RoundLayout) -> Path:
    """Where the round's config lives: ``config.json`` for a JSON baseline, else
    ``config.yaml`` (also the ``TRAINEE_CONFIG_PATH`` offered to wrapper scripts)."""
    baseline = spec.baseline_config
    if baseline is not None and Path(baseline).suffix.lower() == ".json":
        return rnd.dir / "config.json"
    return rnd.config


def resolve_params(spec: ProjectSpec, params: ParamValues) -> dict[str, Value | None]:
    """Every tunable's value for this round, by name, in tuning.yaml order.

    A tunable missing from ``params`` takes its baseline value. Values are checked
    by the one value check (:func:`trainee.spec.values.point_problems`: type, choices,
    bounds, then tuning.yaml's constraints) and normalized to the param's type (an int
    for a float param becomes a float). Unknown names or values that do not fit raise
    :class:`InvalidParams` naming every problem, before anything is launched.
    """
    known = {t.name for t in spec.tunables}
    unknown = sorted(name for name in params if name not in known)
    if unknown:
        names = ", ".join(f"'{n}'" for n in unknown)
        allowed = ", ".join(sorted(known)) or "none (tuning.yaml has no params)"
        raise InvalidParams(
            f"unknown param {names}; tuning.yaml allows: {allowed}",
            {"unknown": unknown, "allowed": sorted(known)},
        )
    values = {t.name: params.get(t.name, t.baseline) for t in spec.tunables}
    problems = point_problems(spec.tunables, spec.constraints, values)
    if problems:
        first_param = next((f for f, _ in problems if f.startswith("params.")), None)
        raise InvalidParams(
            "; ".join(
                f"param '{f.removeprefix('params.')}': {r}" if f.startswith("params.") else r
                for f, r in problems
            ),
            {
                "problems": [{"field": f, "reason": r} for f, r in problems],
                **({"param": first_param.removeprefix("params.")} if first_param else {}),
            },
        )
    return {
        t.name: None if values[t.name] is None else coerce_value(t, values[t.name])
        for t in spec.tunables
    }


def coerce_value(tunable: TunableSpec, value: object) -> Value:
    """``value`` as the param's type (a choice as the choice itself, a float param's int
    as a float), or :class:`InvalidParams` naming the param and why it does not fit."""
    reason = value_problem(tunable, value)
    if reason is not None:
        raise InvalidParams(
            f"param '{tunable.name}': {reason}",
            {"param": tunable.name, "value": repr(value), "reason": reason},
        )
    ptype = ParamType(tunable.type)
    if ptype == ParamType.CHOICE or tunable.choices:
        return next(c for c in tunable.choices or () if values_equal(c, value, rel_tol=0.0))
    if ptype == ParamType.BOOL:
        return cast(bool, value)
    number = cast(int | float, value)
    return float(number) if ptype == ParamType.FLOAT else int(number)


def write_round_config(spec: ProjectSpec, rnd: RoundLayout, params: ParamValues) -> Path | None:
    """Write the round's copy of the baseline config and return its path (None when
    ``launch.baseline_config`` is not set).

    The text is :func:`round_config_text`; the round's ``outputs/`` folder is created.
    Written atomically; a bad value or an unreadable baseline raises before anything
    is written.
    """
    text = round_config_text(spec, rnd, params)
    if text is None:
        return None
    target = round_config_path(spec, rnd)
    rnd.outputs.mkdir(parents=True, exist_ok=True)
    write_atomic(target, text)
    return target


def round_config_text(spec: ProjectSpec, rnd: RoundLayout, params: ParamValues) -> str | None:
    """The text of the round's config, without writing it (None without a baseline).

    ``output.config_path`` is set to the round's ``outputs/`` folder and each
    config-backed tunable is set at its dotted key; everything else is the baseline's
    text. Each rewritten field is checked to read back as the value written.
    """
    if spec.baseline_config is None:
        return None
    from trainee.spec.yamlio import YamlDocument

    values = resolve_params(spec, params)
    doc = YamlDocument.load(spec.baseline_config)
    edits: dict[str, Value] = {}
    if spec.output.config_path is not None:
        edits[spec.output.config_path] = str(rnd.outputs)
    for tunable in spec.tunables:
        value = values[tunable.name]
        if tunable.source == ParamSource.CONFIG_PATH and value is not None:
            edits[tunable.key] = value

    # ruamel writes a float as its repr, and ``1e-05`` reads back as a *string* in
    # YAML 1.1 loaders such as PyYAML. Exponent floats are written through a unique
    # placeholder of the same length (so a trailing comment keeps its column) and
    # then replaced by ``1.0e-05``, a float in YAML 1.1 and 1.2 alike.
    original = doc.dump()
    tokens: dict[str, str] = {}
    for key, value in edits.items():
        if doc.kind == "yaml" and isinstance(value, float) and "e" in repr(value):
            if _same_number(doc.get(key, None), value):
                continue
            literal = _yaml11_float(value)
            token = _token(len(literal), original, tokens)
            tokens[token] = literal
            doc.set(key, token)
        else:
            doc.set(key, value)
    text = doc.dump()
    for token, literal in tokens.items():
        if text.count(token) != 1:
            raise LaunchError(f"could not write {literal} into the round config for {rnd.dir}")
        text = text.replace(token, literal)
    _check_reads_back(text, round_config_path(spec, rnd), doc.kind, edits)
    return text


def _token(length: int, text: str, taken: Mapping[str, str]) -> str:
    """A plain YAML string of ``length`` characters found neither in ``text`` nor ``taken``."""
    while True:
        token = "t" + secrets.token_hex(length)[: length - 1]
        if token not in text and not any(token in t or t in token for t in taken):
            return token


def _same_number(old: object, new: float) -> bool:
    return isinstance(old, int | float) and not isinstance(old, bool) and old == new


def _reads_as(got: object, value: Value) -> bool:
    if isinstance(value, bool) or isinstance(got, bool):
        return type(got) is type(value) and got == value
    if isinstance(value, str) or isinstance(got, str):
        return isinstance(got, str) and got == value
    return isinstance(got, int | float) and got == value


def _yaml11_float(value: float) -> str:
    """``repr`` with a dot in the mantissa: ``1e-05`` -> ``1.0e-05``."""
    text = repr(value)
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return f"{mantissa}e{exponent}"


def _check_reads_back(text: str, target: Path, kind: str, edits: Mapping[str, Value]) -> None:
    """Every rewritten field reads back as the value that was written: a number as a
    number (an unchanged ``0`` may stay an int for a float param), a string as a string."""
    from trainee.spec.yamlio import YamlDocument

    check = YamlDocument.from_text(text, path=target, kind="json" if kind == "json" else "yaml")
    for key, value in edits.items():
        got = check.get(key, None)
        if not _reads_as(got, value):
            raise LaunchError(
                f"the round config {target} would not read back '{key}' as {value!r} "
                f"(got {got!r}); refusing to launch with it",
                {"file": str(target), "field": key},
            )
