"""Node-side macOS userland stand-ins. Standard library only: run by Debian's /usr/bin/python3 inside a node.

`lab up` copies this package into the lab's state directory (`<state>/userland/`); each node gets small
shell wrappers (`<state>/nodes/<node>/standins/<command>`) that exec `run.py <node dir> <command> ARGS`,
overlaid in front of /usr/bin and /usr/sbin in the node's mount namespace.
Outputs are shaped after the real captures in shared/samples/ and computed from the lab's state files
plus live `ip` state, so a fault is a state change.
"""
