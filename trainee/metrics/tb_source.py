"""The ``tensorboard`` metric source: one scalar tag from TensorBoard event files.

``path`` is a glob of event files or of folders holding them (``{outputs_dir}/tb``,
``{round_dir}/**/events.out.tfevents.*``); every ``*tfevents*`` file found is read with
TensorBoard's own reader (``EventFileLoader``, which also migrates the legacy
``simple_value`` scalars that torch.utils.tensorboard and tensorboardX write into the
tensor form that Keras and ``tensorboard.summary`` write). Each event of the tag is a
point, its step the event's step. The reader is incremental: each :meth:`poll` reads
only what was appended since the last one, so the source is read while the round runs.

TensorBoard is an optional extra (``pip install 'trainee[tensorboard]'``), imported
only when a tensorboard source is read.
"""

from __future__ import annotations

import glob
import importlib.util
import os
from collections.abc import Sequence
from typing import Any

from trainee import jobfiles
from trainee.errors import NotAvailable
from trainee.spec.files import MetricSource, MetricSpec

__all__ = [
    "INSTALL_HINT",
    "MAX_EVENT_FILES",
    "TensorBoardReader",
    "require_tensorboard",
    "tensorboard_available",
]

MAX_EVENT_FILES = 64
"""Event files followed per source; more are left out with a warning."""

INSTALL_HINT = (
    "the tensorboard metric source needs the tensorboard package, an optional extra: "
    "pip install 'trainee[tensorboard]'"
)

Record = tuple[float | None, int | None, str]
"""A value (None: not a number), its step and its text (for warnings)."""


def tensorboard_available() -> bool:
    return importlib.util.find_spec("tensorboard") is not None


def require_tensorboard(specs: Sequence[MetricSpec]) -> None:
    """NotAvailable (naming the spec) when a spec reads TensorBoard files and the
    tensorboard package is not installed: checked before a session's first round."""
    for i, spec in enumerate(specs):
        if spec.source == MetricSource.TENSORBOARD and not tensorboard_available():
            raise NotAvailable(
                f"metrics.specs[{i}] ({spec.name}): {INSTALL_HINT}",
                {"field": f"metrics.specs[{i}].source", "reason": "tensorboard is not installed"},
            )


class TensorBoardReader:
    """Follows the event files matching ``pattern`` for scalars tagged ``tag``."""

    def __init__(self, pattern: str, tag: str, *, within: Sequence[str] | None = None) -> None:
        self.pattern = pattern
        self.tag = tag
        self.within = within
        """Where the event files may be (they are the job's: see :mod:`trainee.jobfiles`)."""
        self._fds: dict[str, int] = {}
        self._loaders: dict[str, Any] = {}
        self._order: list[str] = []
        self._said: set[str] = set()
        self._hits = 0
        self._tags: set[str] = set()

    def poll(self, *, final: bool = False) -> tuple[list[Record], list[str]]:
        """New points since the last poll, and new warnings (each said once).

        With ``final`` (the round has ended) a missing tag or file is reported."""
        warnings: list[str] = []
        try:
            from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
            from tensorboard.util import tensor_util
        except ImportError:
            return [], self._once(warnings, INSTALL_HINT)
        for path in self._event_files():
            if path in self._loaders:
                continue
            if len(self._loaders) >= MAX_EVENT_FILES:
                self._once(
                    warnings,
                    f"more than {MAX_EVENT_FILES} event files match; the rest are not read",
                )
                break
            try:
                # the loader opens a path itself: give it the file opened safely here (a
                # regular file, no link leading elsewhere), which nothing can swap
                fd = jobfiles.open_job_file(path, within=self.within)
            except OSError as exc:
                self._once(warnings, f"cannot read {path}: {exc.strerror or exc}")
                continue
            try:
                self._loaders[path] = EventFileLoader(f"/proc/self/fd/{fd}")
            except (OSError, ValueError) as exc:
                os.close(fd)
                self._once(warnings, f"cannot read {path}: {exc}")
                continue
            self._fds[path] = fd
            self._order.append(path)
        out: list[Record] = []
        for path in self._order:
            try:
                for event in self._loaders[path].Load():
                    out.extend(self._scalars(event, tensor_util))
            except Exception as exc:  # a corrupt file must not end the round's supervision
                self._once(warnings, f"stopped reading {path}: {type(exc).__name__}: {exc}")
        if final and not out and not self._hits:
            if not self._order:
                self._once(warnings, f"no TensorBoard event file matches {self.pattern!r}")
            else:
                seen = ", ".join(sorted(self._tags)[:20]) or "none"
                self._once(
                    warnings,
                    f"tag {self.tag!r} not found in {len(self._order)} event file(s) "
                    f"(scalar tags seen: {seen})",
                )
        if final:
            self.close()
        return out, warnings

    def close(self) -> None:
        """Let go of the event files (after the final poll, nothing is read again)."""
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def __del__(self) -> None:
        for fd in getattr(self, "_fds", {}).values():
            os.close(fd)

    def _scalars(self, event: Any, tensor_util: Any) -> list[Record]:
        if not event.HasField("summary"):
            return []
        out: list[Record] = []
        for value in event.summary.value:
            if len(self._tags) < 200:
                self._tags.add(value.tag)
            if value.tag != self.tag:
                continue
            self._hits += 1
            number: float | None = None
            if value.HasField("tensor"):
                try:
                    array = tensor_util.make_ndarray(value.tensor)
                except Exception:
                    array = None
                if array is not None and array.size == 1 and array.dtype.kind in "fiub":
                    number = float(array.reshape(()))
            elif value.WhichOneof("value") == "simple_value":
                number = float(value.simple_value)
            shown = repr(number) if number is not None else "a non-scalar value"
            out.append((number, int(event.step), shown))
        return out

    def _event_files(self) -> list[str]:
        found: list[tuple[float, str]] = []
        # bounded, never through a link: the folders are the job's (trainee.jobfiles)
        for match in jobfiles.find_job_files(self.pattern):
            paths = (
                jobfiles.find_job_files(os.path.join(glob.escape(match), "**", "*tfevents*"))
                if os.path.isdir(match) and not os.path.islink(match)
                else [match]
            )
            for path in paths:
                if "tfevents" not in os.path.basename(path):
                    continue
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if os.path.isfile(path):
                    found.append((st.st_mtime, path))
        return [p for _, p in sorted(found)]

    def _once(self, warnings: list[str], message: str) -> list[str]:
        if message not in self._said:
            self._said.add(message)
            warnings.append(message)
        return warnings
