"""Dispatch: `main([<node dir>, <command>, ARGS...])`, called by each stand-in (a script in <node>/standins/) and by
`run.py <node dir> <command> ARGS...` (the lab's own calls: __init__, __netapply__, recovery)."""

from __future__ import annotations

import sys

from .common import Lab, Path

# Sources (issue 31): lab plumbing, no behaviour of a Mac of its own; each command's sources are above its handler.
COMMANDS = {
    "system_profiler": "profiler:main",
    "networksetup": "network:networksetup",
    "ifconfig": "network:ifconfig",
    "ibv_devices": "rdma:ibv_devices",
    "ibv_devinfo": "rdma:ibv_devinfo",
    "ioclasscount": "rdma:ioclasscount",
    "rdma_ctl": "rdma:rdma_ctl",
    "nvram": "rdma:nvram",
    "sw_vers": "system:sw_vers",
    "sysctl": "system:sysctl",
    "pmset": "system:pmset",
    "fdesetup": "system:fdesetup",
    "csrutil": "system:csrutil",
    "systemsetup": "system:systemsetup",
    "scutil": "system:scutil",
    "softwareupdate": "devtools:softwareupdate",
    "xcode-select": "devtools:xcode_select",
    "xcrun": "devtools:xcrun",
    "brew": "devtools:brew",
    "mdutil": "prefs:mdutil",
    "defaults": "prefs:defaults",
    "pfctl": "pf:pfctl",
    "caffeinate": "system:caffeinate",
    "shutdown": "system:shutdown",
    "reboot": "system:reboot",
    "halt": "system:halt",
    "launchctl": "launchd:launchctl",
    "date": "tools:date",
    "df": "tools:df",
    "plutil": "tools:plutil",
    "route": "tools:route",
    "netstat": "tools:netstat",
    "afplay": "sound:afplay",
    "ipconfig": "tools:ipconfig",
}
STANDINS = (*COMMANDS, "ping")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    node_dir = Path(argv[0])
    cmd, args = argv[1], argv[2:]
    if cmd == "ping":
        from .ping import ping

        return ping(args)
    lab = Lab(node_dir.parent.parent)
    node = lab.node(node_dir.name)
    if cmd == "__init__":
        from . import init

        return init.main(node)
    if cmd == "__netapply__":  # the lab applying persisted services after a replug or a fault (as configd)
        from . import network

        network.apply(node, set(args) or None)
        return 0
    target = COMMANDS.get(cmd)
    if target is None:
        sys.stderr.write(f"{cmd}: command not found\n")
        return 127
    from .latency import pause

    pause(lab.spec, cmd, args)  # as long as a Mac takes to answer (latency.py: the one table)
    mod, func = target.split(":")
    fn = getattr(__import__(mod, globals(), None, (func,), 1), func)  # importlib's import costs more than this
    try:
        return fn(node, args)
    except BrokenPipeError:
        return 141
