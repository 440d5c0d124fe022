"""trainee.jobfiles: files the job could have written are opened without trusting them.

Real files, FIFOs, devices and symlinks under tmp_path; every refusal must come at once
(no open blocks) and say why.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from trainee.jobfiles import UnsafeFile, open_job_fd, private_roots, read_job_file


@pytest.fixture
def area(tmp_path: Path) -> Path:
    """A job's area (``within``) with a metrics file, and a host folder outside it."""
    (tmp_path / "job" / "outputs").mkdir(parents=True)
    (tmp_path / "job" / "outputs" / "metrics.jsonl").write_text('{"loss": 1}\n')
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret.txt").write_text("sk-host-secret\n")
    return tmp_path


def read(path: Path, area: Path) -> bytes:
    return read_job_file(path, within=[area / "job"])


def test_a_regular_file_inside_is_read(area: Path) -> None:
    assert read(area / "job" / "outputs" / "metrics.jsonl", area) == b'{"loss": 1}\n'


def test_a_fifo_is_refused_at_once_without_blocking(area: Path) -> None:
    fifo = area / "job" / "outputs" / "summary.json"
    os.mkfifo(fifo)
    with pytest.raises(UnsafeFile, match="is a FIFO, not a regular file"):
        read(fifo, area)


def test_a_device_or_a_folder_is_refused(area: Path) -> None:
    link = area / "job" / "dev.json"
    with pytest.raises(UnsafeFile, match="is a device"):
        read_job_file("/dev/zero")
    link.symlink_to("/dev/zero")
    with pytest.raises(UnsafeFile, match="outside"):
        read(link, area)
    with pytest.raises(UnsafeFile, match="is a folder, not a regular file"):
        read(area / "job" / "outputs", area)


def test_links_inside_the_area_are_followed(area: Path) -> None:
    job = area / "job"
    (job / "latest").symlink_to("outputs")  # wandb's latest-run is such a link
    (job / "abs.jsonl").symlink_to(job / "outputs" / "metrics.jsonl")
    assert read(job / "latest" / "metrics.jsonl", area) == b'{"loss": 1}\n'
    assert read(job / "abs.jsonl", area) == b'{"loss": 1}\n'


@pytest.mark.parametrize("how", ["file", "folder", "dotdot", "chain"])
def test_links_leading_out_of_the_area_are_refused(area: Path, how: str) -> None:
    job = area / "job"
    if how == "file":
        (job / "m.jsonl").symlink_to(area / "host" / "secret.txt")
        path = job / "m.jsonl"
    elif how == "folder":
        (job / "out").symlink_to(area / "host")
        path = job / "out" / "secret.txt"
    elif how == "dotdot":
        (job / "up").symlink_to("../host")
        path = job / "up" / "secret.txt"
    else:  # a link to a link inside, which leads out
        (job / "hop").symlink_to(area / "host" / "secret.txt")
        (job / "m.jsonl").symlink_to("hop")
        path = job / "m.jsonl"
    with pytest.raises(UnsafeFile, match="leads outside"):
        read(path, area)


def test_a_lexical_dotdot_out_of_the_area_is_refused(area: Path) -> None:
    with pytest.raises(UnsafeFile, match="outside"):
        read(area / "job" / ".." / "host" / "secret.txt", area)


def test_trainees_private_files_are_refused_even_without_an_area(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".trainee").mkdir(parents=True)
    (home / ".trainee" / "config.json").write_text('{"api_key": "sk-x"}')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("TRAINEE_SOCKET", raising=False)
    assert home / ".trainee" / "config.json" in private_roots()
    link = tmp_path / "metrics.jsonl"
    link.symlink_to(home / ".trainee" / "config.json")
    with pytest.raises(UnsafeFile, match="private"):
        read_job_file(link)
    store = tmp_path / "p" / ".trainee" / "runtime.sqlite3"
    store.parent.mkdir(parents=True)
    store.write_bytes(b"SQLite format 3\x00")
    (tmp_path / "db.jsonl").symlink_to(store)
    for path in (store, tmp_path / "db.jsonl"):
        with pytest.raises(UnsafeFile, match="private"):
            read_job_file(path)


def test_a_huge_file_is_refused_not_read(area: Path) -> None:
    big = area / "job" / "wandb-summary.json"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # sparse: a gigabyte of nothing, no disk used
    with pytest.raises(UnsafeFile) as info:
        read_job_file(big, 1 << 20, within=[area / "job"])
    assert info.value.errno == errno.EFBIG
    assert "larger than 1048576 bytes" in str(info.value)


def test_a_link_loop_ends_with_eloop(area: Path) -> None:
    job = area / "job"
    (job / "a").symlink_to("b")
    (job / "b").symlink_to("a")
    with pytest.raises(UnsafeFile) as info:
        read(job / "a", area)
    assert info.value.errno == errno.ELOOP


def test_the_fd_is_non_blocking_and_regular(area: Path) -> None:
    fd = open_job_fd(area / "job" / "outputs" / "metrics.jsonl", within=[area / "job"])
    try:
        assert not os.get_blocking(fd)
        assert os.read(fd, 100) == b'{"loss": 1}\n'
    finally:
        os.close(fd)


def test_missing_files_raise_file_not_found_naming_the_path(area: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        read(area / "job" / "nope" / "x.json", area)
    assert info.value.filename == str(area / "job" / "nope" / "x.json")
