"""A node's commands in one shell: the script under the shells a Mac may have as /bin/sh, and the frames cut
out of its output however the bytes arrive."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

import pytest

from macfleet.collect.batch import Frame, FrameReader, batch_script, new_mark
from macfleet.collect.commands import CommandSpec

SPECS = [
    CommandSpec("bytes", ("printf", "a\\tb\\n\\313\\207x")),  # no final newline, a non-ASCII byte pair
    CommandSpec("fails", ("sh", "-c", "echo oops >&2; exit 3")),
    CommandSpec("quiet", ("true",)),
    CommandSpec("newlines", ("printf", "\\n\\n")),
    *(CommandSpec(f"n{i}", ("sh", "-c", f"sleep 0.0{i}; echo {i}")) for i in range(10)),
]
# macOS's /bin/sh is bash 3.2 in POSIX mode; dash is what some Linux and a reconfigured Mac have
SHELLS = [s for s in (["bash", "--posix"], ["dash"], ["sh"]) if shutil.which(s[0])]


def _frames(data: bytes, mark: str, count: int, step: int) -> tuple[list[Frame], bytes]:
    reader = FrameReader(mark, count)
    frames = []
    for i in range(0, len(data), step):
        frames += reader.feed(data[i:i + step])
    return frames, bytes(reader.junk)


@pytest.mark.parametrize("shell", SHELLS, ids=lambda s: s[0])
def test_every_command_is_started_then_framed_once_whatever_the_split(shell: list[str]) -> None:
    mark = new_mark()
    run = subprocess.run([*shell, "-c", batch_script(SPECS, mark, lanes=3)], capture_output=True, timeout=60)
    assert (run.returncode, run.stderr) == (0, b"")
    for step in (1, 7, 4096):
        frames, junk = _frames(run.stdout, mark, len(SPECS), step)
        assert junk == b""
        starts = [f.index for f in frames if f.rc is None]
        ends = {f.index: f for f in frames if f.rc is not None}
        assert sorted(starts) == sorted(ends) == list(range(len(SPECS)))
        assert ends[0].stdout == "a\tb\nˇx".encode()
        assert (ends[1].rc, ends[1].stdout, ends[1].stderr) == (3, b"", b"oops\n")
        assert (ends[2].rc, ends[2].stdout, ends[2].stderr) == (0, b"", b"")
        assert ends[3].stdout == b"\n\n"
        assert all(ends[4 + i].stdout == f"{i}\n".encode() for i in range(10))


def test_a_frame_for_a_command_not_asked_for_is_set_aside() -> None:
    mark = "MK"
    data = b"noise\nMK 5 0\nx\nMK\n\nMK\nMK 0 -\nMK 0 0\nok\nMK\n\nMK\n"
    frames, junk = _frames(data, mark, 1, 3)
    assert frames == [Frame(0, None), Frame(0, 0, b"ok", b"")]
    assert b"noise" in junk and b"unknown command 5" in junk


def test_the_script_quotes_every_word_and_makes_no_file_outside_its_own_directory() -> None:
    script = batch_script([CommandSpec("x", ("echo", "$(reboot)", "a'b"))], "MK")
    assert "echo '$(reboot)' 'a'\"'\"'b'" in script
    assert script.count("mktemp") == 1 and 'rm -rf "$d"' in script


class _LateChannel:
    """A channel whose last output and exit status both come in just after the reader found nothing to read:
    the order a busy controller sees when paramiko's thread delivers them between two of its checks."""

    def __init__(self, data: bytes):
        self._data, self._checks, self.status_event = data, 0, threading.Event()
        self.closed = False

    def recv_ready(self) -> bool:
        self._checks += 1
        return self._checks > 2 and bool(self._data)  # not yet in for the reader's first two looks

    def recv(self, n: int) -> bytes:
        out, self._data = self._data[:n], self._data[n:]
        return out

    def recv_stderr_ready(self) -> bool:
        return False

    def exit_status_ready(self) -> bool:
        return self._checks >= 2

    def recv_exit_status(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


def test_output_that_comes_with_the_exit_status_is_still_read(monkeypatch) -> None:
    from macfleet.collect import ssh

    spec = CommandSpec("sw-vers", ("sw_vers",))
    mark = "MACFLEET-0123456789abcdef0123456789abcdef"
    data = f"{mark} 0 -\n{mark} 0 0\nProductVersion: 26.2\n\n{mark}\n\n{mark}\n".encode()
    session = ssh.SshSession.__new__(ssh.SshSession)
    monkeypatch.setattr(ssh, "new_mark", lambda: mark)
    monkeypatch.setattr(session, "_start", lambda *a, **k: _LateChannel(data), raising=False)
    outputs, failed = session.run_batch((spec,), deadline=time.monotonic() + 5)
    assert failed == {} and outputs["sw-vers"].stdout == "ProductVersion: 26.2\n"
