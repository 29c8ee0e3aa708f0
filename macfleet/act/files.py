"""Files macfleet writes on the controller for the operator (an exported hostfile, a saved baseline): whole or
not at all, and only where a plain file is (or may be)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from macfleet.errors import UsageError


def check_plain_file_path(path: Path) -> None:
    """UsageError unless `path` is a plain file or does not exist yet, in a directory that exists. A symlink is
    refused too: the write would land wherever it points."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UsageError(f"cannot use {path}: {exc.strerror or exc}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "a directory" if stat.S_ISDIR(st.st_mode) else \
            "not a plain file"
        raise UsageError(f"{path} is {kind}", hint="give the path of a plain file (it is replaced whole)")
    if not path.parent.is_dir():
        raise UsageError(f"{path.parent} is not a directory", hint="create it first, or give another path")


def write_text_atomic(path: Path, content: str) -> None:
    """Write `content` to a temporary file beside `path`, then rename it over `path` (atomic within one
    filesystem): a reader sees the old file or the new one, never half of one."""
    check_plain_file_path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
