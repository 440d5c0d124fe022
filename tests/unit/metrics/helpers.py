"""Building specs and extractors for the metrics tests."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from trainee.launch.layout import ProjectLayout, RoundLayout
from trainee.metrics import Extractor, MetricPoint
from trainee.spec import Goal, MetricSource, MetricSpec


def spec(
    name: str,
    source: str,
    key: str,
    *,
    path: str | None = None,
    goal: str = "min",
    required: bool = False,
) -> MetricSpec:
    return MetricSpec(
        name=name,
        source=MetricSource(source),
        key_or_pattern=key,
        path=path,
        goal=Goal(goal),
        required=required,
    )


def round_layout(root: Path) -> RoundLayout:
    return ProjectLayout.for_root(root, env={}).session(1).round(2)


def extractor(
    specs: Iterable[MetricSpec] = (), root: Path | None = None, max_points: int = 100_000
) -> Extractor:
    root = root if root is not None else Path("/nonexistent/project")
    return Extractor(
        list(specs),
        placeholders=round_layout(root).placeholders(),
        project_root=str(root),
        max_points=max_points,
    )


def triples(points: Iterable[MetricPoint]) -> list[tuple[str, float, int | None]]:
    return [(p.name, p.value, p.step) for p in points]
