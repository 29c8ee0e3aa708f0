"""Topology against the lab: real SSH, real Ansible, the real CLI as a subprocess (marker `lab`).

The cabling-fault matrix needs `macfleet lab fault` (a later lab feature): it skips, saying so, until the
lab offers it. Every wait is a poll with a deadline.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.lab(minutes=1.4)


def _json(p) -> dict:
    return json.loads(p.stdout)


def test_healthy_4_node_mesh_is_clean(lab4) -> None:
    p = lab4.macfleet("topology", "check", "-i", str(lab4.inventory), "--json", check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    data = _json(p)
    assert data["findings"] == []
    assert len(data["links"]) == 6
    assert all(lk["speed_gbps"] == 80 and lk["a"]["device"] and lk["b"]["device"] for lk in data["links"])


# fault, its arguments, the finding code expected, and how its fix must start
FAULTS = [
    ("unplug", ["studio-1", "studio-2"], "missing-pair", "plug a Thunderbolt 5 cable from studio-1 port "),
    ("slow-cable", ["studio-1", "studio-2"], "slow-link", "replace the cable between studio-1 port "),
    ("wrong-port", ["studio-1", "studio-2"], "wrong-port", "move the "),
    ("double-cable", ["studio-1", "studio-2"], "doubled-pair", "unplug the cable between studio-1 port "),
    ("via-hub", ["studio-1", "studio-2"], "hub-in-path", "take out "),
    ("unknown-mac", ["studio-1"], "unknown-mac", "unplug the cable from studio-1 port "),
]


@pytest.mark.parametrize(("fault", "args", "code", "fix"), FAULTS, ids=[f[0] for f in FAULTS])
def test_cabling_fault_gives_the_right_finding_and_fix(lab4, fault, args, code, fix) -> None:
    lab4.macfleet("lab", "fault", "--name", lab4.name, fault, *args)
    try:
        p = lab4.macfleet("topology", "check", "-i", str(lab4.inventory), "--json", check=False)
        assert p.returncode == 1, p.stdout + p.stderr
        findings = _json(p)["findings"]
        hit = [f for f in findings if f["code"] == code]
        assert hit, findings
        assert hit[0]["fix"].startswith(fix), hit[0]
        assert set(args) <= set(hit[0]["nodes"]) or code == "unknown-mac"
        if code == "wrong-port":
            assert "cannot do RDMA" in hit[0]["message"] and "port 1" in hit[0]["message"]
    finally:
        lab4.macfleet("lab", "fault", "--name", lab4.name, fault, *args, "--clear")
    lab4.wait(lambda: lab4.macfleet("topology", "check", "-i", str(lab4.inventory), "--json",
                                    check=False).returncode == 0, 30, "the mesh healthy again")


def _links(lab) -> list[dict]:
    return _json(lab.macfleet("topology", "ipplan", "-i", str(lab.inventory), "--json"))["links"]


def _route_iface(lab, node: str, address: str) -> str | None:
    """The interface macOS sends to `address` on, from `route -n get` (`interface: enX`)."""
    out = lab.ssh(node, f"route -n get {address}").stdout
    for line in out.splitlines():
        key, _, value = line.strip().partition(": ")
        if key == "interface":
            return value.strip()
    return None


def _tree(root) -> dict[str, tuple[int, bytes]]:
    """Every file under `root` with its mode and content: what "nothing changed on disk" compares."""
    return {str(p.relative_to(root)): (p.stat().st_mode, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


def _apply(lab, *extra: str) -> dict:
    p = lab.macfleet("topology", "apply", "-i", str(lab.inventory), "--json", *extra, timeout=600, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    return _json(p)


def test_apply_fresh_mesh_then_idempotent_and_survives_reboot(make_lab) -> None:
    lab = make_lab("tip", "--nodes", "3", "--fresh", "--no-exo", "--boot-seconds", "1")
    inv = str(lab.inventory)
    before = _json(lab.macfleet("topology", "ipplan", "-i", inv, "--json"))
    assert before["drift"], "a fresh lab has no planned address yet"

    tree = _tree(lab.inventory)
    checked = _apply(lab, "--check")
    assert checked["changed"] > 0, "check mode must see the changes (else the test proves nothing)"
    assert _json(lab.macfleet("topology", "ipplan", "-i", inv, "--json")) == before, "--check changed something"
    assert _tree(lab.inventory) == tree, "--check changed the inventory on the controller"

    first = _apply(lab)
    assert first["changed"] > 0 and not any(n["failed"] for n in first["nodes"].values())

    links = _links(lab)
    assert len(links) == 3
    for lk in links:
        a, b = lk["a"], lk["b"]
        for here, there in ((a, b), (b, a)):
            p = lab.ssh(here["node"], f"ping -c 1 -t 2 {there['address']}", check=False)
            assert p.returncode == 0, f"{here['node']} cannot ping {there['address']}: {p.stdout}{p.stderr}"
            assert _route_iface(lab, here["node"], there["address"]) == here["port"]
        assert lab.ssh(a["node"], "ifconfig bridge0", check=False).returncode != 0 or \
            "member: en" not in lab.ssh(a["node"], "ifconfig bridge0").stdout

    second = _apply(lab)
    assert second["changed"] == 0, second

    lab.macfleet("lab", "power", "--name", lab.name, "studio-2", "cycle")
    lab.wait_ssh("studio-2", timeout=90)
    lab.wait(lambda: _json(lab.macfleet("topology", "ipplan", "-i", inv, "--json", check=False))["drift"] == [],
             60, "addresses back after the reboot")


def test_pool_collision_is_refused_before_any_change(make_lab) -> None:
    lab = make_lab("tcol", "--nodes", "2", "--fresh", "--no-exo", "--boot-seconds", "1")
    lab.sudo("studio-2", "ifconfig en0 inet 10.213.0.9 netmask 255.255.255.0 alias")
    try:
        p = lab.macfleet("topology", "apply", "-i", str(lab.inventory), "--json", check=False, timeout=300)
        assert p.returncode == 1, p.stdout + p.stderr
        err = _json(p)["error"]
        assert err["code"] == "refused" and "studio-2" in err["message"] and "en0" in err["message"]
        assert not (lab.inventory / "host_vars" / "studio-1" / "macfleet_generated.yml").exists()
        order = lab.ssh("studio-1", "networksetup -listnetworkserviceorder").stdout
        assert "(*) Thunderbolt Bridge" not in order, "the bridge was switched off despite the refusal"
    finally:
        lab.sudo("studio-2", "ifconfig en0 -alias 10.213.0.9", check=False)
    # A route into the pool through a gateway (what a VPN pushing 10.213.0.0/24 looks like) is refused too.
    gateway = lab.truth()["controller_address"]
    lab.sudo("studio-1", f"ip route add 10.213.0.0/24 via {gateway} dev en0")
    try:
        p = lab.macfleet("topology", "apply", "-i", str(lab.inventory), "--json", check=False, timeout=300)
        assert p.returncode == 1, p.stdout + p.stderr
        err = _json(p)["error"]
        assert err["code"] == "refused" and "studio-1 routes 10.213.0" in err["message"], err
        assert not (lab.inventory / "host_vars" / "studio-1" / "macfleet_generated.yml").exists()
    finally:
        lab.sudo("studio-1", "ip route del 10.213.0.0/24", check=False)
