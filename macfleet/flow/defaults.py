"""Defaults the command line shows in its help, kept where importing them costs nothing (`rollout --help`
must not load the flows: tests/test_cli_help.py). The flows take them from here."""

ROLLOUT_KEEP = 3  # releases kept on each node
EXO_HEALTH_TIMEOUT_S = 90.0  # how long rollout's health gate waits for exo
LLAMA_HEALTH_TIMEOUT_S = 30.0  # how long llama-rpc's health gate waits for rpc-server
