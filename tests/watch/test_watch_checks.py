"""The healer probes what its policy's checks read: every check doctor has can be watched (issue 26: a policy naming
disk, clock-skew, tb-ping, updates, exo-api-exposure or llama-rpc read "unknown" on every tick, since the healer
ran its own list of commands, not the checks')."""

from __future__ import annotations

import pytest

from macfleet.collect.gather import Gathered
from macfleet.inventory.load import load_inventory
from macfleet.inventory.model import RemediationSettings
from macfleet.judge.health import CHECK_CODES
from macfleet.watch import loop
from tests.conftest import EXAMPLE_INVENTORY


class Asked:
    """Sessions that answer nothing (every node unreachable) and note which commands each node was asked."""

    def __init__(self, nodes: list[str]):
        self.nodes = nodes
        self.keys: dict[str, set[str]] = {}

    def gather(self, specs, deadline_s, cap_s=None, nodes=None, per_node=None) -> Gathered:
        for n in nodes or self.nodes:
            self.keys[n] = {s.key for s in (*specs, *(per_node(n) if per_node else ()))}
        return Gathered(unreachable={n: "not dialled" for n in nodes or self.nodes})

    def probe(self, specs, deadline_s, command_timeout_s) -> Gathered:
        return self.gather(specs, deadline_s)

    def close(self) -> None:
        pass


def probed(code: str, monkeypatch, tmp_path) -> dict[str, set[str]]:
    """The commands one healer probe asks each node of the example mesh, its policy watching `code` alone."""
    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path))
    fleet = load_inventory(EXAMPLE_INVENTORY)
    mesh = fleet.meshes[0]
    llama = mesh.settings.llama.model_copy(update={"enabled": True})
    settings = mesh.settings.model_copy(update={"remediation": RemediationSettings(checks=[code], ladder={}),
                                                "llama": llama})
    mesh = mesh.model_copy(update={"settings": settings})
    fleet = fleet.model_copy(update={"meshes": (mesh,)})
    watcher = loop.Watcher(fleet, [mesh], interval_s=1, say=lambda line: None)
    try:
        asked = Asked(list(mesh.node_names))
        watcher.probers[mesh.name] = asked
        watcher.probe(mesh, loop.datetime.now(loop.UTC))
        return asked.keys
    finally:
        watcher.close()


@pytest.mark.parametrize(("code", "command"), [
    ("disk", "df"), ("clock-skew", "date"), ("tb-ping", "tb-ping:"), ("updates", "softwareupdate"),
    ("exo-api-exposure", "pf-info"), ("llama-rpc", "netstat-listen"),
])
def test_the_checks_the_healer_read_as_unknown_are_probed(code: str, command: str, monkeypatch, tmp_path) -> None:
    keys = probed(code, monkeypatch, tmp_path)
    assert keys and all(any(k.startswith(command) for k in mine) for mine in keys.values()), keys


@pytest.mark.parametrize("code", CHECK_CODES)
def test_every_check_the_policy_accepts_has_its_probes_asked(code: str, monkeypatch, tmp_path) -> None:
    from macfleet.judge.checks.base import Scope
    from macfleet.judge.checks.catalogue import BY_CODE, PROBES

    keys = probed(code, monkeypatch, tmp_path)
    fleet = load_inventory(EXAMPLE_INVENTORY)
    mesh = fleet.meshes[0]
    for node in mesh.node_names:
        scope = Scope(fleet=fleet, mesh=mesh, node=node)
        wanted = {s.key for k in BY_CODE[code].reads for s in PROBES[k].command(scope)}
        wanted -= {"netstat-listen"}  # asked where llama-rpc is enabled: the test enables it (above)
        assert wanted <= keys[node], (node, wanted - keys[node])
