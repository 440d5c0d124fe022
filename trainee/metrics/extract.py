"""Metric extraction for one round: built-in loss, regex, jsonl and wandb-summary sources.

Pure and synchronous. The only I/O is in :meth:`Extractor.read_files`, which reads
the ``jsonl`` and ``wandb_summary`` files at the end of a round.

Rules every source follows:

- A value is an int, a float or scientific notation with an optional sign
  (``3``, ``-0.5``, ``1e-3``, ``1.5E+02``), or ``nan``/``inf``/``-inf`` in any case.
  A non-finite value is *recorded as missing*: it is not a point, it clears the
  metric's final value (a run that ends in ``nan`` has no final), and it gives
  one warning per metric, however many there were. A later finite value becomes
  the final again.
- Every finite value becomes a :class:`MetricPoint`; ``seq`` counts that metric's
  points from 0, ``step`` is the step the line (or record) names, else ``None``
  (charts then use ``seq``). The final of a metric is its last finite value.
- At most ``max_points`` points are kept per metric. When a series grows past it,
  the stride doubles and only points with ``seq % stride == 0`` are kept, so the
  kept series is an even thinning of the whole run whatever the chunking;
  :meth:`Extractor.result` always adds the metric's last point, and the final
  value is always exact.

Text sources (:meth:`Extractor.feed_output`, :meth:`Extractor.feed_log`) take
chunks of *whole lines*: the end of a chunk is the end of a line (a trailing
``"\\n"`` is optional), so callers must hold back a partial last line until it is
complete. Split that way, any chunking gives identical results. Each regex runs
once over the whole chunk (``finditer``); custom patterns are compiled with
``re.MULTILINE`` (``^``/``$`` anchor at lines) and should not span lines.

Custom patterns run on the ``regex`` engine (``re``'s syntax) with a CPU-time budget
per chunk, ``pattern_budget`` (1 s), releasing the GIL while they match (callers
run the feed methods in a worker thread: the daemon's loop never waits on a
pattern). A pattern over its budget is disabled for the rest of the round, with a
warning naming it; patterns known to backtrack catastrophically are refused when
the project is loaded (:mod:`trainee.spec.regexcheck`).

File sources read job-written files safely (:mod:`trainee.jobfiles`): a symlink,
a FIFO or a device is not read, a jsonl line over :data:`MAX_JSONL_LINE` bytes is
skipped without being held, at most :data:`MAX_FILE_BYTES` of a file are read.

Built-in metrics: ``loss`` and ``total_loss`` are always looked for in the
captured output and in log files (case-insensitive; ``loss=0.1``, ``loss: 0.1``,
``'loss': 0.1``, ``loss 0.1``, ``Total Loss: 0.1``, ``loss=tensor(0.1``). A name
glued to a prefix (``val_loss``, ``train_loss``, ``val/loss``, ``train-loss``) or
after the words val/valid/validation/eval/test/dev (``val loss 2.2``) is not
``loss``; ``train loss 2.1`` (nanoGPT) is. A built-in metric's series comes from
the first stream it appears in (the captured output, or one log file), so a
value echoed by a logger to both stderr and a file is counted once. A custom
spec named ``loss`` or ``total_loss`` replaces that built-in.

The step of a text point is the nearest ``step``/``epoch``/``iter``/``iteration``/
``it`` number before the value on the same line (``step=5``, ``step 500:``,
``Epoch 3:``, ``Step [100/600]``, ``iter 10:``, ``global_step=7``); lines are split
at ``\\n`` and ``\\r`` (progress-bar redraws). A float (``epoch 1.5``) is not a step.
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import stat
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import regex

from trainee import jobfiles
from trainee.errors import ConfigError, InvalidParams, InvalidState
from trainee.metrics.csv_source import CsvReader
from trainee.metrics.tb_source import TensorBoardReader
from trainee.metrics.wandb_source import find_wandb_summary
from trainee.spec.files import BUILTIN_METRICS, MetricSource, MetricSpec, job_path_base
from trainee.spec.regexcheck import check_pattern

__all__ = [
    "BUILTIN_METRICS",
    "DEFAULT_MAX_POINTS",
    "DEFAULT_WANDB_SUMMARY_PATH",
    "MAX_FILE_BYTES",
    "MAX_JSONL_LINE",
    "PATTERN_BUDGET_SEC",
    "STEP_KEYS",
    "Extractor",
    "MetricPoint",
    "MetricWarning",
    "RoundMetrics",
    "parse_number",
]

DEFAULT_MAX_POINTS = 100_000
WANDB_SUMMARY_LIMIT = 16 << 20
"""Bytes read at most from a W&B summary (a larger one is refused with a warning)."""
DEFAULT_WANDB_SUMMARY_PATH = "{round_dir}/**/wandb-summary.json"
"""Used by a ``wandb_summary`` spec without ``path`` when the extractor is given no
``wandb_dirs`` to search (the runner gives the round's WANDB_DIR and working folder:
see :mod:`trainee.metrics.wandb_source`)."""

PATTERN_BUDGET_SEC = 1.0
"""CPU seconds one custom pattern may spend on one chunk before it is disabled."""
MAX_JSONL_LINE = 1 << 20
"""A jsonl record longer than this (bytes) is skipped, never held."""
MAX_FILE_BYTES = 256 << 20
"""Bytes read of one metric file at most; the rest is left with a warning."""

BUILTIN_SOURCE = "builtin"
STEP_KEYS: tuple[str, ...] = ("step", "global_step", "_step", "iter", "iteration", "epoch")
"""Keys of a jsonl record that give its step, first present integer wins."""


class MetricPoint(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One value of one metric; ``source`` is the spec's source or ``"builtin"``."""

    name: str
    value: float
    step: int | None
    seq: int
    source: str


class MetricWarning(msgspec.Struct):
    metric: str
    message: str


class RoundMetrics(msgspec.Struct):
    """What a round measured. ``missing_required`` non-empty means the round is
    ``completed_without_metrics``. ``primary`` is the metric rounds are compared by."""

    finals: dict[str, float] = msgspec.field(default_factory=dict)
    points: list[MetricPoint] = msgspec.field(default_factory=list)
    warnings: list[MetricWarning] = msgspec.field(default_factory=list)
    missing_required: list[str] = msgspec.field(default_factory=list)
    primary: str | None = None


# -- patterns ------------------------------------------------------------------------

_NUMBER = r"[-+]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:e[-+]?\d+)?|nan|inf(?:inity)?)"
_QUALIFIERS = ("val", "valid", "validation", "eval", "test", "dev")
# The literal comes first so the scan is a fast substring search; fixed-width
# lookbehinds then check what precedes the name. The empty group ``total`` takes
# part only when the name was ``total_loss``/``total loss``.
_BUILTIN = re.compile(
    r"loss(?:"
    r"(?<=total[_ ]loss)(?<![\w./-]total.loss)"
    + "".join(f"(?<!{q} total.loss)" for q in _QUALIFIERS)
    + r"(?P<total>)"
    r"|(?<![\w./-]loss)"
    + "".join(f"(?<!{q} loss)" for q in (*_QUALIFIERS, "total"))
    + r")['\"]?(?:\s*[=:]\s*|\s+)(?:tensor\()?"
    rf"(?P<value>{_NUMBER})(?!\w)",
    re.IGNORECASE,
)
# step/epoch/iter/iteration/it (any case) + a whole number. Written without
# IGNORECASE and with the first letter as a bare character set so the regex engine
# can skip to candidate letters; the lookbehinds check the word boundary and which
# word started.
_STEP = re.compile(
    r"[SsEeIi](?<![A-Za-z0-9].)"
    r"(?:(?<=[Ss])[Tt][Ee][Pp]|(?<=[Ee])[Pp][Oo][Cc][Hh]"
    r"|(?<=[Ii])[Tt](?:[Ee][Rr](?:[Aa][Tt][Ii][Oo][Nn])?)?)"
    r"['\"]?\s*(?:[=:#]\s*|\[\s*)?(\d+)(?!\d|\.\d)"
)
_STEP_FINDALL = _STEP.findall
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def parse_number(text: str) -> float | None:
    """``"1.5E+02"`` -> 150.0, ``"-inf"`` -> -inf, ``"NaN"`` -> nan; None if not a number."""
    try:
        return float(text)
    except ValueError:
        return None


class _Steps:
    """The step before each of increasing positions of one chunk, each character
    scanned once: many values on one long line cost no more than one."""

    __slots__ = ("has_cr", "line_start", "scanned", "step", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.has_cr = "\r" in text
        self.line_start = -1
        self.scanned = 0
        self.step: int | None = None

    def before(self, pos: int) -> int | None:
        """The last step number on the line of ``pos``, before ``pos``."""
        text = self.text
        start = text.rfind("\n", 0, pos) + 1
        if self.has_cr:
            start = max(start, text.rfind("\r", start, pos) + 1)
        if start != self.line_start or pos < self.scanned:
            self.line_start, self.scanned, self.step = start, start, None
        found = _STEP_FINDALL(text, self.scanned, pos)
        if found:
            self.step = int(found[-1])
        # a step number may run on past ``pos``: rescan from its start next time
        self.scanned = max(self.scanned, pos - 32)
        return self.step


# -- one metric's series ----------------------------------------------------------------


class _Series:
    """Points, final and problems of one metric."""

    __slots__ = (
        "bad",
        "cap",
        "file_warnings",
        "final",
        "first_bad",
        "first_nonfinite",
        "last",
        "name",
        "nonfinite",
        "points",
        "seq",
        "stream",
        "stride",
    )

    def __init__(self, name: str, cap: int) -> None:
        self.name = name
        self.cap = cap
        self.points: list[MetricPoint] = []
        self.seq = 0
        self.stride = 1
        self.final: float | None = None
        self.last: MetricPoint | None = None
        self.nonfinite = 0
        self.first_nonfinite = ""
        self.bad = 0
        self.first_bad = ""
        self.stream: str | None = None
        self.file_warnings: list[str] = []

    def add(self, value: float, step: int | None, source: str, raw: str) -> MetricPoint | None:
        """Record one value; the point if it is kept in the series."""
        if not math.isfinite(value):
            if not self.nonfinite:
                where = f" at step {step}" if step is not None else ""
                self.first_nonfinite = f"{raw.strip()!r}{where}"
            self.nonfinite += 1
            self.final = None
            return None
        point = MetricPoint(self.name, value, step, self.seq, source)
        self.seq += 1
        self.final = value
        self.last = point
        if point.seq % self.stride:
            return None
        self.points.append(point)
        if len(self.points) > self.cap:
            self.stride *= 2
            self.points = [p for p in self.points if p.seq % self.stride == 0]
        return point

    def add_text(self, raw: str | None, step: int | None, source: str) -> MetricPoint | None:
        value = parse_number(raw) if raw is not None else None
        if raw is None or value is None:
            self.reject(repr(raw))
            return None
        return self.add(value, step, source, raw)

    def reject(self, shown: str) -> None:
        """Count a value that is not a number."""
        if not self.bad:
            self.first_bad = shown
        self.bad += 1

    def series(self) -> list[MetricPoint]:
        last = self.last
        if last is not None and last.seq % self.stride:
            return [*self.points, last]
        return list(self.points)

    def warnings(self) -> list[str]:
        out = list(self.file_warnings)
        if self.bad:
            out.append(
                f"{self.bad} value(s) could not be read as numbers (first: {self.first_bad})"
            )
        if self.nonfinite:
            msg = (
                f"{self.nonfinite} non-finite value(s) recorded as missing "
                f"(first: {self.first_nonfinite})"
            )
            if self.final is None:
                msg += "; the last value was non-finite, so there is no final value"
            out.append(msg)
        return out


class _Rule:
    """A custom regex spec bound to its series."""

    __slots__ = ("disabled", "group", "regex", "series", "source")

    def __init__(self, compiled: regex.Pattern[str], series: _Series, source: str) -> None:
        self.regex = compiled
        self.group: int | str = "value" if "value" in compiled.groupindex else 1
        self.series = series
        self.source = source
        self.disabled = False


# -- the extractor -----------------------------------------------------------------------


class Extractor:
    """Collects the metrics of one round from its output, log files and metric files.

    ``placeholders`` are the round's path values (``RoundLayout.placeholders()``);
    relative spec paths are relative to the job's ``cwd`` (default ``project_root``),
    ``.trainee/...`` ones to ``project_root``. Raises ConfigError for a
    spec the loader should have refused (bad regex, unknown placeholder, no path).
    """

    def __init__(
        self,
        specs: Sequence[MetricSpec],
        *,
        placeholders: Mapping[str, str],
        project_root: str,
        max_points: int = DEFAULT_MAX_POINTS,
        pattern_budget: float = PATTERN_BUDGET_SEC,
        wandb_dirs: Sequence[str] = (),
        since: float | None = None,
        within: Sequence[str] | None = None,
        cwd: str | None = None,
    ) -> None:
        if max_points < 1:
            raise InvalidParams(f"max_points must be at least 1, got {max_points}")
        self._budget = pattern_budget
        self._wandb_dirs = tuple(wandb_dirs)
        self._since = since
        self._pollers: list[tuple[_Series, TensorBoardReader | CsvReader]] = []
        self._poll_lock = threading.Lock()
        self._specs = tuple(specs)
        self._placeholders = dict(placeholders)
        self._root = os.path.normpath(os.path.abspath(project_root))
        self._cwd = os.path.normpath(os.path.abspath(cwd)) if cwd else self._root
        """Where the job runs (its scratch folder): relative paths but .trainee/ start here."""
        # metric files are the job's: read only inside the project (and its .trainee/,
        # wherever that lives) and the round's own folders, never through a link leading
        # elsewhere
        folders = ("trainee_dir", "session_dir", "round_dir", "outputs_dir")
        self._within = (
            list(within)
            if within is not None
            else [
                self._root,
                os.path.join(self._root, ".trainee"),
                *(self._placeholders[k] for k in folders if k in self._placeholders),
            ]
        )
        self._series: list[_Series] = []
        self._output_rules: list[_Rule] = []
        self._log_rules: list[_Rule] = []
        self._file_rules: list[tuple[re.Pattern[str], _Rule]] = []
        self._file_patterns: list[str] = []
        self._readers: list[tuple[_Series, MetricSource, str, str, str]] = []
        self._rules_by_path: dict[str, list[_Rule]] = {}
        self._files_read = False

        for i, spec in enumerate(self._specs):
            self._add_spec(i, spec, max_points)
        taken = {s.name for s in self._series}
        self._builtin: dict[str, _Series | None] = {}
        for name in BUILTIN_METRICS:
            series = None if name in taken else _Series(name, max_points)
            if series is not None:
                self._series.append(series)
            self._builtin[name] = series

    def _add_spec(self, i: int, spec: MetricSpec, cap: int) -> None:
        source = MetricSource(spec.source)
        series = _Series(spec.name, cap)
        self._series.append(series)
        if source in (MetricSource.TENSORBOARD, MetricSource.CSV):
            if spec.path is None:
                raise _spec_error(i, "path", f"required for source {source}")
            pattern = self._pattern(i, spec.path)
            reader = (
                TensorBoardReader(pattern, spec.key_or_pattern, within=self._within)
                if source == MetricSource.TENSORBOARD
                else CsvReader(pattern, spec.key_or_pattern, within=self._within)
            )
            self._pollers.append((series, reader))
            return
        if source in (MetricSource.JSONL, MetricSource.WANDB_SUMMARY):
            raw = spec.path
            if raw is None:
                if source == MetricSource.JSONL:
                    raise _spec_error(i, "path", f"required for source {source}")
                raw = DEFAULT_WANDB_SUMMARY_PATH
                if self._wandb_dirs:
                    raw = ""  # found at the end: the newest run of this round
            pattern = self._pattern(i, raw) if raw else ""
            self._readers.append((series, source, spec.key_or_pattern, raw, pattern))
            return
        rule = _Rule(_compile(i, spec.key_or_pattern), series, str(source))
        if source == MetricSource.STDOUT_REGEX:
            self._output_rules.append(rule)
        elif source == MetricSource.LOG_REGEX:
            self._log_rules.append(rule)
        else:
            if spec.path is None:
                raise _spec_error(i, "path", f"required for source {source}")
            pattern = self._pattern(i, spec.path)
            self._file_patterns.append(pattern)
            self._file_rules.append((_glob_regex(i, pattern), rule))

    def _pattern(self, i: int, raw: str) -> str:
        """``raw`` with placeholders filled in (glob-escaped), absolute and normalized."""

        def fill(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in self._placeholders:
                known = ", ".join(f"{{{n}}}" for n in sorted(self._placeholders))
                raise _spec_error(i, "path", f"unknown placeholder {{{name}}}; known: {known}")
            return glob.escape(self._placeholders[name])

        text = _PLACEHOLDER.sub(fill, raw)
        if not os.path.isabs(text):
            base = job_path_base(text, cwd=self._cwd, project_root=self._root)
            text = os.path.join(glob.escape(base), text)
        return os.path.normpath(text)

    # -- text sources ----------------------------------------------------------------------

    @property
    def log_file_patterns(self) -> tuple[str, ...]:
        """Absolute glob patterns of the ``log_file_regex`` specs: files to tail (with
        ``advanced.log_paths``) and pass to :meth:`feed_log`."""
        return tuple(self._file_patterns)

    def feed_output(self, text: str) -> list[MetricPoint]:
        """Parse whole lines of captured stdout/stderr: ``stdout_regex`` specs and the
        built-in metrics. Returns the new points kept in the series."""
        return self._scan(text, self._output_rules, "output")

    def feed_log(self, path: str, text: str) -> list[MetricPoint]:
        """Parse whole lines of a tailed log file: ``log_regex`` specs, ``log_file_regex``
        specs whose path matches ``path``, and the built-in metrics."""
        full = os.path.normpath(path if os.path.isabs(path) else os.path.join(self._root, path))
        rules = self._rules_by_path.get(full)
        if rules is None:
            rules = self._log_rules + [r for g, r in self._file_rules if g.match(full)]
            self._rules_by_path[full] = rules
        return self._scan(text, rules, "log:" + full)

    def _scan(self, text: str, rules: list[_Rule], stream: str) -> list[MetricPoint]:
        out: list[MetricPoint] = []
        if not text:
            return out
        for rule in rules:
            if rule.disabled:
                continue
            series, group, source = rule.series, rule.group, rule.source
            steps = _Steps(text)
            try:
                for found in rule.regex.finditer(text, timeout=self._budget, concurrent=True):
                    point = series.add_text(found.group(group), steps.before(found.start()), source)
                    if point is not None:
                        out.append(point)
            except TimeoutError:
                rule.disabled = True
                series.file_warnings.append(
                    f"the regex {rule.regex.pattern!r} took over {self._budget:g} s of CPU on "
                    f"{len(text)} characters of {stream} (it backtracks too much); it is "
                    "disabled for the rest of this round"
                )
        loss, total = self._builtin["loss"], self._builtin["total_loss"]
        if loss is None and total is None:
            return out
        new: tuple[list[MetricPoint], list[MetricPoint]] = ([], [])
        steps = _Steps(text)
        for m in _BUILTIN.finditer(text):
            is_total, raw = m.group("total", "value")
            target = loss if is_total is None else total
            if target is None:
                continue
            if target.stream != stream:
                if target.stream is not None:
                    continue
                target.stream = stream
            point = target.add(float(raw), steps.before(m.start()), BUILTIN_SOURCE, raw)
            if point is not None:
                new[is_total is not None].append(point)
        return out + new[0] + new[1]

    # -- file sources ----------------------------------------------------------------------

    def read_files(self) -> list[MetricPoint]:
        """Read the ``jsonl`` and ``wandb_summary`` files; call once, when the round ends.

        jsonl: every matching file, oldest first (by mtime, then path); every record
        holding the key (or dotted path) is a point, its step the first integer of
        ``STEP_KEYS``; a malformed line is skipped with a warning. wandb_summary: the
        newest matching file; its value is one point, step from ``_step``.
        """
        if self._files_read:
            raise InvalidState("read_files() was already called for this round")
        self._files_read = True
        out: list[MetricPoint] = self._poll(final=True)
        for series, source, key, raw, pattern in self._readers:
            if not pattern:
                found, searched = find_wandb_summary(self._wandb_dirs, since=self._since)
                if found is None:
                    series.file_warnings.append(
                        "no W&B summary of this round found (searched "
                        + ", ".join(searched)
                        + "); set the spec's path if the job writes it elsewhere"
                    )
                    continue
                paths = [found]
            else:
                paths = _matching_files(pattern)
            if not paths:
                series.file_warnings.append(f"no file matches {raw!r}")
                continue
            if source == MetricSource.JSONL:
                for path in paths:
                    out.extend(_read_jsonl(series, path, key, self._within))
            else:
                point = _read_wandb(series, paths[-1], key, self._within)
                if point is not None:
                    out.append(point)
        return out

    @property
    def polled(self) -> bool:
        """Whether some source is read while the round runs (:meth:`poll_files`)."""
        return bool(self._pollers)

    def poll_files(self) -> list[MetricPoint]:
        """Read what the ``tensorboard`` and ``csv`` sources added since the last call
        (safe to run in a worker thread beside the text sources); :meth:`read_files`
        reads the rest when the round ends."""
        if self._files_read:
            return []
        return self._poll(final=False)

    def _poll(self, *, final: bool) -> list[MetricPoint]:
        out: list[MetricPoint] = []
        with self._poll_lock:
            for series, reader in self._pollers:
                try:
                    records, warnings = reader.poll(final=final)
                except Exception as exc:  # a reader's bug must not end the round's supervision
                    records, warnings = [], [f"reading failed: {type(exc).__name__}: {exc}"]
                series.file_warnings.extend(w for w in warnings if w not in series.file_warnings)
                source = str(
                    MetricSource.TENSORBOARD
                    if isinstance(reader, TensorBoardReader)
                    else MetricSource.CSV
                )
                for value, step, raw in records:
                    if value is None:
                        series.reject(raw)
                        continue
                    point = series.add(value, step, source, raw)
                    if point is not None:
                        out.append(point)
        return out

    # -- result ------------------------------------------------------------------------------

    def nonfinite(self) -> dict[str, str]:
        """The metrics that had a NaN or infinite value so far (such values are never
        points): name -> the first one as printed, ``'nan' at step 7``."""
        return {s.name: s.first_nonfinite for s in self._series if s.nonfinite}

    def result(self) -> RoundMetrics:
        """A snapshot of finals, points, warnings, missing required metrics and the primary."""
        finals: dict[str, float] = {}
        points: list[MetricPoint] = []
        warnings: list[MetricWarning] = []
        for series in self._series:
            if series.final is not None:
                finals[series.name] = series.final
            points.extend(series.series())
            warnings.extend(MetricWarning(series.name, msg) for msg in series.warnings())
        missing: list[str] = []
        if self._specs:
            for spec in self._specs:
                if spec.required and spec.name not in finals:
                    missing.append(spec.name)
                    where = spec.path or spec.key_or_pattern
                    warnings.append(
                        MetricWarning(
                            spec.name,
                            f"required metric not found ({MetricSource(spec.source)} {where!r})",
                        )
                    )
            primary: str | None = self._specs[0].name
        else:
            primary = next((n for n in BUILTIN_METRICS if n in finals), None)
            if primary is None:
                missing.append("loss")
                warnings.append(
                    MetricWarning(
                        "loss",
                        "no finite loss or total_loss value was found in the output or log "
                        "files (e.g. 'loss=0.5'); add metrics.specs to read other metrics",
                    )
                )
        return RoundMetrics(
            finals=finals,
            points=points,
            warnings=warnings,
            missing_required=missing,
            primary=primary,
        )


# -- helpers -----------------------------------------------------------------------------------


def _spec_error(i: int, field: str, reason: str) -> ConfigError:
    where = f"metrics.specs[{i}].{field}"
    return ConfigError(f"{where}: {reason}", field=where, reason=reason)


def _compile(i: int, pattern: str) -> regex.Pattern[str]:
    problem = check_pattern(pattern)
    if problem is not None:
        raise _spec_error(i, "key_or_pattern", problem)
    compiled = regex.compile(pattern, regex.MULTILINE | regex.VERSION0)
    if "value" not in compiled.groupindex and compiled.groups < 1:
        raise _spec_error(
            i, "key_or_pattern", "the regex needs a named group (?P<value>...) or a capture group"
        )
    return compiled


def _glob_regex(i: int, pattern: str) -> re.Pattern[str]:
    """A regex matching the paths ``glob.glob(pattern, recursive=True)`` would find:
    ``**`` as a whole segment spans directories, ``*``/``?`` stay within one."""
    out: list[str] = []
    n = len(pattern)
    j = 0
    while j < n:
        c = pattern[j]
        if c == "*":
            segment_start = j == 0 or pattern[j - 1] == "/"
            if (
                pattern.startswith("**", j)
                and segment_start
                and (j + 2 == n or pattern[j + 2] == "/")
            ):
                if j + 2 == n:
                    out.append(".*")
                    j += 2
                else:
                    out.append("(?:.*/)?")
                    j += 3
                continue
            while j < n and pattern[j] == "*":
                j += 1
            out.append("[^/]*")
            continue
        if c == "?":
            out.append("[^/]")
            j += 1
            continue
        if c == "[":
            end = j + 1
            if end < n and pattern[end] == "!":
                end += 1
            if end < n and pattern[end] == "]":
                end += 1
            end = pattern.find("]", end)
            if end < 0:
                out.append(re.escape(c))
                j += 1
                continue
            body = pattern[j + 1 : end]
            negate = body.startswith("!")
            chars = "".join(ch if ch == "-" else re.escape(ch) for ch in body[int(negate) :])
            out.append(f"[{'^' if negate else ''}{chars}]")
            j = end + 1
            continue
        out.append(re.escape(c))
        j += 1
    try:
        return re.compile("".join(out) + r"\Z", re.DOTALL)
    except re.error as exc:
        raise _spec_error(i, "path", f"invalid glob {pattern!r}: {exc}") from None


def _matching_files(pattern: str) -> list[str]:
    """Files matching ``pattern`` (not folders), oldest first (mtime, then path). What is
    not a regular file is kept: reading it says why it is refused."""
    found: list[tuple[int, str]] = []
    for path in jobfiles.find_job_files(pattern):  # bounded, never through a link
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            found.append((st.st_mtime_ns, path))
    return [path for _, path in sorted(found)]


_BAD = object()


def _decode_json(data: bytes) -> Any:
    """A JSON value, accepting the ``NaN``/``Infinity`` Python's json writes; ``_BAD`` if
    the text is not JSON."""
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError:
        pass
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return _BAD


def _lookup(record: dict[str, Any], key: str) -> tuple[bool, Any]:
    """``record[key]``, else the dotted path ``key`` through nested objects."""
    if key in record:
        return True, record[key]
    current: Any = record
    for part in key.split("."):
        if not isinstance(current, dict) or part not in current:
            return False, None
        current = current[part]
    return True, current


def _as_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:
            return None
    if isinstance(value, str):
        return parse_number(value)
    return None


def _record_step(record: dict[str, Any]) -> int | None:
    for key in STEP_KEYS:
        value = record.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _read_jsonl(
    series: _Series, path: str, key: str, within: Sequence[str] | None = None
) -> list[MetricPoint]:
    out: list[MetricPoint] = []
    source = str(MetricSource.JSONL)
    malformed = first_malformed = lines = hits = too_long = 0
    try:
        fd = jobfiles.open_job_file(path, within=within)
    except OSError as exc:
        series.file_warnings.append(f"cannot read {path}: {exc.strerror or exc}")
        return out
    try:
        size = os.fstat(fd).st_size
        for lineno, raw in enumerate(jobfiles.bounded_lines(fd, MAX_JSONL_LINE, MAX_FILE_BYTES), 1):
            if isinstance(raw, int):
                too_long += 1
                continue
            line = raw.strip()
            if not line:
                continue
            lines += 1
            record = _decode_json(line)
            if not isinstance(record, dict):
                malformed += 1
                first_malformed = first_malformed or lineno
                continue
            found, value = _lookup(record, key)
            if not found:
                continue
            number = _as_number(value)
            hits += 1
            if number is None:
                series.reject(repr(value))
                continue
            point = series.add(number, _record_step(record), source, str(value))
            if point is not None:
                out.append(point)
    except OSError as exc:
        series.file_warnings.append(f"cannot read {path}: {exc.strerror or exc}")
        return out
    finally:
        os.close(fd)
    if too_long:
        series.file_warnings.append(
            f"skipped {too_long} line(s) of {path} longer than {MAX_JSONL_LINE} bytes"
        )
    if size > MAX_FILE_BYTES:
        series.file_warnings.append(
            f"read only the first {MAX_FILE_BYTES} of the {size} bytes of {path}"
        )
    if malformed:
        series.file_warnings.append(
            f"skipped {malformed} malformed line(s) of {path} (first: line {first_malformed})"
        )
    if lines and not hits:
        series.file_warnings.append(f"key {key!r} not found in {lines} record(s) of {path}")
    return out


def _read_wandb(
    series: _Series, path: str, key: str, within: Sequence[str] | None = None
) -> MetricPoint | None:
    try:
        data, more = jobfiles.read_bounded(path, WANDB_SUMMARY_LIMIT, within=within)
        if more:
            raise jobfiles.NotRegularFile(0, f"larger than {WANDB_SUMMARY_LIMIT} bytes", path)
    except OSError as exc:
        series.file_warnings.append(f"cannot read {path}: {exc.strerror or exc}")
        return None
    summary = _decode_json(data)
    if not isinstance(summary, dict):
        series.file_warnings.append(f"{path} is not a JSON object")
        return None
    found, value = _lookup(summary, key)
    if not found:
        series.file_warnings.append(f"key {key!r} not found in {path}")
        return None
    source = str(MetricSource.WANDB_SUMMARY)
    number = _as_number(value)
    if number is None:
        series.reject(repr(value))
        return None
    step = summary.get("_step")
    if not isinstance(step, int) or isinstance(step, bool):
        step = None
    return series.add(number, step, source, str(value))
