"""Facts macfleet states once (issue 26 item 4). Every other place derives from here: the inventory model's
defaults (macfleet/inventory/model.py), the collector's commands, act's command lines, the lab's prepared nodes.

The playbooks cannot import Python: a role's defaults/main.yml (and meta/argument_specs.yml) state the same
values for plain `ansible-playbook`, as does playbooks/vars/defaults.yml for the plays; tests/test_facts_once.py
asserts they equal these, and fails when a literal of one of them is written anywhere else in macfleet/ or
playbooks/. Imports nothing: every layer, the lab included, may read it.
"""

from __future__ import annotations

from types import MappingProxyType

# exo's HTTP API port: exo's own default (`--api-port`, default 52415: exo src/exo/main.py, exo@v1.0.60 and HEAD;
# research/exo.md), which the inventory's macfleet_exo.port overrides.
EXO_PORT = 52415
# exo's models directory: exo's own default (EXO_DEFAULT_MODELS_DIR unset: ~/.exo/models, exo
# src/exo/shared/constants.py; research/exo.md), which the inventory's macfleet_exo.models_dir overrides.
EXO_MODELS_DIR = "~/.exo/models"
# Where `rollout exo` keeps exo's releases (`current` points at one).
EXO_INSTALL_ROOT = "/opt/exo"
# The LaunchDaemon bootstrap's exo role installs (its plist: /Library/LaunchDaemons/<label>.plist).
EXO_LABEL = "org.macfleet.exo"
EXO_PLIST = f"/Library/LaunchDaemons/{EXO_LABEL}.plist"

# llama.cpp's rpc-server port: its own default (tools/rpc/rpc-server.cpp `-p`, default 50052), which the
# inventory's macfleet_llama.rpc_port overrides.
LLAMA_RPC_PORT = 50052

# llama.cpp's rpc-server LaunchDaemons: job N's label is LLAMA_RPC_LABEL_PREFIX.N (playbooks/roles/llama_rpc).
LLAMA_RPC_LABEL_PREFIX = "org.macfleet.llama-rpc"

# The IP plan's pool for the Thunderbolt links: inside 10/8 but clear of the ranges home routers and offices
# usually hand out (10.0.x, 10.1.x, 10.10.x, 192.168.x, 172.16-31.x used by Docker) and of 100.64/10 (CGNAT,
# Tailscale); the inventory's macfleet_ipplan.pool overrides.
IP_POOL = "10.213.0.0/16"

# pmset values for an always-on inference node (research/ops-anchors.md §4.2); macfleet_power.pmset overrides.
PMSET_DEFAULTS: MappingProxyType[str, int] = MappingProxyType(
    {"sleep": 0, "disksleep": 0, "displaysleep": 10, "womp": 1, "autorestart": 1})

# What the GPU wired-memory limit leaves to macOS when it is "auto" (total memory less this many MB).
WIRED_RESERVE_MB = 16384

# Homebrew's bin directory on Apple silicon (Homebrew's default prefix /opt/homebrew, docs.brew.sh/Installation),
# which a non-interactive SSH session's PATH lacks: the rsync, iperf3 and build tools macfleet runs live there.
HOMEBREW_BIN = "/opt/homebrew/bin"
# curl's exit statuses macfleet tells apart when it reads exo's API on a node (curl(1), "EXIT CODES"): 7 "Failed
# to connect to host" (nothing listens on the port), 28 "Operation timeout".
CURL_REFUSED = 7
CURL_TIMEOUT = 28
