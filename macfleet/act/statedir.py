"""The inventory's shared state directory (paths.cluster_dir): created and checked before anything is written.

Shared by a group, never by the world: the directory is setgid (what is created in it takes its group, the one
the operators and the healer's user share) and group-writable, its files are group-readable and writable
(0660), and nothing is world-writable. A directory that is world-writable, or that belongs to another user
and is not shared with one of our groups, is refused (exit 2) before anything is read from it: its lock or
maintenance could have been written by anyone."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from macfleet.errors import UsageError

DIR_MODE = 0o2770  # setgid, rwx for owner and group, nothing for others
FILE_MODE = 0o660
SETUP = "sudo install -d -m 2770 -g GROUP {root}  (GROUP: the group the operators and the healer's user share)"


def ensure(path: Path) -> Path:
    """`path` (an inventory's cluster dir) and its parent exist and are safe; UsageError naming what is not."""
    root = path.parent
    for d in (root, path):
        try:
            _make(d, root)
            _check(d, root)
        except OSError as exc:  # a name too long, a loop of links, …: said, never a traceback
            raise UsageError(f"cannot use the cluster state directory {d}: {exc.strerror or exc}") from None
    return path


def verify(path: Path) -> Path:
    """As `ensure`, creating nothing: what exists of `path` and its parent must be safe (a preview reads only)."""
    root = path.parent
    for d in (root, path):
        try:
            if os.path.lexists(d):
                _check(d, root)
        except OSError as exc:
            raise UsageError(f"cannot use the cluster state directory {d}: {exc.strerror or exc}") from None
    return path


def _make(d: Path, root: Path) -> None:
    if d.is_dir():
        return
    try:
        d.mkdir(mode=0o700)
        os.chmod(d, DIR_MODE)  # past the umask; the group comes from a setgid parent
    except FileExistsError:
        return
    except OSError as exc:
        raise UsageError(f"cannot create the cluster state directory {d}: {exc.strerror or exc}",
                         hint=f"create it once as an administrator: {SETUP.format(root=root)}; or point "
                              "MACFLEET_CLUSTER_STATE_DIR (or cluster_state_dir in the config file) at "
                              "a directory you may write") from None


def _check(d: Path, root: Path) -> None:
    try:
        st = os.lstat(d)
    except OSError as exc:
        raise UsageError(f"cannot read the cluster state directory {d}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"the cluster state directory {d} is not a directory (a symlink or a file)",
                         hint=f"remove it; then: {SETUP.format(root=root)}")
    if st.st_mode & stat.S_IWOTH:
        raise UsageError(f"the cluster state directory {d} is world-writable (mode {stat.S_IMODE(st.st_mode):o}): "
                         "anyone could write its lock or its maintenance",
                         hint=f"chmod 2770 {d}  (and chgrp it to the operators' group)")
    ours = st.st_uid in (0, os.geteuid())
    shared = st.st_gid in {os.getegid(), *os.getgroups()} and st.st_mode & stat.S_IWGRP
    if not (ours or shared):
        raise UsageError(f"the cluster state directory {d} belongs to uid {st.st_uid} and is not shared with a "
                         f"group of yours (group {st.st_gid}, mode {stat.S_IMODE(st.st_mode):o})",
                         hint=f"add your user to its group, or: {SETUP.format(root=root)}")
    if not os.access(d, os.W_OK | os.X_OK):
        raise UsageError(f"you may not write the cluster state directory {d} (uid {st.st_uid}, group {st.st_gid}, "
                         f"mode {stat.S_IMODE(st.st_mode):o})",
                         hint="add your user to its group (then log in again), or run as the healer's user")


def open_shared(path: Path, flags: int) -> int:
    """os.open a file of the shared directory with mode 0660 (whatever the umask) when it creates it."""
    # never through a link: a group member could point one at a file the healer or root owns
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise UsageError(f"{path} in the cluster state directory is a symbolic link: not followed",
                         hint="remove it; macfleet writes the file itself") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{path} in the cluster state directory is not a regular file",
                             hint="remove it; macfleet writes it again")
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
    except (OSError, UsageError):
        os.close(fd)
        raise
    return fd


def replace_shared(path: Path, data: bytes) -> None:
    """Replace a file of the shared directory whole: written to a temporary beside it, synced, renamed over it
    (a reader sees the old file or the new one, never half of one). OSError as it comes; no temporary is left."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with os.fdopen(open_shared(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def append_shared(path: Path, data: bytes) -> None:
    """Append `data` (whole lines) to a file of the shared directory, on an O_APPEND descriptor (lines of two
    writers do not interleave). A write that fails part-way (a full disk) is taken back to where it began, so no
    half line is left, and its OSError raised."""
    fd = open_shared(path, os.O_WRONLY | os.O_APPEND)
    try:
        start = os.lseek(fd, 0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, start)
            raise
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive(guard: Path) -> Iterator[None]:
    """Hold an exclusive flock(2) on `guard`, a file of the shared directory (made safe first), for the block:
    one writer at a time across every user and process."""
    ensure(guard.parent)
    fd = open_shared(guard, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
