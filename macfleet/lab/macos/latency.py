"""How long a real Mac takes to answer each command the lab stands in for: the one table, applied in one place.

`cli.main` waits `seconds(cmd, args) * scale` before a stand-in runs, where `scale` is the lab's one setting
(`lab up --latency SCALE`, kept in lab.json as "latency"; 1 = as a Mac, the default; 0 = the lab's own speed,
for a test that says so). The stand-in's own work (tens of milliseconds of Python) comes on top, so the lab is
never faster than the table.

Each entry cites what its figure rests on. Where no public timing exists the figure is a guess and says so;
docs/lab.md lists the guesses, and nothing in macfleet may depend on them: its timeouts are set from the cited
worst cases, and doctor does not wait on the slowest probe at every pass (flow/doctor.py caches it).
stdlib only, no import at load (stand-ins start often: see common.py).
"""

from __future__ import annotations

# Key: the command, or "command first-argument" where the argument changes the cost. Value: (seconds, source).
LATENCY: dict[str, tuple[float, str]] = {
    "system_profiler SPThunderboltDataType": (
        1.0, "capture: _SPResponseTime 0.78 s for SPThunderboltDataType on a Thunderbolt 3 MacBook Pro with a "
        "dock (https://github.com/duanefields/VirtualKVM/issues/50), 0.10 s on a Thunderbolt 5 MacBook Pro "
        "under macOS 26 (shared/samples macos__sp_thunderbolt_xml_mbp_tb5_dock_1.xml), plus the tool's own "
        "start; a Mac Studio's six ports with a peer on each: 1 s is a guess within that range"),
    "system_profiler": (
        0.3, "capture: _SPResponseTime 0.15 s for small data types (https://github.com/ansible/ansible/issues/"
        "28982), plus the tool's start: guess"),
    "softwareupdate --list": (
        20.0, "guess: it asks Apple's catalogue over the network; reported to hang or fail and work minutes "
        "later (https://github.com/Macjutsu/super/issues/119, whose check waits up to 2 min; "
        "https://github.com/elliotweiser/ansible-osx-command-line-tools/pull/72): no timing published"),
    "softwareupdate -l": (20.0, "as softwareupdate --list"),
    "networksetup": (0.15, "guess: each call goes through configd (SystemConfiguration); no timing published"),
    "ibv_devinfo": (0.3, "guess: queries every RDMA device and port; exo#1712 reports it hanging when RDMA is "
                    "wedged (the lab's rdma-wedged fault, not this table)"),
    "ibv_devices": (0.1, "guess: opens the verbs device list; no timing published"),
    "rdma_ctl": (0.05, "guess: reads one kernel setting; no timing published"),
    "fdesetup": (0.2, "guess: asks the FileVault service; no timing published"),
    "systemsetup": (0.2, "guess: goes through a privileged helper; no timing published"),
    "mdutil": (0.1, "guess: asks the Spotlight server; no timing published"),
    "xcode-select": (0.05, "guess"),
    "xcrun": (0.05, "guess: reads the active developer directory; no timing published"),
    "brew": (0.5, "guess: Homebrew's Ruby start"),
}
# The other stand-ins answer from the kernel or a small file, in milliseconds on a Mac as in the lab: no wait
# (a guess too, listed in docs/lab.md).
FAST: tuple[str, ...] = (
    "sw_vers", "sysctl", "pmset", "csrutil", "ifconfig", "nvram", "ioclasscount", "scutil", "pfctl", "launchctl",
    "defaults",
    "plutil", "date", "df", "route", "netstat", "ipconfig", "caffeinate", "afplay", "shutdown", "reboot", "halt",
    "ping",
)


def seconds(cmd: str, args: list[str]) -> float:
    """The table's wait for `cmd args`, before scaling. system_profiler pays for each data type it is asked."""
    if cmd == "system_profiler":
        types = [a for a in args if a.startswith("SP") and a.endswith("DataType")]
        default = LATENCY["system_profiler"][0]
        return sum(LATENCY.get(f"{cmd} {t}", (default, ""))[0] for t in types) or default
    if args and f"{cmd} {args[0]}" in LATENCY:
        return LATENCY[f"{cmd} {args[0]}"][0]
    if cmd == "softwareupdate":
        return 0.0  # only the catalogue read (--list) is modelled as slow
    return LATENCY.get(cmd, (0.0, ""))[0]


def scale_of(spec: dict) -> float:
    """The lab's latency scale (lab.json "latency"); 1 when a lab predates the setting or holds nonsense."""
    try:
        value = float(spec.get("latency", 1.0))
    except (TypeError, ValueError):
        return 1.0
    return value if 0.0 <= value <= 10.0 else 1.0


def pause(spec: dict, cmd: str, args: list[str]) -> None:
    """Wait as long as a Mac would take to answer `cmd args` (scaled by the lab's setting)."""
    wait = seconds(cmd, args) * scale_of(spec)
    if wait > 0:
        import time

        time.sleep(wait)
