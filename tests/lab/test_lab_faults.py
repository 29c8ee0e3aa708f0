"""Lab faults: each fault shows where a real Mac shows it, nowhere else, and --clear undoes it.

One table over the faults that need no reboot, on the shared `lab4` (every fault is cleared before the next):
each node answers a set of probes over SSH (system_profiler, ibv_devinfo, rdma_ctl/ibv_devices, networksetup,
ifconfig, pmset, fdesetup, sw_vers, sysctl, df, date, exo's /state summarised); after the fault, the set of
(probe, node) that differ from the healthy baseline must be exactly the expected one; after --clear, every
probe is back to the baseline. Faults whose point is a reboot (hang, filevault-on, slow-boot, rdma-wedge's
window) run on `lab_small`. Every wait polls with a deadline.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = pytest.mark.lab(minutes=8.7, whole=False)

ALL = ("studio-1", "studio-2", "studio-3", "studio-4")

_EXO = r"""
import json, urllib.request
try:
    s = json.load(urllib.request.urlopen("http://127.0.0.1:52415/state", timeout=3))
except Exception:
    print(json.dumps("down")); raise SystemExit
names = {k: v.get("friendlyName", k[:6]) for k, v in s.get("nodeIdentities", {}).items()}
n = lambda k: names.get(k, k[:6])
pairs = lambda kind: sorted(f"{n(a)}>{n(b)}" for a, sinks in s["topology"]["connections"].items()
                            for b, cs in sinks.items() if any(kind in c for c in cs))
runner_node = {r: n(k) for i in s.get("instances", {}).values() for v in i.values()
               for k, r in v.get("shardAssignments", {}).get("nodeToRunner", {}).items()}
runners = sorted(f"{runner_node.get(r, '?')}:{k}:{v.get('errorMessage', '')}" for r, st in s["runners"].items()
                 for k, v in st.items())
print(json.dumps({"nodes": sorted(map(n, s["topology"]["nodes"])), "rdma": pairs("sourceRdmaIface"),
                  "sock": pairs("sinkMultiaddr"), "runners": runners}))
"""

PROBES = {
    "tb": "system_profiler SPThunderboltDataType -json",
    "ibv": "timeout 3 ibv_devinfo -v; echo rc=$?",
    "rdma": "rdma_ctl status; ibv_devices",
    # Thunderbolt 2 is the port the table's network faults change on studio-2 (its cable to studio-1)
    "net": "networksetup -listnetworkserviceorder; networksetup -getinfo 'Thunderbolt 2'",
    "ifconfig": "ifconfig",
    "pmset": "pmset -g",
    "fdesetup": "fdesetup status",
    "sw_vers": "sw_vers",
    "sysctl": "sysctl iogpu.wired_limit_mb kern.osversion",
    "df": "df -k /Users | awk 'NR==2 {print $5}'",
    "date": "echo $(( ($(date +%s) - $(python3 -c 'import time; print(int(time.time()))')) / 60 ))",
    "exo": f"python3 -c {shlex.quote(_EXO)}",
}
# The probes at once (each into a file of its own), then printed in the table's order: a snapshot takes as long
# as its slowest probe, not as their sum.
SCRIPT = ("d=$(mktemp -d)\n"
          + "".join(f"{{ {v}; }} >$d/{i} 2>&1 &\n" for i, v in enumerate(PROBES.values()))
          + "wait\n"
          + "".join(f"echo; echo '@@@ {k}'; cat $d/{i}\n" for i, k in enumerate(PROBES))
          + "rm -rf $d\n")


def _ssh_argv(lab, node: str, command: str) -> list[str]:
    from macfleet.lab import control

    argv = control.ssh_argv(lab.name, node, command)
    return [a if not a.startswith("ConnectTimeout=") else "ConnectTimeout=3" for a in argv]


def _probe(lab, node: str) -> dict[str, str]:
    p = subprocess.run(_ssh_argv(lab, node, SCRIPT), capture_output=True, text=True, timeout=60)
    if p.returncode == 255:
        return {"reach": "unreachable"}
    out: dict[str, str] = {"reach": "ok"}
    key = None
    for line in p.stdout.splitlines():
        if line.startswith("@@@ "):
            key = line[4:]
            out[key] = ""
        elif key:
            out[key] += line + "\n"
    return out


def snapshot(lab, nodes=ALL) -> dict[str, dict[str, str]]:
    with ThreadPoolExecutor(len(nodes)) as pool:
        return dict(zip(nodes, pool.map(lambda n: _probe(lab, n), nodes), strict=True))


def diff(base: dict, now: dict) -> set[tuple[str, str]]:
    return {(probe, node) for node in base for probe in set(base[node]) | set(now[node])
            if base[node].get(probe) != now[node].get(probe)}


def _expect(spec: dict[str, tuple[str, ...]]) -> set[tuple[str, str]]:
    return {(probe, node) for probe, nodes in spec.items() for node in nodes}


def fault(lab, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return lab.macfleet("lab", "fault", "--name", lab.name, *args, check=check)


def _exo_log(lab, node: str) -> str:
    return lab.ssh(node, "cat ~/.exo/exo_log/exo.log").stdout


# name, fault args, {probe: nodes where it must differ}, a log line to find on a node (or None)
EXO_ALL = {"exo": ALL}
CASES = [
    ("unplug", ["unplug", "studio-1", "studio-2"],
     {"tb": ("studio-1", "studio-2"), "ibv": ("studio-1", "studio-2"), "ifconfig": ("studio-1", "studio-2"),
      **EXO_ALL}, None),
    ("slow-cable", ["slow-cable", "studio-1", "studio-3"],
     {"tb": ("studio-1", "studio-3"), "ibv": ("studio-1", "studio-3"), **EXO_ALL}, None),
    ("wrong-port", ["wrong-port", "studio-1", "studio-2"],
     {"tb": ("studio-1", "studio-2"), "ibv": ("studio-1", "studio-2"), "ifconfig": ("studio-1",), **EXO_ALL}, None),
    ("double-cable", ["double-cable", "studio-1", "studio-2"],
     {"tb": ("studio-1", "studio-2"), "ibv": ("studio-1", "studio-2"), "ifconfig": ("studio-1", "studio-2")}, None),
    ("via-hub", ["via-hub", "studio-1", "studio-2"],
     {"tb": ("studio-1", "studio-2"), "ibv": ("studio-1", "studio-2"), **EXO_ALL}, None),
    ("unknown-mac", ["unknown-mac", "studio-1"], {"tb": ("studio-1",), "ibv": ("studio-1",),
                                                  "ifconfig": ("studio-1",)}, None),
    ("bridge-on", ["bridge-on", "studio-2"],
     {"net": ("studio-2",), "ifconfig": ("studio-2",), "ibv": ("studio-2",), **EXO_ALL}, None),
    ("ip-drift", ["ip-drift", "studio-2"], {"ifconfig": ("studio-2",), "ibv": ("studio-2",), **EXO_ALL}, None),
    ("foreign-addresses", ["foreign-addresses", "studio-2"],
     {"ifconfig": ("studio-2",), "ibv": ("studio-2",), **EXO_ALL}, None),
    ("ip-drift-saved", ["ip-drift", "studio-2", "saved"],
     {"net": ("studio-2",), "ifconfig": ("studio-2",), "ibv": ("studio-2",), **EXO_ALL}, None),
    ("apipa", ["apipa", "studio-2"],
     {"net": ("studio-2",), "ifconfig": ("studio-2",), "ibv": ("studio-2",), **EXO_ALL}, None),
    ("rdma-off", ["rdma-off", "studio-2"],
     {"rdma": ("studio-2",), "ibv": ALL, "tb": ("studio-1", "studio-3", "studio-4"), **EXO_ALL}, None),
    ("rdma-wedge", ["rdma-wedge", "studio-2"], {"ibv": ALL, **EXO_ALL},
     "[jaccl] Changing queue pair to RTR failed with errno 22"),
    ("qp-exhausted", ["qp-exhausted", "studio-2"], EXO_ALL, "[jaccl] Creating the queue pair failed with errno 16"),
    ("os-mismatch", ["os-mismatch", "studio-2"], {"sw_vers": ("studio-2",), "sysctl": ("studio-2",)}, None),
    ("filevault-on", ["filevault-on", "studio-2"], {"fdesetup": ("studio-2",)}, None),
    ("disk-full", ["disk-full", "studio-2"], {"df": ("studio-2",)}, None),
    ("sleep-on", ["sleep-on", "studio-2"], {"pmset": ("studio-2",)}, None),
    ("wired-limit-lost", ["wired-limit-lost", "studio-2"], {"sysctl": ("studio-2",)}, None),
    ("clock-skew", ["clock-skew", "studio-2", "--", "-3600"], {"date": ("studio-2",)}, None),
    ("slow-boot", ["slow-boot", "studio-2", "5"], {}, None),
    ("exo-down", ["exo-down", "studio-4"], EXO_ALL, None),
    ("exo-version", ["exo-version", "studio-4", "1.0.70"], EXO_ALL, None),
    ("exo-runner-failed", ["exo-runner-failed", "studio-2"], EXO_ALL,
     "crashed with critical exception Terminated (signal=11 (Segmentation fault: 11))"),
]


def _healthy(snap: dict) -> bool:
    for probes in snap.values():
        exo = json.loads(probes.get("exo") or '"down"')
        if exo == "down" or len(exo["nodes"]) != 4 or len(exo["rdma"]) != 12:
            return False
        if any("RunnerReady" not in r for r in exo["runners"]):
            return False
    return True


@pytest.fixture(scope="module")
def baseline(lab4):
    # bootstrap's LaunchDaemon set a wired limit at boot, so that losing it shows
    assert lab4.ssh("studio-2", "sysctl -n iogpu.wired_limit_mb").stdout.strip() != "0"
    snap = lab4.wait(lambda: (s := snapshot(lab4)) and _healthy(s) and s, 120, "a healthy 4-node mesh", every=1)
    yield snap


@pytest.mark.parametrize(("args", "where", "log"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fault_shows_where_a_mac_shows_it_and_clears(lab4, baseline, args, where, log) -> None:
    want = _expect(where)
    node = args[1]
    kind = args[0]
    fault(lab4, *args)
    try:
        last: list = [None]

        def shows() -> bool:
            last[0] = diff(baseline, snapshot(lab4))
            return last[0] == want

        try:
            lab4.wait(shows, 60, f"{kind}: differences exactly {sorted(want)}", every=0.5)
        except AssertionError as e:
            raise AssertionError(f"{e}; last seen: {sorted(last[0])}") from None
        status = lab4.status()
        assert any(f.startswith(kind) for f in status[node]["faults"]), status
        if log:
            lab4.wait(lambda: log in _exo_log(lab4, node), 15, f"{log!r} in {node}'s exo log")
    finally:
        fault(lab4, kind, *[a for a in args[1:] if a.startswith("studio-")], "--clear")
    try:
        lab4.wait(lambda: not (last.__setitem__(0, diff(baseline, snapshot(lab4))) or last[0]), 90,
                  f"{kind} cleared: every probe as before", every=0.5)
    except AssertionError as e:
        raise AssertionError(f"{e}; still different: {sorted(last[0])}") from None
    assert all(not n["faults"] for n in lab4.status().values())


def test_unplug_gives_five_links_in_the_captures(lab4) -> None:
    fault(lab4, "unplug", "studio-3", "studio-4")
    try:
        p = lab4.macfleet("topology", "check", "-i", str(lab4.inventory), "--json", check=False)
        data = json.loads(p.stdout)
        assert len(data["links"]) == 5
        assert [f["code"] for f in data["findings"]] == ["missing-pair"]
    finally:
        fault(lab4, "unplug", "studio-4", "studio-3", "--clear")  # either order clears a pair fault


@pytest.mark.parametrize("args", [
    ["no-such-fault", "studio-1"],
    ["unplug", "studio-1"],
    ["unplug", "studio-1", "studio-9"],
    ["unplug", "studio-1", "studio-1"],
    ["hang", "studio-1", "studio-2"],
    ["slow-boot", "studio-1", "soon"],
    ["ip-drift", "studio-1", "sideways"],
    ["unplug", "studio-1", "studio-2", "--clear"],  # not active
], ids=lambda a: " ".join(a))
def test_bad_input_exits_2_and_changes_nothing(lab4, args) -> None:
    before = (lab4.truth(), [lab4.node_state(n, "persist") for n in ALL])
    p = fault(lab4, *args, check=False)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "error" in p.stderr.lower() and "Traceback" not in p.stderr
    assert (lab4.truth(), [lab4.node_state(n, "persist") for n in ALL]) == before
    assert all(not n["faults"] for n in lab4.status().values())


def test_the_same_fault_twice_is_refused(lab4) -> None:
    fault(lab4, "sleep-on", "studio-3")
    try:
        p = fault(lab4, "sleep-on", "studio-3", check=False)
        assert p.returncode == 2 and "already" in p.stderr
    finally:
        fault(lab4, "sleep-on", "studio-3", "--clear")


def test_lab_faults_lists_every_fault(lab4) -> None:
    from macfleet.lab import faults

    p = lab4.macfleet("lab", "faults")
    lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
    assert [ln.split()[0] for ln in lines] == list(faults.FAULTS)
    assert all(len(ln.split(None, 1)) == 2 for ln in lines)


# ------------------------------------------------------------------------------------------------
# Faults that are about reboots: on the 2-node lab (1 s boots, no exo)
# ------------------------------------------------------------------------------------------------


def _reachable(lab, node: str) -> bool:
    return subprocess.run(_ssh_argv(lab, node, "true"), capture_output=True, timeout=30).returncode == 0


def _pings(lab, node: str) -> bool:
    addr = lab.status()[node]["address"]
    return subprocess.run(["ping", "-c", "1", "-W", "1", addr], capture_output=True).returncode == 0


def test_hang_only_a_power_cycle_helps(lab_small) -> None:
    lab = lab_small
    fault(lab, "hang", "studio-2")
    try:
        assert not _reachable(lab, "studio-2") and not _pings(lab, "studio-2")
        tb = lab.ssh("studio-1", "system_profiler SPThunderboltDataType").stdout
        assert "Device connected" not in tb  # the peer's port went dark
        assert lab.status()["studio-2"]["faults"] == ["hang studio-2"]
    finally:
        lab.macfleet("lab", "power", "--name", lab.name, "studio-2", "cycle")
    lab.wait_ssh("studio-2", 30)
    assert _pings(lab, "studio-2")
    assert lab.status()["studio-2"]["faults"] == []


def _macfleet_json(lab, *args: str) -> tuple[int, dict]:
    p = lab.macfleet(*args, "-i", str(lab.inventory), "--json", check=False, timeout=240)
    return p.returncode, (json.loads(p.stdout) if p.stdout.strip() else {"stderr": p.stderr})


def _greets(lab, node: str) -> bytes:
    import socket

    try:
        with socket.create_connection((lab.status()[node]["address"], 22), timeout=5) as s:
            s.settimeout(5)
            return s.recv(64)
    except OSError:
        return b""


def test_filevault_unlock_screen_answers_ssh_with_a_password_only_and_macfleet_unlock_brings_it_back(
        lab_small, tmp_path) -> None:
    """authrestart comes back by itself; a plain reboot or a power cycle stops at the unlock screen, where (macOS 26,
    apple_ssh_and_filevault(7)) SSH answers with a key of its own and password logins only. `trust --unlock`
    records that key apart; doctor says the node waits at the unlock screen (never "host key CHANGED");
    `unlock --check` changes nothing; a loose password file is bad input; a wrong password is refused; the right
    one unlocks it and it comes back with its normal key, its boot time that of the boot that stopped there."""
    from macfleet.lab.state import STATE_ROOT

    lab = lab_small
    fault(lab, "filevault-on", "studio-2")
    secret = tmp_path / "fv-password"
    secret.write_text((STATE_ROOT / lab.name / "admin-password").read_text())
    secret.chmod(0o600)
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password\n")
    wrong.chmod(0o600)
    try:
        assert lab.ssh("studio-2", "fdesetup status").stdout == "FileVault is On.\n"
        lab.ssh("studio-2", "sudo -n fdesetup authrestart", check=False)
        lab.wait(lambda: lab.node_state("studio-2")["power"] != "on", 15, "authrestart to take it down")
        lab.wait_ssh("studio-2", 30)  # authrestart: unlocked once, comes back
        lab.ssh("studio-2", "sudo -n shutdown -r now", check=False)
        lab.wait_state("studio-2", {"locked"}, 30)
        lab.macfleet("lab", "power", "--name", lab.name, "studio-2", "cycle")  # a power cycle lands there too
        lab.wait_state("studio-2", {"locked"}, 30)
        lab.wait(lambda: _greets(lab, "studio-2").startswith(b"SSH-"), 15, "the unlock screen's sshd")
        assert not _reachable(lab, "studio-2")  # no key login there
        code, out = _macfleet_json(lab, "trust", "studio-2")
        assert code == 1 and "password logins only" in out["nodes"][0]["refused"]
        code, out = _macfleet_json(lab, "trust", "--unlock", "studio-2", "--yes")
        assert code == 0 and out["nodes"][0]["recorded"] and out["known_hosts"].endswith("known_hosts.unlock")
        assert out["nodes"][0]["methods"] == ["password"]
        code, out = _macfleet_json(lab, "doctor", "--only", "reachable")
        assert code == 3, out
        found = [f for f in out["findings"] if f.get("node") == "studio-2" or "studio-2" in f.get("nodes", [])]
        assert any("waiting at the FileVault unlock screen" in f["message"] for f in found), found
        assert "CHANGED" not in json.dumps(out)
        code, out = _macfleet_json(lab, "unlock", "--check", "--password-file", str(secret))
        assert code == 0 and {n["name"]: n["result"] for n in out["nodes"]} == {
            "studio-1": "nothing to do", "studio-2": "would unlock"}
        assert lab.node_state("studio-2")["power"] == "locked"  # a preview sends nothing
        secret.chmod(0o644)
        code, out = _macfleet_json(lab, "unlock", "studio-2", "--password-file", str(secret))
        assert code == 2 and "others can read it" in out["error"]["message"]
        secret.chmod(0o600)
        code, out = _macfleet_json(lab, "unlock", "studio-2", "--password-file", str(wrong), "--timeout", "20")
        assert code == 1 and out["nodes"][0]["result"] == "password refused", out
        locked_boot = lab.node_state("studio-2")["booted_at"]
        code, out = _macfleet_json(lab, "unlock", "studio-2", "--password-file", str(secret), "--timeout", "60")
        assert code == 0 and out["nodes"][0]["result"] == "unlocked", out
        assert lab.ssh("studio-2", "true").returncode == 0  # its normal sshd and key
        assert lab.node_state("studio-2")["booted_at"] == locked_boot  # the same boot, continued
        p = lab.macfleet("unlock", "-i", str(lab.inventory), "--password-file", str(secret), "--json", check=False)
        assert secret.read_text().strip() not in p.stdout + p.stderr
    finally:
        fault(lab, "filevault-on", "studio-2", "--clear")  # the operator unlocks it at the console
    lab.wait_ssh("studio-2", 30)
    assert lab.ssh("studio-2", "fdesetup status").stdout == "FileVault is Off.\n"


def test_slow_boot_takes_its_seconds(lab_small) -> None:
    lab = lab_small
    fault(lab, "slow-boot", "studio-1", "4")
    try:
        t0 = time.monotonic()
        lab.macfleet("lab", "power", "--name", lab.name, "studio-1", "cycle")
        lab.wait_ssh("studio-1", 30)
        assert time.monotonic() - t0 >= 4
    finally:
        fault(lab, "slow-boot", "studio-1", "--clear")


def _ibv_hangs(lab, node: str) -> bool:
    return lab.ssh(node, "timeout 3 ibv_devinfo >/dev/null; echo $?", check=False).stdout.strip() == "124"


def _reboot(lab, *nodes: str) -> None:
    for n in nodes:
        lab.macfleet("lab", "power", "--name", lab.name, n, "cycle")
    for n in nodes:
        lab.wait_ssh(n, 30)


def test_rdma_wedge_clears_only_when_the_whole_mesh_rebooted(lab_small) -> None:
    lab = lab_small
    fault(lab, "rdma-wedge", "studio-2")
    try:
        assert _ibv_hangs(lab, "studio-2")
        assert "PORT_ACTIVE" not in lab.ssh("studio-1", "ibv_devinfo").stdout  # its only peer is wedged
        _reboot(lab, "studio-2")
        assert _ibv_hangs(lab, "studio-2"), "rebooting the wedged node alone must not clear it"
        assert lab.status()["studio-2"]["faults"] == ["rdma-wedge studio-2"]
        _reboot(lab, "studio-1")
        assert not _ibv_hangs(lab, "studio-2")
        assert "PORT_ACTIVE" in lab.ssh("studio-1", "ibv_devinfo").stdout
        assert lab.status()["studio-2"]["faults"] == []
    finally:
        fault(lab, "rdma-wedge", "studio-2", "--clear", check=False)


def test_reboot_keeps_settings_faults_and_drops_live_ones(lab_small) -> None:
    lab = lab_small
    fault(lab, "sleep-on", "studio-1")
    fault(lab, "ip-drift", "studio-1")
    fault(lab, "foreign-addresses", "studio-2")
    try:
        assert "10.213.254." in lab.ssh("studio-1", "ifconfig").stdout
        assert "192.168." in lab.ssh("studio-2", "netstat -rn").stdout
        _reboot(lab, "studio-1", "studio-2")
        assert "10.213.254." not in lab.ssh("studio-1", "ifconfig").stdout  # ifconfig changes are lost
        assert "192.168." not in lab.ssh("studio-2", "ifconfig; netstat -rn").stdout  # and route changes
        assert lab.status()["studio-2"]["faults"] == []
        assert " sleep                10" in lab.ssh("studio-1", "pmset -g").stdout  # pmset persists
        assert lab.status()["studio-1"]["faults"] == ["sleep-on studio-1"]
    finally:
        fault(lab, "sleep-on", "studio-1", "--clear")
