"""Files macfleet writes on the controller for the operator (an exported hostfile, a saved baseline): whole or
not at all, and only where a plain file is (or may be)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from macfleet.errors import UsageError

MAX_STORED_BYTES = 1 << 20  # a baseline or a result file macfleet wrote is far smaller
Stored = TypeVar("Stored", bound=BaseModel)


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


def read_stored(path: Path, model: type[Stored], what: str, hint: str) -> Stored | None:
    """A file macfleet wrote beside the inventory (a baseline, a latest run), read back as `model`; None when
    there is none; UsageError naming the file (and `hint`: how to start over) when it is not one of ours."""
    try:
        check_plain_file_path(path)
        with path.open("rb") as fh:
            data = fh.read(MAX_STORED_BYTES + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_STORED_BYTES:
        raise UsageError(f"{path} is larger than {MAX_STORED_BYTES} bytes: not {what} macfleet wrote")
    try:
        return model.model_validate_json(data)
    except ValidationError as exc:
        raise UsageError(f"{path} is not {what} macfleet wrote: {str(exc).splitlines()[0][:160]}",
                         hint=hint) from None
