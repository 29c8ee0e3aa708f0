"""The shared directory's two ways of writing (act/statedir.py), which the lock, the maintenance file, the
healer's state, the history and the audit log all use: a file replaced whole (the old one or the new one, never
half, no temporary left when a write fails), and whole lines appended (never half of one); each file 0660, never
through a link."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from macfleet.act import statedir
from macfleet.errors import UsageError


def test_a_replaced_file_is_whole_and_shared_by_the_group(tmp_path: Path) -> None:
    path = tmp_path / "lock.json"
    statedir.replace_shared(path, b'{"owner": "rollout"}\n')
    statedir.replace_shared(path, b'{"owner": "watch"}\n')
    assert path.read_bytes() == b'{"owner": "watch"}\n' and stat.S_IMODE(path.stat().st_mode) == statedir.FILE_MODE
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lock.json"]


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "maintenance.json"
    statedir.replace_shared(path, b"old\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(statedir.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        statedir.replace_shared(path, b"new\n")
    assert path.read_bytes() == b"old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["maintenance.json"]


def test_lines_are_appended_and_a_link_is_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    statedir.append_shared(path, b"one\n")
    statedir.append_shared(path, b"two\n")
    assert path.read_bytes() == b"one\ntwo\n" and stat.S_IMODE(path.stat().st_mode) == statedir.FILE_MODE
    target = tmp_path / "elsewhere"
    target.write_bytes(b"")
    (tmp_path / "audit.jsonl").symlink_to(target)
    with pytest.raises(UsageError, match="symbolic link"):
        statedir.append_shared(tmp_path / "audit.jsonl", b"x\n")
    assert target.read_bytes() == b""


def test_an_append_that_fails_part_way_leaves_no_half_line(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "audit.jsonl"
    statedir.append_shared(path, b'{"n": 1}\n')
    real = os.write

    def full(fd: int, data) -> int:  # a part goes in before the disk fills
        real(fd, bytes(data[:3]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(statedir.os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        statedir.append_shared(path, b'{"n": 2}\n')
    monkeypatch.undo()
    assert path.read_bytes() == b'{"n": 1}\n'
