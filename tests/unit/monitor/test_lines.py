"""Line assembly and FileTail: \\r segments, ANSI, cuts, partial lines, streams, files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainee.monitor.tail import MAX_LINE, FileTail, Line, _Assembler, _watch_root, strip_ansi


def assemble(chunks: list[bytes], max_line: int = MAX_LINE) -> list[tuple[str, int]]:
    """Feed ``chunks`` as consecutive bytes of one file; flush at the end."""
    asm = _Assembler("f", "log", max_line)
    out: list[Line] = []
    offset = 0
    for chunk in chunks:
        out += asm.feed(chunk, offset)
        offset += len(chunk)
    out += asm.flush()
    return [(line.text, line.raw_offset) for line in out]


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"a\nb\n"], [("a", 0), ("b", 2)]),
        ([b"hel", b"lo\nwor", b"ld\n"], [("hello", 0), ("world", 6)]),
        ([b"a\n\nb\n"], [("a", 0), ("", 2), ("b", 3)]),
        ([b"no newline at the end"], [("no newline at the end", 0)]),
        # a run of \r segments keeps its last non-empty one
        ([b"a\rb\rc\n"], [("c", 4)]),
        ([b"windows\r\nline\r\n"], [("windows", 0), ("line", 9)]),
        # a live progress bar: one line per read, never one endless line
        (
            [b"10%\r", b"20%\r", b"100%\r\n", b"next\n"],
            [("10%", 0), ("20%", 4), ("100%", 8), ("next", 14)],
        ),
        ([b"1%\r2%\r3%\r"], [("3%", 6)]),
        # the \n right after an already shown \r segment adds no empty line
        ([b"abc\r", b"\n", b"x\n"], [("abc", 0), ("x", 5)]),
        # ... but the rest of the line after it does count
        ([b"abc\r", b"def\n"], [("abc", 0), ("def", 4)]),
        (["é\nü\n".encode()], [("é", 0), ("ü", 3)]),
        ([b"bad \xff byte\n"], [("bad \ufffd byte", 0)]),
    ],
)
def test_assembly(chunks: list[bytes], expected: list[tuple[str, int]]) -> None:
    assert assemble(chunks) == expected


def test_every_split_point_gives_the_same_lines() -> None:
    data = b"epoch 1\rloss 0.5\x1b[0m\n\nstep\r\r50%\r100%\r\nend"
    whole = assemble([data])
    for cut in range(1, len(data)):
        pieces = assemble([data[:cut], data[cut:]])
        # a read that ends inside a \r run may show an extra progress segment;
        # the lines after it and every \n-terminated line are the same
        assert [t for t in pieces if t in whole] == whole, cut


def test_ansi_codes_are_stripped() -> None:
    assert assemble([b"\x1b[1;31mred\x1b[0m \x1b]0;title\x07done\n"]) == [("red done", 0)]
    assert strip_ansi("plain") == "plain"
    assert strip_ansi("\x1b[2K\x1b[Aup") == "up"


def test_over_long_lines_are_cut_with_a_marker() -> None:
    assert assemble([b"x" * 10 + b"\nyy\n"], max_line=4) == [
        ("xxxx…[line cut: 6 bytes]", 0),
        ("yy", 11),
    ]
    # an unfinished long line is never held whole
    asm = _Assembler("f", "log", 4)
    assert asm.feed(b"x" * 3, 0) == []
    assert asm.feed(b"x" * 100, 3) == []
    assert len(asm.pend) == 4
    lines = asm.feed(b"x\nok\n", 103)
    assert [(line.text, line.raw_offset) for line in lines] == [
        ("xxxx…[line cut: 100 bytes]", 0),
        ("ok", 105),
    ]


def test_cut_line_ending_in_a_progress_segment() -> None:
    assert assemble([b"x" * 3, b"x" * 5, b"\rprog\r", b"\n"], max_line=4) == [
        ("xxxx…[line cut: 4 bytes]", 0),
        ("prog", 9),
    ]


# -- FileTail on real files ----------------------------------------------------------------


def texts(lines: list[Line]) -> list[str]:
    return [line.text for line in lines]


def test_growth_and_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    tail = FileTail(str(path))
    assert tail.read() == []  # not there yet
    path.write_bytes(b"one\ntw")
    assert texts(tail.read()) == ["one"]
    assert tail.resume_offset == 4  # the unfinished line is read again on resume
    with path.open("ab") as f:
        f.write(b"o\nthree")
    assert texts(tail.read()) == ["two"]
    assert texts(tail.finish()) == ["three"]
    assert tail.resume_offset == path.stat().st_size
    tail.close()


def test_resume_from_an_offset(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(b"old 1\nold 2\nnew 1\n")
    tail = FileTail(str(path), offset=12)
    assert [(line.text, line.raw_offset, line.stream) for line in tail.read()] == [
        ("new 1", 12, "log")
    ]
    tail.close()


def test_truncation_restarts_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(b"line 1\nline 2\nline 3\n")
    tail = FileTail(str(path))
    assert len(tail.read()) == 3
    path.write_bytes(b"fresh\n")
    lines = tail.read()
    assert lines[0].marker and "truncated" in lines[0].text
    assert [(line.text, line.raw_offset) for line in lines[1:]] == [("fresh", 0)]
    tail.close()


def test_rotation_reads_old_then_new(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(b"a\n")
    tail = FileTail(str(path))
    assert texts(tail.read()) == ["a"]
    with path.open("ab") as f:
        f.write(b"b\nunfinished")
    os.rename(path, tmp_path / "train.log.1")
    assert texts(tail.read()) == ["b"]  # path gone: the open file is still read
    path.write_bytes(b"c\n")
    lines = tail.read()
    assert texts(lines[:1]) == ["unfinished"]
    assert lines[1].marker and "replaced" in lines[1].text
    assert [(line.text, line.raw_offset) for line in lines[2:]] == [("c", 0)]
    tail.close()


def test_streams_from_the_index(tmp_path: Path) -> None:
    """stderr ranges from the index are split out, even inside a stdout line."""
    path = tmp_path / "round.log"
    index = tmp_path / "round.log.idx"
    parts = [
        (b"out 1\nout 2 be", "o"),
        (b"err 1\n", "e"),
        (b"gins here\n", "o"),
        (b"err 2\nerr", "e"),
        (b" 3\n", "e"),
        (b"out 3\n", "o"),
    ]
    raw = b""
    idx = ""
    for data, kind in parts:
        if kind == "e":
            idx += f"{len(raw)} {len(data)}\n"
        raw += data
    path.write_bytes(raw)
    index.write_text(idx)
    tail = FileTail(str(path), index=str(index))
    got = [(line.stream, line.text, line.raw_offset) for line in tail.finish()]
    assert got == [
        ("stdout", "out 1", 0),
        ("stderr", "err 1", 14),
        ("stdout", "out 2 begins here", 6),
        ("stderr", "err 2", 30),
        ("stderr", "err 3", 36),
        ("stdout", "out 3", 42),
    ]
    tail.close()


def test_streams_when_read_piece_by_piece(tmp_path: Path) -> None:
    path = tmp_path / "round.log"
    index = tmp_path / "round.log.idx"
    index.write_text("")
    tail = FileTail(str(path), index=str(index))
    seen: list[tuple[str, str]] = []
    for i in range(50):
        with path.open("ab") as f:
            f.write(f"stdout {i}\n".encode())
            start = f.tell()
            data = f"stderr {i}\n".encode()
            f.write(data)
        with index.open("a") as f:
            f.write(f"{start} {len(data)}\n")
        seen += [(line.stream, line.text) for line in tail.read(limit=7)]
    seen += [(line.stream, line.text) for line in tail.finish()]
    assert [t for s, t in seen if s == "stdout"] == [f"stdout {i}" for i in range(50)]
    assert [t for s, t in seen if s == "stderr"] == [f"stderr {i}" for i in range(50)]
    tail.close()


@pytest.mark.parametrize(
    ("pattern", "root"),
    [
        ("/p/logs/train.log", ("/p/logs", False)),
        ("/p/logs/*.log", ("/p/logs", False)),
        ("/p/logs/*/metrics.csv", ("/p/logs", True)),
        ("/p/logs/**/*.log", ("/p/logs", True)),
        ("/p/logs/**", ("/p/logs", True)),
        ("/*.log", ("/", False)),
    ],
)
def test_watch_roots(pattern: str, root: tuple[str, bool]) -> None:
    assert _watch_root(pattern) == root
