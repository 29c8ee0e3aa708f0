"""Node-side macOS userland stand-ins. Standard library only: run by Debian's /usr/bin/python3 inside a node.

`lab up` copies this package into the lab's state directory (`<state>/userland/`); each node gets one small
`#!python3.11 -SE` script per command (`<state>/nodes/<node>/standins/<command>`, calling cli.main for that
node), overlaid in front of /usr/bin and /usr/sbin in the node's mount namespace. A call should cost little
more than the interpreter's start (docs/lab.md, bench/lab_standins.py): import only builtin modules at import
time, anything costlier inside the function that needs it.
Outputs are shaped after the real captures in shared/samples/ and computed from the lab's state files
plus live `ip` state, so a fault is a state change.
"""
