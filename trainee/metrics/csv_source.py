"""The ``csv`` metric source: one column of a CSV table with a header row.

``path`` is a glob; the newest matching file is read (timm's ``summary.csv``, a
Lightning ``CSVLogger``'s ``metrics.csv``, any logger writing one row per epoch).
Every row with a number in the column is a point, its step the row's ``epoch`` /
``step`` / ... column when there is one; the metric's final value is the last row's.
Rows are read incrementally while the round runs (a partial last line waits for its
newline, except in the final read), at most :data:`MAX_READ` bytes per read: a file
seen first when it is larger than that is read from its header and its last
:data:`MAX_READ` bytes only. A file that shrinks (rewritten) is read again from its
start, with a warning. Stdlib only.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence

from trainee import jobfiles

__all__ = ["MAX_HEADER", "MAX_READ", "CsvReader"]

MAX_READ = 8 * 2**20
"""Bytes read from a CSV file per poll."""

MAX_HEADER = 64 * 2**10
"""Longest header line read."""

_STEP_COLUMNS = ("step", "global_step", "_step", "iter", "iteration", "epoch")

Record = tuple[float | None, int | None, str]


class CsvReader:
    """Follows the newest file matching ``pattern`` for the values of ``column``."""

    def __init__(
        self,
        pattern: str,
        column: str,
        *,
        max_read: int = MAX_READ,
        within: Sequence[str] | None = None,
    ) -> None:
        self.pattern = pattern
        self.within = within
        """Where the file may be (it is the job's: opened by :mod:`trainee.jobfiles`)."""
        self.column = column
        self.max_read = max(1, max_read)
        self._said: set[str] = set()
        self._reset(None)

    def _reset(self, path: str | None) -> None:
        self._path = path
        self._offset = 0
        self._header: list[str] | None = None
        self._col: int | None = None
        self._step_col: int | None = None
        self._rows = 0

    def poll(self, *, final: bool = False) -> tuple[list[Record], list[str]]:
        """New points since the last poll, and new warnings (each said once)."""
        warnings: list[str] = []
        path = self._newest()
        if path is None:
            if final:
                self._once(warnings, f"no file matches {self.pattern!r}")
            return [], warnings
        if path != self._path:
            self._reset(path)
        out: list[Record] = []
        try:
            with os.fdopen(jobfiles.open_job_file(path, within=self.within), "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size < self._offset:
                    self._once(warnings, f"{path} was rewritten; it is read again from its start")
                    self._reset(path)
                if self._header is None and self._offset == 0 and size > self.max_read:
                    header = f.readline(MAX_HEADER)
                    self._read_header(header, warnings)
                    self._offset = max(len(header), size - self.max_read)
                    self._once(
                        warnings,
                        f"{path} holds {size} bytes; only its header and the rows of its "
                        f"last {self.max_read} bytes were read",
                    )
                    f.seek(self._offset)
                    f.readline()  # to the start of a whole row
                    self._offset = f.tell()
                f.seek(self._offset)
                data = f.read(min(self.max_read, max(0, size - self._offset)))
        except OSError as exc:
            self._once(warnings, f"cannot read {path}: {exc.strerror or exc}")
            return [], warnings
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) >= self.max_read:
            # one row longer than a whole read: skipped, or the reader would never move on
            self._once(warnings, f"{path} has a row longer than {self.max_read} bytes; skipped")
            self._offset += len(data)
            return out, warnings
        if final and end < len(data):
            end = len(data)
        self._offset += end
        lines = data[:end].decode("utf-8", errors="replace").splitlines()
        for row in csv.reader(lines):
            if not row or not any(cell.strip() for cell in row):
                continue
            if self._header is None:
                self._set_header(row, warnings)
                continue
            if row == self._header:
                continue  # a logger that wrote its header again
            out.extend(self._value(row))
        if final and self._header is not None and self._col is None:
            shown = ", ".join(self._header[:30])
            self._once(warnings, f"column {self.column!r} not in the header of {path} ({shown})")
        elif final and self._col is not None and not self._rows:
            self._once(warnings, f"{path} has no row with a value in column {self.column!r}")
        return out, warnings

    def _read_header(self, line: bytes, warnings: list[str]) -> None:
        rows = list(csv.reader([line.decode("utf-8", errors="replace")]))
        if rows and rows[0]:
            self._set_header(rows[0], warnings)

    def _set_header(self, row: list[str], warnings: list[str]) -> None:
        self._header = row
        names = [cell.strip() for cell in row]
        if self.column in row:
            self._col = row.index(self.column)
        elif self.column.strip() in names:
            self._col = names.index(self.column.strip())
        self._step_col = next((names.index(s) for s in _STEP_COLUMNS if s in names), None)

    def _value(self, row: list[str]) -> list[Record]:
        if self._col is None or self._col >= len(row):
            return []
        cell = row[self._col].strip()
        if not cell:
            return []
        self._rows += 1
        try:
            value: float | None = float(cell)
        except ValueError:
            value = None
        step: int | None = None
        if self._step_col is not None and self._step_col < len(row):
            text = row[self._step_col].strip()
            if text.lstrip("+-").isdigit():
                step = int(text)
        return [(value, step, cell)]

    def _newest(self) -> str | None:
        best: tuple[float, str] | None = None
        for path in jobfiles.find_job_files(self.pattern):  # bounded, never through a link
            try:
                st = os.stat(path)
            except OSError:
                continue
            if os.path.isfile(path) and (best is None or (st.st_mtime, path) > best):
                best = (st.st_mtime, path)
        return best[1] if best else None

    def _once(self, warnings: list[str], message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            warnings.append(message)
