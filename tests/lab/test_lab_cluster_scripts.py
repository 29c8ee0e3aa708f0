"""What other Mac cluster tools run by hand, on the lab's stand-ins: `ipconfig getifaddr`, `route
add|change|delete … -interface`, `ifconfig IFACE inet … netmask …`, `ifconfig bridge0 down`, and the
`foreign-addresses` fault that does all of it. Changes are volatile, as on a Mac (the reboot side is in
test_lab_faults.py); the listing of hardware ports agrees with ifconfig about bridge0.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lab


def _cabled(lab, node: str) -> dict[str, str]:
    """{device: peer} for NODE's cabled Thunderbolt ports, from the lab's plan."""
    truth = lab.truth()
    ports = {p["receptacle"]: p["device"] for p in truth["models"][truth["nodes"][node]["model"]]["ports"]}
    out = {}
    for c in truth["cables"]:
        for me, other in ((c["a"], c["b"]), (c["b"], c["a"])):
            if me["node"] == node:
                out[ports[me["receptacle"]]] = other["node"]
    return out


def test_route_and_ipconfig_change_only_the_live_table(lab4) -> None:
    dev = sorted(_cabled(lab4, "studio-3"))[0]
    plan = lab4.ssh("studio-3", f"ipconfig getifaddr {dev}").stdout.strip()
    assert plan.startswith("10.213.")
    p = lab4.ssh("studio-3", "ipconfig getifaddr en1", check=False)  # Wi-Fi, no address: nothing, exit 1
    assert (p.returncode, p.stdout) == (1, "")
    p = lab4.ssh("studio-3", f"route -n add -net 192.168.77.0/24 -interface {dev}", check=False)
    assert p.returncode == 1 and "must be root" in p.stderr
    try:
        p = lab4.ssh("studio-3", f"sudo -n route -n add -net 192.168.77.0/24 -interface {dev}")
        assert p.stdout == f"add net 192.168.77.0: gateway {dev}\n"
        p = lab4.ssh("studio-3", f"sudo -n route -n add -net 192.168.77.0/24 -interface {dev}", check=False)
        assert p.returncode == 1 and "File exists" in p.stderr
        assert f"interface: {dev}" in lab4.ssh("studio-3", "route -n get 192.168.77.9").stdout
        p = lab4.ssh("studio-3", "sudo -n route -n change -net 192.168.78.0/24 -interface en0", check=False)
        assert p.returncode == 1 and "not in table" in p.stderr
        lab4.ssh("studio-3", "sudo -n route -n change -net 192.168.77.0/24 -interface en0")
        assert "interface: en0" in lab4.ssh("studio-3", "route -n get 192.168.77.9").stdout
    finally:
        lab4.ssh("studio-3", "sudo -n route -n delete -net 192.168.77.0/24", check=False)
    assert "192.168.77" not in lab4.ssh("studio-3", "netstat -rn").stdout


def test_hardware_ports_list_the_bridge_exactly_when_ifconfig_has_it(lab4) -> None:
    def both() -> tuple[bool, bool]:
        out = lab4.ssh("studio-4", "networksetup -listallhardwareports; echo @@; ifconfig -l").stdout
        ports, ifaces = out.split("@@")
        return "Hardware Port: Thunderbolt Bridge" in ports, "bridge0" in ifaces.split()

    assert both() == (False, False)
    lab4.fault("bridge-on", "studio-4")
    try:
        assert both() == (True, True)
        lab4.ssh("studio-4", "sudo -n ifconfig bridge0 down")
        assert both() == (True, True)  # down, not gone
        assert "flags=8822<" in lab4.ssh("studio-4", "ifconfig bridge0").stdout
    finally:
        lab4.fault("bridge-on", "studio-4", clear=True)
    assert both() == (False, False)


def test_foreign_addresses_puts_a_slash_30_per_port_routes_and_clears(lab4) -> None:
    cabled = _cabled(lab4, "studio-1")
    before = {d: lab4.ssh("studio-1", f"ipconfig getifaddr {d}").stdout for d in cabled}
    lab4.fault("foreign-addresses", "studio-1")
    try:
        got = {d: lab4.ssh("studio-1", f"ipconfig getifaddr {d}").stdout.strip() for d in cabled}
        assert all(a.startswith("192.168.") for a in got.values()), got
        assert len(set(got.values())) == len(cabled)
        assert "netmask 0xfffffffc" in lab4.ssh("studio-1", "ifconfig").stdout
        routes = lab4.ssh("studio-1", "netstat -rn").stdout
        for dev in cabled:
            assert any(r.split()[0].startswith("192.168.") and r.split()[-1] == dev for r in routes.splitlines()
                       if r.strip()), routes
        assert lab4.status()["studio-1"]["faults"] == ["foreign-addresses studio-1"]
        assert lab4.fault("foreign-addresses", "studio-1", check=False).returncode == 2  # already on
    finally:
        lab4.fault("foreign-addresses", "studio-1", clear=True)
    assert {d: lab4.ssh("studio-1", f"ipconfig getifaddr {d}").stdout for d in cabled} == before
    assert "192.168." not in lab4.ssh("studio-1", "netstat -rn").stdout
