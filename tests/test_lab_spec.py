"""The lab's plan is pure data: sizes it refuses, and the 7-Mac mesh that needs the non-RDMA port."""

from __future__ import annotations

import pytest

from macfleet.errors import UsageError
from macfleet.lab import spec


def _plan(nodes: int, **kw) -> dict:
    return spec.plan("t", index=0, nodes=nodes, pods=None, model="mac-studio-m3-ultra", fresh=False,
                     tb_rate="1gbit", mgmt_rate="125mbit", boot_seconds=1, inventory_dir="/tmp/x", exo=False, **kw)


def test_seven_mac_studios_need_all_ports() -> None:
    with pytest.raises(UsageError, match="cannot be a full mesh"):
        _plan(7)
    lab = _plan(7, all_ports=True)
    assert len(lab["cables"]) == 21
    per_node: dict[str, set[int]] = {}
    for c in lab["cables"]:
        for end in (c["a"], c["b"]):
            per_node.setdefault(end["node"], set()).add(end["receptacle"])
    assert all(ports == {1, 2, 3, 4, 5, 6} for ports in per_node.values())


def test_six_mac_studios_use_only_rdma_ports() -> None:
    lab = _plan(6)
    assert all(end["receptacle"] != 1 for c in lab["cables"] for end in (c["a"], c["b"]))


def test_a_dense_lab_asks_its_macs_for_fewer_commands_at_once() -> None:
    """A Mac runs a pass 8 commands at a time; 32 simulated Macs on 2 cores run theirs two at a time (one lane
    may be held by a hung ibv_devinfo)."""
    from macfleet.lab import control

    assert [control.probe_lanes(n, cores=2) for n in (2, 4, 8, 16, 32)] == [8, 8, 4, 2, 2]
