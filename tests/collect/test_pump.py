"""Reading a command's output once its exit status has come (collect/ssh.py `_pump`): sshd may send the status
before the last of the output, and a busy node sends that tail late. The channel here is paramiko's side,
played on a clock of its own (no test waits): the output is read to sshd's EOF, a tail that keeps coming is not
cut, and a background child that holds stdout open ends the read after the grace, not at the deadline."""

from __future__ import annotations

import pytest

from macfleet.collect import ssh
from macfleet.collect.batch import CommandSpec

SPEC = CommandSpec("state", ("curl", "http://127.0.0.1:52415/state"))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_800_000_000.0 + self.now


class Channel:
    """Exited at once; `pieces` [(second, bytes)] come at those seconds of the clock; the EOF at `eof_at` (None:
    never, a background child holds stdout)."""

    def __init__(self, clock: Clock, pieces: list[tuple[float, bytes]], eof_at: float | None) -> None:
        self.clock, self.pieces, self.eof_at, self.closed = clock, list(pieces), eof_at, False
        self.status_event = self  # its wait() is the clock moving on

    def wait(self, seconds: float) -> None:
        self.clock.now += 0.25

    def recv_ready(self) -> bool:
        return bool(self.pieces) and self.pieces[0][0] <= self.clock.now

    def recv(self, n: int) -> bytes:
        return self.pieces.pop(0)[1]

    def recv_stderr_ready(self) -> bool:
        return False

    def exit_status_ready(self) -> bool:
        return True

    @property
    def eof_received(self) -> bool:
        return self.eof_at is not None and self.clock.now >= self.eof_at and not self.pieces


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(ssh, "time", c)
    return c


def pump(channel: Channel, **grace: float | None) -> tuple[bytes, float]:
    out = b"".join(ssh.SshSession._pump(channel, SPEC, 60.0, 60.0, None, bytearray(), **grace))
    return out, channel.clock.now


def test_a_tail_that_comes_after_the_grace_is_read_to_the_eof_when_asked(clock: Clock) -> None:
    late = ssh.EOF_GRACE_S * 3
    channel = Channel(clock, [(0, b'{"instances": {'), (late, b'}, "topology": {}}')], eof_at=late)
    assert pump(channel, eof_grace_s=None) == (b'{"instances": {}, "topology": {}}', late)


def test_a_tail_that_keeps_coming_is_not_cut_by_the_grace(clock: Clock) -> None:
    step = ssh.EOF_GRACE_S * 0.75
    pieces = [(i * step, f"line {i}\n".encode()) for i in range(8)]
    out, _ = pump(Channel(clock, pieces, eof_at=8 * step))
    assert out == b"".join(p for _, p in pieces)


def test_a_child_holding_stdout_ends_the_read_after_the_grace_not_at_the_deadline(clock: Clock) -> None:
    out, took = pump(Channel(clock, [(0, b"started\n")], eof_at=None))
    assert out == b"started\n" and ssh.EOF_GRACE_S < took < ssh.EOF_GRACE_S + 1


def test_the_deadline_still_holds_when_waiting_for_the_eof(clock: Clock) -> None:
    with pytest.raises(ssh.CommandTimeout):
        pump(Channel(clock, [(0, b"{")], eof_at=None), eof_grace_s=None)
