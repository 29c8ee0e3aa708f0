"""The cluster lock: expiry as a table, and the holder / stale / refuse rules on a real file."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
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


# ------------------------------------------------------------------------------------------------------
# A live holder is never stale; a dead one's repair is not thrown away (issue 25, items 8 and 9)
# ------------------------------------------------------------------------------------------------------

HOLDER = r"""
import sys, time
from pathlib import Path
from macfleet.act.lock import ClusterLock
lock = ClusterLock(Path(sys.argv[1]))
held = lock.acquire(sys.argv[2], "the holder", ttl_s=float(sys.argv[3]))
if len(sys.argv) > 4:
    lock.set_phase(held, {"action": "switch", "from": "1.0.71-a", "to": "1.0.73-b", "mesh": "mesh1",
                          "step": sys.argv[4]}, critical=True)
print("held", flush=True)
time.sleep(300)
"""


def _holder(path, owner: str = "rollout exo", ttl_s: float = 3600, step: str | None = None) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), owner, str(ttl_s), *([step] if step else [])],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


def _kill9(p: subprocess.Popen) -> None:
    p.kill()  # SIGKILL: no finally, no atexit
    p.wait()


def test_a_live_holder_past_its_ttl_keeps_the_lock(tmp_path) -> None:
    """hostile.md row 7: a build running longer than the TTL (its lock's `created` moved back 61 min, standing
    in for the time) lost its lock to a second `rollout exo`, which deleted the live build."""
    path = tmp_path / "c.lock.json"
    holder = _holder(path)
    try:
        data = json.loads(path.read_text())
        data["created"] = (datetime.now(UTC) - timedelta(minutes=61)).isoformat()
        path.write_text(json.dumps(data))
        with pytest.raises(LockHeld) as info:
            ClusterLock(path).acquire("rollout exo", "a second one")
        assert f"pid {holder.pid}" in info.value.message
        assert json.loads(path.read_text())["pid"] == holder.pid
    finally:
        _kill9(holder)
    held = ClusterLock(path).acquire("rollout exo", "after the holder died")
    assert f"pid {holder.pid}" in (held.explain() or "")
    ClusterLock(path).release(held)


def test_a_reused_pid_is_not_the_holder(tmp_path) -> None:
    from macfleet.act.lock import process_started

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        now = datetime.now(UTC)
        rec = _record(pid=other.pid, host="ctl", created=now.isoformat(), started=process_started(other.pid))
        assert rec.started and stale_reason(rec, now, this_host="ctl") is None
        reused = _record(pid=other.pid, host="ctl", created=now.isoformat(), started="linux:an-earlier-boot:12")
        assert "another process" in stale_reason(reused, now, this_host="ctl")
    finally:
        other.kill()
        other.wait()


def test_another_controllers_lock_lives_by_its_heartbeat(tmp_path) -> None:
    old = T0 - timedelta(hours=3)
    beat = _record(host="other", created=old.isoformat(), refreshed=(T0 - timedelta(seconds=30)).isoformat())
    assert stale_reason(beat, T0, this_host="ctl") is None
    silent = _record(host="other", created=old.isoformat(), refreshed=(T0 - timedelta(seconds=601)).isoformat())
    assert "stopped refreshing" in stale_reason(silent, T0, this_host="ctl")


def test_the_holder_refreshes_the_lock_while_it_works(tmp_path) -> None:
    from macfleet.act.lock import LockRecord as Rec

    path = tmp_path / "c.lock.json"
    lock = ClusterLock(path)
    held = lock.acquire("rollout model", "a long push", ttl_s=0.4)  # a beat every 0.1 s
    try:
        first = Rec.from_json(path.read_text()).refreshed_at
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while Rec.from_json(path.read_text()).refreshed_at <= first + timedelta(seconds=0.5):
            assert datetime.now(UTC) < deadline, "no heartbeat"
            time.sleep(0.05)
        now = datetime.now(UTC)
        rec = Rec.from_json(path.read_text())
        assert now - rec.created_at > timedelta(seconds=0.4)  # past its TTL since taken…
        assert stale_reason(rec, now, this_host="elsewhere") is None  # …but refreshed: live from anywhere
    finally:
        lock.release(held)
    assert not path.exists() and not held.heartbeat.thread.is_alive()


@pytest.mark.parametrize("owner", ["rollout model", "reboot", "rollout llama-rpc", "watch"])
def test_a_killed_switch_is_taken_only_by_its_repair(tmp_path, owner) -> None:
    """hostile.md row 8: kill -9 of `rollout exo` at its health step; every other lock-taker must refuse,
    naming the repair, and leave the record for it."""
    path = tmp_path / "c.lock.json"
    _kill9(_holder(path, step="health"))
    left = path.read_text()
    with pytest.raises(LockHeld) as info:
        ClusterLock(path).acquire(owner, "something else")
    msg = info.value.message
    assert "died" in msg and "1.0.73-b" in msg and "macfleet rollout exo" in msg and "Only its repair" in msg
    assert path.read_text() == left  # the record is kept for the repair
    with pytest.raises(LockHeld):
        ClusterLock(path).check(owner)
    held = ClusterLock(path).acquire("rollout exo", "the repair")
    assert held.taken_over is not None and held.taken_over.phase["step"] == "health" and not held.forced
    ClusterLock(path).release(held)


def test_force_takes_a_killed_switch_naming_what_is_lost(tmp_path) -> None:
    path = tmp_path / "c.lock.json"
    _kill9(_holder(path, step="flip"))
    with pytest.raises(LockHeld) as info:
        ClusterLock(path).acquire("rollout model", "push", force=False)
    assert "--force" in (info.value.hint or "")
    held = ClusterLock(path).acquire("rollout model", "push", force=True)
    said = held.explain() or ""
    assert held.forced and "FORCED" in said and "switching mesh1 from exo release 1.0.71-a to 1.0.73-b" in said
    ClusterLock(path).release(held)


def test_an_error_in_a_critical_phase_of_a_living_process_leaves_the_lock_stale(tmp_path) -> None:
    """A healer lives on after its error: the lock it leaves for repair must not stay live by its pid."""
    path = tmp_path / "c.lock.json"
    lock = ClusterLock(path)
    with pytest.raises(RuntimeError), lock.hold("reboot", "x") as held:
        lock.set_phase(held, {"phase": "waiting for nodes", "mesh": "mesh1"}, critical=True)
        raise RuntimeError("boom")
    rec = lock.read()
    assert rec is not None and rec.left and rec.repair_by == ["reboot"]
    assert "left it after an error" in stale_reason(rec, datetime.now(UTC), this_host=socket.gethostname())
    with pytest.raises(LockHeld, match="Only its repair"):
        lock.acquire("rollout model", "y")
    lock.release(lock.acquire("reboot", "the resume"))


def test_a_repairer_that_fails_before_its_first_step_leaves_the_repair_pending(tmp_path) -> None:
    path = tmp_path / "c.lock.json"
    _kill9(_holder(path, step="start"))
    lock = ClusterLock(path)
    with pytest.raises(OSError), lock.hold("rollout exo", "the repair"):
        raise OSError("a node unreachable before the repair began")
    rec = lock.read()
    assert rec is not None and rec.phase["step"] == "start" and rec.repair_by == ["rollout exo"]
    with pytest.raises(LockHeld, match="Only its repair"):
        lock.acquire("rollout model", "push")
    held = lock.acquire("rollout exo", "the repair again")
    assert held.taken_over is not None and held.taken_over.phase["step"] == "start"
    lock.set_phase(held, {"action": "repaired"})
    lock.release(held)
    assert not path.exists()


def test_a_lock_at_its_old_per_user_place_is_never_read_as_no_lock(tmp_path, monkeypatch) -> None:
    """Issue 28 moved the lock to the shared cluster state: one left at the old place (a switch that died before
    the upgrade) is named with its move, not forgotten."""
    from macfleet.act.lock import lock_path
    from macfleet.paths import inventory_tag, legacy_lock_file

    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = tmp_path / "inv"
    inv.mkdir()
    old = legacy_lock_file(inventory_tag(inv))
    old.parent.mkdir(parents=True)
    old.write_text("{}")
    lock = ClusterLock(lock_path(inv))
    with pytest.raises(LockHeld, match="still at its old place") as got:
        lock.check("reboot")
    assert f"mv {old} {lock.path}" in got.value.hint
    old.unlink()
    assert lock.read() is None


def test_a_link_in_the_shared_directory_is_not_followed(tmp_path, monkeypatch) -> None:
    """hostile: a group member's symlink in the shared directory made `maintenance start` append to, and chmod
    660, a file the healer (or root) owns."""
    import pytest

    from macfleet.act.statedir import ensure, open_shared
    from macfleet.errors import UsageError

    shared = ensure(tmp_path / "cluster" / "inv")
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    victim.chmod(0o600)
    (shared / "audit.jsonl").symlink_to(victim)
    with pytest.raises(UsageError, match="symbolic link"):
        open_shared(shared / "audit.jsonl", os.O_WRONLY | os.O_APPEND)
    assert victim.read_text() == "mine\n" and (victim.stat().st_mode & 0o777) == 0o600


def test_a_relative_or_control_character_state_dir_is_refused(monkeypatch) -> None:
    import pytest

    from macfleet.errors import UsageError
    from macfleet.paths import cluster_state_root

    for bad in ("state/here", "/var/lib/mac\nfleet"):
        monkeypatch.setenv("MACFLEET_CLUSTER_STATE_DIR", bad)
        with pytest.raises(UsageError, match="expected an absolute path"):
            cluster_state_root()
