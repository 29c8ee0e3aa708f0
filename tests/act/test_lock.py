"""The cluster lock: expiry as a table, and the holder / stale / refuse rules on a real file."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from macfleet.act.lock import ClusterLock, LockRecord, expired, stale_reason
from macfleet.errors import LockHeld

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("age_s", "ttl_s", "want"),
    [
        (0, 60, False),
        (59, 60, False),
        (60, 60, False),  # exactly at the TTL: still held
        (61, 60, True),
        (3600 * 24, 3600, True),
        (10**7, 0, False),  # no TTL: never expires by time
        (10**7, -1, False),
        (-30, 60, False),  # clock skew: created in the future
    ],
)
def test_expired(age_s: int, ttl_s: float, want: bool) -> None:
    assert expired(T0, ttl_s, T0 + timedelta(seconds=age_s)) is want


def _record(**kw) -> LockRecord:
    base = dict(owner="rollout exo", pid=4242, host="ctl", created=T0.isoformat(), ttl_s=600, reason="r")
    return LockRecord(**{**base, **kw})


def test_stale_reason_names_dead_pid_and_expiry() -> None:
    now = T0 + timedelta(seconds=10)
    assert stale_reason(_record(), now, this_host="ctl", pid_alive=lambda p: True) is None
    assert "pid 4242 on ctl" in stale_reason(_record(), now, this_host="ctl", pid_alive=lambda p: False)
    # another controller's pid cannot be checked from here: only its TTL counts
    assert stale_reason(_record(host="other"), now, this_host="ctl", pid_alive=lambda p: False) is None
    late = T0 + timedelta(seconds=601)
    assert "expired" in stale_reason(_record(host="other"), late, this_host="ctl", pid_alive=lambda p: True)


def test_live_lock_refuses_naming_holder(tmp_path) -> None:
    lock = ClusterLock(tmp_path / "c.lock.json")
    held = lock.acquire("reboot", "rdma wedged")
    with pytest.raises(LockHeld) as info:
        ClusterLock(tmp_path / "c.lock.json").acquire("rollout exo", "1.0.72")
    msg = info.value.message
    assert "reboot" in msg and f"pid {os.getpid()}" in msg and "rdma wedged" in msg
    lock.release(held)
    assert not (tmp_path / "c.lock.json").exists()


def test_dead_holder_is_explained_and_taken_over_with_its_phase(tmp_path) -> None:
    path = tmp_path / "c.lock.json"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    rec = _record(pid=dead.pid, host=socket.gethostname(), created=datetime.now(UTC).isoformat(),
                  phase={"step": "switch", "from": "a", "to": "b"})
    path.write_text(json.dumps(rec.__dict__))
    held = ClusterLock(path).acquire("rollout exo", "again")
    assert held.taken_over is not None and held.taken_over.phase["to"] == "b"
    assert f"pid {dead.pid}" in held.explain()
    assert json.loads(path.read_text())["pid"] == os.getpid()


def test_phase_is_recorded_and_garbage_refused(tmp_path) -> None:
    path = tmp_path / "c.lock.json"
    lock = ClusterLock(path)
    with lock.hold("rollout exo", "x") as held:
        lock.set_phase(held, {"step": "stop"})
        assert json.loads(path.read_text())["phase"] == {"step": "stop"}
    assert not path.exists()
    path.write_text("not json")
    with pytest.raises(LockHeld, match="not a readable cluster lock"):
        lock.acquire("reboot", "y")


def test_error_in_a_critical_phase_leaves_the_lock_for_repair(tmp_path) -> None:
    path = tmp_path / "c.lock.json"
    lock = ClusterLock(path)
    with pytest.raises(RuntimeError), lock.hold("rollout exo", "x") as held:
        lock.set_phase(held, {"action": "switch", "step": "flip", "from": "a", "to": "b"}, critical=True)
        raise RuntimeError("node unreachable mid-flip")
    assert json.loads(path.read_text())["phase"]["step"] == "flip"  # the next holder repairs from this
    path.unlink()
    with pytest.raises(RuntimeError), lock.hold("rollout exo", "x") as held:
        lock.set_phase(held, {"action": "prune"})
        raise RuntimeError("not critical")
    assert not path.exists()
