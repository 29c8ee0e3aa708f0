"""Pods and --fresh: two meshes of two Mac minis, out of the box."""

from __future__ import annotations

import pytest
import yaml

from macfleet.facts.registry import KINDS

pytestmark = pytest.mark.lab


def test_pods_fresh(make_lab):
    lab = make_lab("tpf", "--pods", "2x2", "--model", "mac-mini-m4-pro", "--fresh")
    st = lab.status()
    assert {n: (s["mesh"], s["state"]) for n, s in st.items()} == {
        "p1-mini-1": ("mesh1", "up"), "p1-mini-2": ("mesh1", "up"),
        "p2-mini-1": ("mesh2", "up"), "p2-mini-2": ("mesh2", "up"),
    }
    hosts = yaml.safe_load((lab.inventory / "hosts.yml").read_text())["macfleet"]["children"]
    assert {g: sorted(v["hosts"]) for g, v in hosts.items()} == {"mesh1": ["p1-mini-1", "p1-mini-2"],
                                                               "mesh2": ["p2-mini-1", "p2-mini-2"]}
    node = "p1-mini-1"
    assert KINDS["rdma-ctl"].parser(lab.ssh(node, "rdma_ctl status").stdout).enabled is False
    assert KINDS["ibv-devices"].parser(lab.ssh(node, "ibv_devices").stdout).devices == []
    ifc = KINDS["ifconfig"].parser(lab.ssh(node, "ifconfig").stdout)
    assert "bridge0" in {i.name for i in ifc.interfaces}
    assert "org.macfleet.exo" not in lab.ssh(node, "launchctl list").stdout
    assert KINDS["pmset"].parser(lab.ssh(node, "pmset -g").stdout).settings["sleep"] == "1"
    tb = KINDS["thunderbolt"].parser(lab.ssh(node, "system_profiler SPThunderboltDataType -json").stdout)
    connected = [p for p in tb.ports if p.connected]
    assert len(connected) == 1 and connected[0].speed_gbps == 80  # one cable to its only peer, other pod apart
    # RDMA off on the peer: its service 64087 is not advertised
    assert "64087" not in lab.ssh(node, "system_profiler SPThunderboltDataType").stdout
