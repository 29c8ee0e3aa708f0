"""Names of the files a release carries beside exo's own.

PORTS_FILE: in a release built on a builder, exo's peer ports as its source sets them, {"tcp": [...], "udp": [...],
"source": ...}. The pf role reads it from the release `current` points at (playbooks/roles/pf)."""

PORTS_FILE = "macfleet-ports.json"
