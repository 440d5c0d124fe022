"""Newline-delimited frames: one JSON text per line. Stdlib only (the CLI imports it).

A frame is every byte of a line before its ``\\n``, without a trailing ``\\r``;
empty lines are skipped. JSON text never holds a raw newline, so no escaping is
needed. A frame longer than ``max_frame`` bytes is not buffered: the reader
yields one :class:`FrameTooLarge` marker and drops the rest of that line, so a
peer can answer with an error and keep the connection.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_FRAME", "FrameBuffer", "FrameTooLarge", "encode_frame"]

DEFAULT_MAX_FRAME = 16 * 2**20


class FrameTooLarge:
    """Marker standing for a frame that was longer than ``max_frame`` bytes."""

    __slots__ = ("max_frame",)

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame

    def __repr__(self) -> str:
        return f"FrameTooLarge(max_frame={self.max_frame})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FrameTooLarge) and other.max_frame == self.max_frame

    def __hash__(self) -> int:
        return hash((FrameTooLarge, self.max_frame))


class FrameBuffer:
    """Splits a byte stream into frames; holds at most ``max_frame`` bytes of an open frame."""

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if max_frame < 1:
            raise ValueError(f"max_frame must be at least 1 byte, got {max_frame}")
        self.max_frame = max_frame
        self._partial = bytearray()
        self._discarding = False

    @property
    def pending(self) -> int:
        """Bytes held of the frame not yet ended by a newline."""
        return len(self._partial)

    def abandon(self) -> None:
        """Drop the open frame; the rest of its line is skipped as it arrives."""
        if self._partial:
            self._partial = bytearray()
            self._discarding = True

    def feed(self, data: bytes) -> list[bytes | FrameTooLarge]:
        """Add received bytes; return the frames (and oversize markers) they complete."""
        out: list[bytes | FrameTooLarge] = []
        start = 0
        while (end := data.find(b"\n", start)) >= 0:
            line = data[start:end]
            start = end + 1
            if self._discarding:  # the tail of a frame already reported as too large
                self._discarding = False
                continue
            if self._partial:
                self._partial += line
                line = bytes(self._partial)
                self._partial.clear()
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > self.max_frame:
                out.append(FrameTooLarge(self.max_frame))
            elif line:
                out.append(line)
        if self._discarding or start == len(data):
            return out
        held = len(self._partial) + len(data) - start
        # One byte over is allowed when it is the \r of a \r\n still on its way.
        if held > self.max_frame + 1 or (held == self.max_frame + 1 and data[-1:] != b"\r"):
            self._partial.clear()
            self._discarding = True
            out.append(FrameTooLarge(self.max_frame))
        else:
            self._partial += data[start:]
        return out


def encode_frame(obj_bytes: bytes) -> bytes:
    """One encoded JSON text as a frame on the wire."""
    return obj_bytes + b"\n"
