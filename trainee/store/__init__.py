"""The runtime store: aiosqlite schema with numbered migrations, typed records, exports."""

from trainee.store.db import Store, redact_prompt
from trainee.store.export import (
    CHART_NAME,
    render_chart_svg,
    render_report,
    write_ledgers,
    write_report,
    write_research_state,
)
from trainee.store.migrations import MIGRATIONS, SCHEMA_VERSION
from trainee.store.records import (
    ROUND_STATUSES,
    SESSION_STATUSES,
    DecisionRecord,
    MetricPointRecord,
    RoundRecord,
    SessionRecord,
)

__all__ = [
    "CHART_NAME",
    "MIGRATIONS",
    "ROUND_STATUSES",
    "SCHEMA_VERSION",
    "SESSION_STATUSES",
    "DecisionRecord",
    "MetricPointRecord",
    "RoundRecord",
    "SessionRecord",
    "Store",
    "redact_prompt",
    "render_chart_svg",
    "render_report",
    "write_ledgers",
    "write_report",
    "write_research_state",
]
