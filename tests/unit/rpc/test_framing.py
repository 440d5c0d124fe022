"""Newline-delimited framing: splitting, CRLF, empty lines, the size limit."""

from __future__ import annotations

import random

import pytest

from trainee.rpc.framing import DEFAULT_MAX_FRAME, FrameBuffer, FrameTooLarge, encode_frame


def test_several_frames_in_one_chunk() -> None:
    buffer = FrameBuffer()
    assert buffer.feed(b'{"a":1}\n[2]\n"three"\n') == [b'{"a":1}', b"[2]", b'"three"']
    assert buffer.pending == 0


def test_a_frame_split_over_chunks_is_held_until_its_newline() -> None:
    buffer = FrameBuffer()
    assert buffer.feed(b'{"jsonrpc":') == []
    assert buffer.pending == 11
    assert buffer.feed(b'"2.0"}\n{"x"') == [b'{"jsonrpc":"2.0"}']
    assert buffer.feed(b":1}") == []
    assert buffer.feed(b"\n") == [b'{"x":1}']
    assert buffer.pending == 0


def test_crlf_is_stripped_and_empty_lines_skipped() -> None:
    buffer = FrameBuffer()
    assert buffer.feed(b"\n\r\n[1]\r\n\n\n[2]\r") == [b"[1]"]
    assert buffer.feed(b"\n") == [b"[2]"]
    assert buffer.feed(b"a\rb\r\r\n") == [b"a\rb\r"]  # only one trailing \r goes


def test_any_chunking_gives_the_same_frames() -> None:
    frames = [b"x" * n for n in (1, 5, 63, 64, 65, 200)] + [b'{"k":"\xc3\xa9"}']
    stream = b"".join(f + (b"\r\n" if i % 2 else b"\n") for i, f in enumerate(frames))
    rng = random.Random(1234)
    for _ in range(200):
        buffer = FrameBuffer(max_frame=200)
        out: list[bytes | FrameTooLarge] = []
        pos = 0
        while pos < len(stream):
            step = rng.randint(1, 40)
            out += buffer.feed(stream[pos : pos + step])
            pos += step
        assert out == frames
        assert buffer.pending == 0


def test_oversized_frame_in_one_chunk_gives_one_marker() -> None:
    buffer = FrameBuffer(max_frame=8)
    assert buffer.feed(b"123456789\n[1]\n") == [FrameTooLarge(8), b"[1]"]


def test_oversized_frame_over_many_chunks_is_never_held() -> None:
    buffer = FrameBuffer(max_frame=8)
    assert buffer.feed(b"12345") == []
    assert buffer.feed(b"6789") == [FrameTooLarge(8)]
    assert buffer.pending == 0
    for _ in range(100):
        assert buffer.feed(b"x" * 50) == []  # the rest of that line is dropped
        assert buffer.pending == 0
    assert buffer.feed(b"yyy\n[2]\n") == [b"[2]"]
    assert buffer.feed(b"123456789") == [FrameTooLarge(8)]
    assert buffer.feed(b"\n") == []
    assert buffer.feed(b"[3]\n") == [b"[3]"]


def test_limit_is_inclusive_and_a_trailing_cr_does_not_count() -> None:
    buffer = FrameBuffer(max_frame=4)
    assert buffer.feed(b"1234\n12345\n") == [b"1234", FrameTooLarge(4)]
    assert buffer.feed(b"1234\r\n") == [b"1234"]
    assert buffer.feed(b"1234\r") == []  # may be the \r of a \r\n: held
    assert buffer.pending == 5
    assert buffer.feed(b"\n") == [b"1234"]
    assert buffer.feed(b"1234\r") == []
    assert buffer.feed(b"5\n") == [FrameTooLarge(4)]
    assert buffer.feed(b"12345") == [FrameTooLarge(4)]
    assert buffer.feed(b"\n1\n") == [b"1"]


def test_pending_never_exceeds_the_limit() -> None:
    rng = random.Random(99)
    buffer = FrameBuffer(max_frame=100)
    for _ in range(2000):
        chunk = bytes(rng.choice(b"ab\r\n") if rng.random() < 0.02 else 97 for _ in range(37))
        buffer.feed(chunk)
        assert buffer.pending <= 101


def test_default_limit_is_16_mib() -> None:
    assert FrameBuffer().max_frame == DEFAULT_MAX_FRAME == 16 * 2**20
    big = b'"' + b"x" * (DEFAULT_MAX_FRAME - 2) + b'"'
    assert len(big) == DEFAULT_MAX_FRAME
    assert FrameBuffer().feed(big + b"\n") == [big]
    assert FrameBuffer().feed(big + b"0\n") == [FrameTooLarge(DEFAULT_MAX_FRAME)]


def test_bad_limit_is_refused() -> None:
    with pytest.raises(ValueError, match="max_frame must be at least 1 byte, got 0"):
        FrameBuffer(0)


def test_encode_frame_appends_a_newline() -> None:
    assert encode_frame(b'{"a":1}') == b'{"a":1}\n'
    assert FrameBuffer().feed(encode_frame(b"[1]") * 3) == [b"[1]"] * 3


def test_frame_too_large_marker() -> None:
    assert FrameTooLarge(5) == FrameTooLarge(5) != FrameTooLarge(6)
    assert FrameTooLarge(5) != b"5"
    assert repr(FrameTooLarge(5)) == "FrameTooLarge(max_frame=5)"
    assert len({FrameTooLarge(5), FrameTooLarge(5)}) == 1
