"""TunableSpec builders and round summaries for the research tests."""

from __future__ import annotations

from typing import Any

from trainee.research.state import RoundSummary
from trainee.spec import ParamSource, ParamSpec, ParamType, TunableSpec


def tunable(
    name: str,
    type_: str,
    *,
    baseline: Any = None,
    lo: float | None = None,
    hi: float | None = None,
    choices: tuple[Any, ...] | None = None,
    log: bool = False,
    flag: str | None = None,
    description: str = "",
) -> TunableSpec:
    ptype = ParamType(type_)
    param = ParamSpec(
        name=name,
        flag=flag or f"--{name}",
        type=ptype,
        default=baseline,
        min_value=lo,
        max_value=hi,
        choices=choices,
        log=log,
        description=description,
    )
    return TunableSpec(
        name=name,
        type=ptype,
        source=ParamSource.FLAG,
        key=param.flag or "",
        baseline=baseline,
        min_value=lo,
        max_value=hi,
        choices=choices,
        log=log,
        description=description,
        param=param,
    )


TUNABLES = (
    tunable("lr", "float", baseline=0.001, lo=1e-5, hi=1.0, log=True, description="learning rate"),
    tunable("batch_size", "int", baseline=32, lo=8, hi=256, flag="--bs"),
    tunable("optimizer", "choice", baseline="adam", choices=("adam", "sgd", "adamw")),
    tunable("use_amp", "bool", baseline=False),
    tunable("dropout", "float", baseline=0.1, lo=0.0, hi=0.9),
)

BASELINE: dict[str, Any] = {t.name: t.baseline for t in TUNABLES}


def summary(
    index: int,
    status: str = "completed",
    metric: float | None = None,
    *,
    params: dict[str, Any] | None = None,
    diff: dict[str, Any] | None = None,
    metrics: dict[str, float] | None = None,
    expected: str = "",
    hypothesis: str = "",
    tail: list[str] | None = None,
) -> RoundSummary:
    return RoundSummary(
        index=index,
        status=status,
        params=dict(params if params is not None else BASELINE),
        diff=dict(diff or {}),
        metric=metric,
        metrics=dict(metrics or ({} if metric is None else {"val_loss": metric})),
        hypothesis=hypothesis,
        expected=expected,
        verdict=None,
        verdict_reason="",
        duration_sec=1.0,
        failure_tail=list(tail or []),
    )
