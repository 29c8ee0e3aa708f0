"""The other engines on the lab's mesh, over real SSH: `export mlx-hostfile` read by MLX's own hostfile parser
and launcher checks, every rdma_enX checked against the node's own `ibv_devinfo` for that cable; llama.cpp's
--rpc list; `bench links` against a saved baseline."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from macfleet.facts.rdma import parse_ibv_devinfo
from macfleet.lab.spec import device_of
from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab(minutes=1.5)


def _cable_end(truth: dict, node: str, peer: str) -> int:
    """The receptacle on `node` of the lab's cable to `peer`."""
    for c in truth["cables"]:
        ends = {c["a"]["node"]: c["a"]["receptacle"], c["b"]["node"]: c["b"]["receptacle"]}
        if set(ends) == {node, peer}:
            return ends[node]
    raise AssertionError(f"no cable {node}–{peer} in lab.json")


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # MLX's launcher reports a malformed hostfile through parser.error
        raise _Refused(message)


def _mlx_checks(path: Path, monkeypatch) -> list[list[str | None]]:
    """Load the file with MLX's own parser and run its jaccl launcher up to the launch itself; the device
    matrix it would hand to every rank (MLX_IBV_DEVICES). Without MLX installed, the documented shape."""
    try:
        from mlx._distributed_utils import launch
        from mlx._distributed_utils.common import Hostfile
    except ImportError:
        data = json.loads(path.read_text())
        assert set(data) == {"backend", "envs", "hosts"} and data["backend"] == "jaccl"
        n = len(data["hosts"])
        assert all(len(h["rdma"]) == n and h["rdma"][i] is None for i, h in enumerate(data["hosts"]))
        assert data["hosts"][0]["ips"]
        return [h["rdma"] for h in data["hosts"]]
    hostfile = Hostfile.from_file(path)
    assert hostfile.backend == "jaccl" and hostfile.envs == []
    seen: dict = {}
    monkeypatch.setattr(launch, "_launch_with_io", lambda _cls, ranks, _verbose: seen.update(ranks=ranks))
    args = argparse.Namespace(backend="jaccl", env=[], cwd=None, starting_port=32323, verbose=False,
                              python="python3")
    launch.launch_jaccl(_Parser(), hostfile.hosts, args, ["true"])
    (_rank, _ssh, _python, _cwd, files, env, _command), _ = seen["ranks"][0]
    assert env == [f"MLX_JACCL_COORDINATOR={hostfile.hosts[0].ips[0]}:32323"]
    return json.loads(files["MLX_IBV_DEVICES"])


def test_exports_name_each_cables_rdma_device_and_address(lab4: Lab, tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "m3-ultra-jaccl.json"
    lab4.macfleet("export", "mlx-hostfile", "-i", str(lab4.inventory), "--out", str(out))
    truth = lab4.truth()
    names = truth["meshes"][0]["nodes"]
    matrix = _mlx_checks(out, monkeypatch)
    hosts = json.loads(out.read_text())["hosts"]
    assert [h["ips"][0] for h in hosts] == [truth["nodes"][n]["address"] for n in names]
    for i, node in enumerate(names):
        devinfo = {d.name: d for d in parse_ibv_devinfo(lab4.ssh(node, "ibv_devinfo -v").stdout).devices}
        for j, peer in enumerate(names):
            if i == j:
                assert matrix[i][j] is None
                continue
            receptacle = _cable_end(truth, node, peer)
            device = f"rdma_{device_of(truth, node, receptacle)}"
            assert matrix[i][j] == device, (node, peer)
            assert devinfo[device].state == "PORT_ACTIVE", (node, device)
            assert devinfo[device].ipv4_gid_address == truth["addresses"][node][str(receptacle)][0]

    ring = json.loads(lab4.macfleet("export", "mlx-hostfile", "-i", str(lab4.inventory), "--backend", "ring").stdout)
    assert ring["backend"] == "ring"
    assert [h["ips"] for h in ring["hosts"]] == [
        [truth["addresses"][n][str(_cable_end(truth, n, names[i - 1]))][0]] for i, n in enumerate(names)]

    # llama.cpp's --rpc list for studio-2: each worker's address on its own cable to studio-2
    rpc = json.loads(lab4.macfleet("export", "llama-rpc", "-i", str(lab4.inventory), "--head", "studio-2",
                                   "--json").stdout)
    assert rpc["rpc"] == ",".join(f"{truth['addresses'][w][str(_cable_end(truth, w, 'studio-2'))][0]}:50052"
                                  for w in names if w != "studio-2")


def _shape_cable(lab: Lab, a: str, b: str, rate: str) -> None:
    """tc on both ends of the a–b cable, as the lab shapes every cable (a slower cable, nothing else changed)."""
    from macfleet.lab import netns

    truth = lab.truth()
    for node, peer in ((a, b), (b, a)):
        dev = device_of(truth, node, _cable_end(truth, node, peer))
        netns.batch([netns.tbf(dev, rate)], ns=truth["nodes"][node]["ns"], tool=netns.TC)


def test_bench_links_names_the_link_that_fell_below_its_baseline(lab4: Lab) -> None:
    """A baseline on the healthy lab, then one cable shaped to 50 Mbit/s: bench names that link, both ways, and
    only it, and doctor's links-bench check names it from that latest run (the fraction is set low, 0.3, so two
    busy cores sharing the lab do not make a healthy link fail).
    The same cable as a Thunderbolt 4 one (`slow-cable`: PORT_DOWN) makes the MLX hostfile refused, naming it."""
    inv = str(lab4.inventory)
    setting = lab4.inventory / "group_vars" / "all" / "bench.yml"
    baseline = lab4.inventory / "bench-links.baseline.json"
    setting.write_text("macfleet_bench:\n  min_fraction: 0.3\n")
    try:
        saved = lab4.macfleet("bench", "links", "-i", inv, "--duration", "1", "--save-baseline", "--json")
        first = json.loads(saved.stdout)
        assert first["saved"] and baseline.is_file()
        assert len(first["links"]) == 6 and len(first["rounds"]) == 3
        assert all(r["a_to_b_gbps"] and r["b_to_a_gbps"] and r["rtt_ms"] is not None for r in first["links"])

        _shape_cable(lab4, "studio-1", "studio-3", "50mbit")
        slow = lab4.macfleet("bench", "links", "-i", inv, "--duration", "1", "--json", check=False)
        assert slow.returncode == 1, slow.stderr
        below = json.loads(slow.stdout)["below_baseline"]
        assert {(d["a"], d["b"]) for d in below} == {("studio-1", "studio-3")}
        assert {d["direction"] for d in below} == {"a_to_b", "b_to_a"}
        # doctor reports that latest run against the baseline (it runs no iperf3 itself)
        doc = lab4.macfleet("doctor", "-i", inv, "--only", "links-bench", "--json", check=False)
        assert doc.returncode == 1, doc.stderr
        found = [f for f in json.loads(doc.stdout)["findings"] if f["check"] == "links-bench"]
        assert [f["node"] for f in found] == ["studio-1"] and "studio-1 ↔ studio-3" in found[0]["message"]

        lab4.fault("slow-cable", "studio-1", "studio-3")
        refused = lab4.macfleet("export", "mlx-hostfile", "-i", inv, check=False)
        assert refused.returncode == 1 and refused.stdout == ""
        assert "studio-1 and studio-3: no active RDMA port" in refused.stderr
    finally:
        lab4.fault("slow-cable", "studio-1", "studio-3", clear=True, check=False)
        _shape_cable(lab4, "studio-1", "studio-3", lab4.truth()["tb_rate"])
        setting.unlink(missing_ok=True)
        baseline.unlink(missing_ok=True)
        (lab4.inventory / "bench-links.latest.json").unlink(missing_ok=True)


_KNOCK = ("python3 -c 'import socket,sys\ntry:\n socket.create_connection((sys.argv[1], 50052), 2).close()\n"
          " print(\"open\")\nexcept OSError as e:\n print(e.strerror)' ")


def _knock(lab: Lab, node: str, address: str) -> str:
    return lab.ssh(node, _KNOCK + address).stdout.strip()


class _LanHost:
    """A host on the management LAN (hostile.md row 11): a namespace on the lab's bridge, at the subnet's
    .200, with a route to the Thunderbolt pool through one node's management address."""

    def __init__(self, lab: Lab, via: str):
        import ipaddress
        import subprocess

        from tests.lab.conftest import LAB_PREFIX

        truth = lab.truth()
        net = ipaddress.ip_network(truth["subnet"])
        self.ns, self.run = f"{LAB_PREFIX or 'mf'}-lanhost", subprocess.run
        host, peer = f"{LAB_PREFIX or 'mf'}lanh"[:12], f"{LAB_PREFIX or 'mf'}lann"[:12]
        self.host = host
        for argv in (["ip", "netns", "add", self.ns], ["ip", "link", "add", host, "type", "veth", "peer", "name", peer],
                     ["ip", "link", "set", peer, "netns", self.ns],
                     ["ip", "link", "set", host, "master", truth["bridge"], "up"],
                     ["ip", "-n", self.ns, "addr", "add", f"{net.network_address + 200}/{net.prefixlen}", "dev", peer],
                     ["ip", "-n", self.ns, "link", "set", peer, "up"], ["ip", "-n", self.ns, "link", "set", "lo", "up"],
                     ["ip", "-n", self.ns, "route", "add", "10.213.0.0/16", "via", via]):
            subprocess.run(argv, check=True, capture_output=True)

    def knock(self, address: str, port: int = 50052) -> str:
        program = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])), 3).close()\n"
                   " print('open')\nexcept OSError as e:\n print(e.strerror or type(e).__name__)")
        p = self.run(["ip", "netns", "exec", self.ns, "python3", "-c", program, address, str(port)],
                     capture_output=True, text=True, timeout=30)
        return p.stdout.strip() or p.stderr.strip()[-200:]

    def close(self) -> None:
        self.run(["ip", "link", "del", self.host], capture_output=True)
        self.run(["ip", "netns", "del", self.ns], capture_output=True)


def test_rollout_llama_rpc_binds_each_thunderbolt_address_only_and_doctor_watches_it(lab4: Lab,
                                                                                      tmp_path: Path) -> None:
    """lab llama-build → rollout llama-rpc (--check changes nothing; a broken build is rolled back) → each
    node's rpc-server accepts from its peers over each cable and not on its LAN address; doctor's llama-rpc
    check is clean, then names a job that stopped and a rogue rpc-server on a LAN address."""
    inv = str(lab4.inventory)
    setting = lab4.inventory / "group_vars" / "all" / "llama.yml"
    good, bad = tmp_path / "good", tmp_path / "bad"
    lab4.macfleet("lab", "llama-build", "--out", str(good))
    lab4.macfleet("lab", "llama-build", "--out", str(bad), "--broken")
    setting.write_text("macfleet_llama:\n  enabled: true\n")
    truth = lab4.truth()
    mgmt = {n: s["address"] for n, s in lab4.status().items()}
    try:
        plan = json.loads(lab4.macfleet("rollout", "llama-rpc", "-i", inv, "--source", str(good), "--check",
                                        "--json").stdout)
        assert plan["result"] == "check" and plan["staged"] == lab4.nodes
        assert lab4.ssh("studio-1", "test -e llama.cpp", check=False).returncode == 1  # nothing changed
        assert not list(lab4.inventory.glob("*.lock.json"))

        done = json.loads(lab4.macfleet("rollout", "llama-rpc", "-i", inv, "--source", str(good), "--json",
                                        timeout=300).stdout)
        assert done["result"] == "switched" and len(done["jobs"]["studio-1"]) == 3
        for node, jobs in done["jobs"].items():
            for job in jobs:  # the address the lab put on that node's end of the cable to that peer
                assert job["address"] == truth["addresses"][node][str(_cable_end(truth, node, job["peer"]))][0]
                assert _knock(lab4, job["peer"], job["address"]) == "open"
            assert _knock(lab4, node, mgmt[node]) != "open"  # never on the LAN address
        doc = lab4.macfleet("doctor", "-i", inv, "--only", "llama-rpc", "--json", check=False)
        checks = [c for c in json.loads(doc.stdout)["checks"] if c["check"] == "llama-rpc"]
        assert doc.returncode == 0 and {c["result"] for c in checks} == {"ok"}, doc.stdout

        # a LAN host with a route to the Thunderbolt pool through studio-1's management address: bootstrap's
        # anchor drops it on rpc-server's port (a Mac takes a packet for any of its addresses on any interface,
        # so the binding alone let it in), while the peer at the cable's other end still connects
        lan = _LanHost(lab4, mgmt["studio-1"])
        try:
            target = done["jobs"]["studio-1"][0]
            assert lan.knock(target["address"]) != "open"
            assert _knock(lab4, target["peer"], target["address"]) == "open"
            anchor = lab4.sudo("studio-1", "cat /etc/pf.anchors/macfleet").stdout
            assert "port { 50052 }" in anchor
            # an anchor without rpc-server's port (as bootstrap wrote it before): the LAN gets in, doctor says so
            lab4.sudo("studio-1", "grep -v 50052 /etc/pf.anchors/macfleet > /tmp/exo-only.pf && "
                                  "pfctl -a com.apple/macfleet -f /tmp/exo-only.pf")
            try:
                assert lab4.wait(lambda: lan.knock(target["address"]) == "open", 20, "the LAN host let in")
                doc = lab4.macfleet("doctor", "-i", inv, "--only", "llama-rpc", "--json", check=False)
                found = [f for f in json.loads(doc.stdout)["findings"] if f["check"] == "llama-rpc"]
                assert doc.returncode == 1 and [f["node"] for f in found] == ["studio-1"], doc.stdout
                assert "reachable from the LAN" in found[0]["message"] and "50052" in found[0]["message"]
            finally:
                lab4.sudo("studio-1", "pfctl -a com.apple/macfleet -f /etc/pf.anchors/macfleet; rm -f /tmp/exo-only.pf")
            assert lab4.wait(lambda: lan.knock(target["address"]) != "open", 20, "the LAN host kept out again")
        finally:
            lan.close()

        broken = lab4.macfleet("rollout", "llama-rpc", "-i", inv, "--source", str(bad), "--timeout", "4",
                               check=False, timeout=300)
        assert broken.returncode == 1 and f"rolled back to {done['release']}" in broken.stderr, broken.stderr
        job = done["jobs"]["studio-2"][0]
        assert lab4.wait(lambda: _knock(lab4, job["peer"], job["address"]) == "open", 20, "rolled back job")

        lab4.ssh("studio-2", f"sudo -n launchctl bootout system/{job['label']}")
        rogue = lab4.ssh("studio-1", f"nohup llama.cpp/current/bin/rpc-server -H {mgmt['studio-1']} -p 50052 "
                                     ">/dev/null 2>&1 & echo $!").stdout.strip()
        lab4.wait(lambda: _knock(lab4, "studio-1", mgmt["studio-1"]) == "open", 20, "rogue rpc-server")
        doc = lab4.macfleet("doctor", "-i", inv, "--only", "llama-rpc", "--json", check=False)
        found = {f["node"]: f["message"] for f in json.loads(doc.stdout)["findings"] if f["check"] == "llama-rpc"}
        assert doc.returncode == 1 and set(found) == {"studio-1", "studio-2"}, doc.stdout
        assert mgmt["studio-1"] in found["studio-1"] and "unauthenticated" in found["studio-1"]
        assert f"not listening on {job['address']}" in found["studio-2"]
        lab4.ssh("studio-1", f"kill {int(rogue)}")
    finally:
        setting.unlink(missing_ok=True)
        for node in lab4.nodes:
            lab4.ssh(node, "for i in 0 1 2 3 4 5 6 7; do sudo -n launchctl bootout system/org.macfleet.llama-rpc.$i "
                           "2>/dev/null; done; rm -rf llama.cpp", check=False)
            lab4.sudo(node, "rm -f /Library/LaunchDaemons/org.macfleet.llama-rpc.*.plist", check=False)
