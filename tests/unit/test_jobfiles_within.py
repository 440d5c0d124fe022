"""trainee.jobfiles: where a job's file really is decides whether the daemon reads it.

Real files, FIFOs, devices and symlinks under tmp_path; every refusal comes at once (no
open blocks) and says why. ``within`` names the job's folders; a folder on the way that
is a link leads nowhere else, and trainee's own files are never read as a job's.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from trainee.jobfiles import NotRegularFile, open_job_file, private_roots, read_bounded


@pytest.fixture
def area(tmp_path: Path) -> Path:
    """A job's area (``within``) with a metrics file, and a host folder outside it."""
    (tmp_path / "job" / "outputs").mkdir(parents=True)
    (tmp_path / "job" / "outputs" / "metrics.jsonl").write_text('{"loss": 1}\n')
    (tmp_path / "host").mkdir()
    (tmp_path / "host" / "secret.txt").write_text("sk-host-secret\n")
    return tmp_path


def read(path: Path, area: Path) -> bytes:
    data, more = read_bounded(path, 1 << 20, within=[area / "job"])
    assert not more
    return data


def test_a_regular_file_inside_is_read_through_links_that_stay_inside(area: Path) -> None:
    job = area / "job"
    (job / "latest").symlink_to("outputs")  # wandb's latest-run is such a link
    assert read(job / "outputs" / "metrics.jsonl", area) == b'{"loss": 1}\n'
    assert read(job / "latest" / "metrics.jsonl", area) == b'{"loss": 1}\n'


def test_a_fifo_or_a_device_is_refused_at_once(area: Path) -> None:
    fifo = area / "job" / "outputs" / "summary.json"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile, match="a FIFO, not a regular file"):
        read(fifo, area)
    with pytest.raises(NotRegularFile, match="a device"):
        read_bounded("/dev/zero", 10)


@pytest.mark.parametrize("how", ["file", "folder", "dotdot"])
def test_a_job_file_that_leads_out_of_its_area_is_refused(area: Path, how: str) -> None:
    job = area / "job"
    if how == "file":  # the link itself: never followed
        (job / "m.jsonl").symlink_to(area / "host" / "secret.txt")
        path, reason = job / "m.jsonl", "a symlink: not followed"
    elif how == "folder":  # a folder on the way: where it leads decides
        (job / "out").symlink_to(area / "host")
        path, reason = job / "out" / "secret.txt", "leads outside"
    else:
        (job / "up").symlink_to("../host")
        path, reason = job / "up" / "secret.txt", "leads outside"
    with pytest.raises(NotRegularFile, match=reason):
        read(path, area)


def test_trainees_private_files_are_refused_wherever_they_are_reached_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / ".trainee").mkdir(parents=True)
    (home / ".trainee" / "config.json").write_text('{"api_key": "sk-x"}')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("TRAINEE_SOCKET", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert home / ".trainee" / "config.json" in private_roots()
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "cfg").symlink_to(home / ".trainee")
    with pytest.raises(NotRegularFile, match="private"):
        read_bounded(tmp_path / "job" / "cfg" / "config.json", 100)  # even without within
    store = tmp_path / "p" / ".trainee" / "runtime.sqlite3-wal"
    store.parent.mkdir(parents=True)
    store.write_bytes(b"\x00" * 32)
    with pytest.raises(NotRegularFile, match="private"):
        read_bounded(store, 100)


def test_reads_are_bounded_and_the_fd_is_a_plain_regular_file(area: Path) -> None:
    big = area / "job" / "wandb-summary.json"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # sparse: a gigabyte of nothing, no disk used
    data, more = read_bounded(big, 1 << 20, within=[area / "job"])
    assert (len(data), more) == (1 << 20, True)
    fd = open_job_file(area / "job" / "outputs" / "metrics.jsonl", within=[area / "job"])
    try:
        assert os.get_blocking(fd) and os.read(fd, 100) == b'{"loss": 1}\n'
    finally:
        os.close(fd)


def test_missing_files_raise_file_not_found(area: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        read(area / "job" / "nope" / "x.json", area)
    assert info.value.errno == errno.ENOENT


def test_find_job_files_is_glob_without_descending_links(tmp_path: Path) -> None:
    import glob
    import time

    from trainee.jobfiles import find_job_files

    for rel in ("o/a.jsonl", "o/x/y/b.jsonl", "o/x/c.txt", "o/.hidden/h.jsonl"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}\n")
    for pattern in ("o/**/*.jsonl", "o/*/y/*.jsonl", "o/x/**/b.jsonl", "o/**/y", "o/*.jsonl"):
        full = str(tmp_path / pattern)
        assert sorted(find_job_files(full)) == sorted(glob.glob(full, recursive=True)), pattern
    # two links to "." make glob's ** search 2^depth paths; here they are not descended
    (tmp_path / "o" / "l1").symlink_to(".")
    (tmp_path / "o" / "l2").symlink_to(".")
    started = time.monotonic()
    found = find_job_files(str(tmp_path / "o" / "**" / "*.jsonl"))
    assert sorted(found) == [str(tmp_path / "o" / "a.jsonl"), str(tmp_path / "o/x/y/b.jsonl")]
    assert time.monotonic() - started < 5
