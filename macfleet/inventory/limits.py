"""Bounds the command line needs before it loads an inventory (no pydantic here: `--help` imports it)."""

# A Thunderbolt full mesh is cabled point to point: 8 Macs is 28 cables, the most one mesh is planned for.
MAX_MESH_NODES = 8
