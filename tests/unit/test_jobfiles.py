"""Opening and reading files a job can write: nothing followed, nothing blocks, bounded."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainee.jobfiles import NotRegularFile, bounded_lines, open_job_file, read_bounded


def test_a_regular_file_opens_and_reads_bounded(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 1000)
    assert read_bounded(path, 2000) == (b"x" * 1000, False)
    assert read_bounded(path, 10) == (b"x" * 10, True)


def test_symlinks_fifos_devices_and_folders_are_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("secret")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    os.mkfifo(tmp_path / "fifo")
    for name in ("link", "fifo"):
        with pytest.raises(NotRegularFile):
            open_job_file(tmp_path / name)
    for path in ("/dev/zero", str(tmp_path)):
        with pytest.raises(OSError):
            open_job_file(path)
    with pytest.raises(FileNotFoundError):
        open_job_file(tmp_path / "missing")


def _lines(data: bytes, max_line: int, max_total: int | None = None, tmp: Path = Path()) -> list:
    path = tmp / "lines"
    path.write_bytes(data)
    fd = open_job_file(path)
    try:
        return list(bounded_lines(fd, max_line, max_total))
    finally:
        os.close(fd)


def test_bounded_lines_skip_long_lines_by_length(tmp_path: Path) -> None:
    data = b"a\n" + b"y" * 5000 + b"\nbb\n" + b"z" * 3000
    assert _lines(data, 100, tmp=tmp_path) == [b"a", 5000, b"bb", 3000]
    assert _lines(b"a\nb", 100, tmp=tmp_path) == [b"a", b"b"]
    assert _lines(b"one\ntwo\nthree\n", 100, 9, tmp=tmp_path) == [b"one", b"two"]
    big = b"q" * (3 << 20) + b"\nend\n"  # a line across several chunks
    assert _lines(big, 1 << 20, tmp=tmp_path) == [3 << 20, b"end"]
