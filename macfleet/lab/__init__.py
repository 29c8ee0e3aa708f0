"""The lab: a simulated Thunderbolt-mesh Mac cluster on one Linux machine (docs/lab.md).

A separate wing: it imports only `macfleet.inventory.model` and `macfleet.errors`, never
`macfleet.facts`, so the stand-ins' outputs follow the real captures rather than our parsers. The core
reaches the lab only through `macfleet/cli/lab.py` (lazily) and, like a real Mac, through SSH.

Layout:
  spec.py        lab plan as data: nodes, cables (two (node, receptacle) ends + kind + optional hub), addresses
  netns.py       network namespaces, veth cables, tc shaping (iproute2 only)
  control.py     up / down / status / power / recovery / ssh: what the CLI calls
  supervisor.py  per-lab process that carries out reboots, boot delays and power requests
  macos/         the node-side macOS userland (stdlib only, run by the node's /usr/bin/python3)
"""
