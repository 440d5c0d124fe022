"""trainee.metrics: pure metric extractors (built-in loss, regex, jsonl, wandb summary).

See :mod:`trainee.metrics.extract` for the parsing rules.
"""

from __future__ import annotations

from trainee.metrics.extract import (
    BUILTIN_METRICS,
    DEFAULT_MAX_POINTS,
    DEFAULT_WANDB_SUMMARY_PATH,
    STEP_KEYS,
    Extractor,
    MetricPoint,
    MetricWarning,
    RoundMetrics,
    parse_number,
)

__all__ = [
    "BUILTIN_METRICS",
    "DEFAULT_MAX_POINTS",
    "DEFAULT_WANDB_SUMMARY_PATH",
    "STEP_KEYS",
    "Extractor",
    "MetricPoint",
    "MetricWarning",
    "RoundMetrics",
    "parse_number",
]
