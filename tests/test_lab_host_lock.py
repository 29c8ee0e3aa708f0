"""`lab up` and `lab down` take a host-wide lock while a lab takes or gives back what labs share (its subnet's
index, the admin user): two ups at once (two checkouts, a test run's workers) took one index. No root needed."""

from __future__ import annotations

import threading
import time

from macfleet.lab import control


def test_the_host_lock_lets_one_lab_in_at_a_time_and_lives_beside_the_state_root(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(control, "STATE_ROOT", tmp_path / "state")
    inside: list[int] = []
    overlaps: list[int] = []

    def take(i: int) -> None:
        with control._host_lock():
            if inside:
                overlaps.append(i)
            inside.append(i)
            time.sleep(0.05)
            inside.remove(i)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert overlaps == []
    # beside the state root: the last lab's `down` removes the state root, never the lock
    assert (tmp_path / ".state.lock").exists() and not (tmp_path / "state").exists()
