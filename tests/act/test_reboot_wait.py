"""What `macfleet reboot` says of a node that did not come back in time, from its last look."""

from __future__ import annotations

import pytest

from macfleet.act.reboot import AT_UNLOCK, SHUTTING_DOWN, SILENT, STACK_ONLY, UNLOCK_SCREEN, NodeWait, _state_of


@pytest.mark.parametrize(("look", "seen", "state"), [
    (False, "still up: has not gone down yet", SHUTTING_DOWN),
    (UNLOCK_SCREEN, "at its FileVault unlock screen (its unlock-screen key)", AT_UNLOCK),
    (False, "down: Connection refused", STACK_ONLY),
    (False, "down: timed out", SILENT),
    (False, "down: No route to host", SILENT),
])
def test_each_last_look_has_its_state(look, seen, state) -> None:
    assert _state_of(look, seen) == state


def test_every_node_not_back_gets_the_power_cycle_step_by_name_but_the_one_at_its_unlock_screen() -> None:
    stalled = NodeWait(state=SHUTTING_DOWN).verdict("studio-2")
    assert stalled.startswith("studio-2 is still shutting down") and "power-cycle studio-2: hold" in stalled
    hung = NodeWait(state=SILENT, went_down=True).verdict("studio-3")
    assert "studio-3 went down and answers nothing" in hung and "power-cycle studio-3" in hung
    locked = NodeWait(state=AT_UNLOCK).verdict("studio-4")
    assert "macfleet unlock studio-4" in locked and "power-cycle" not in locked
