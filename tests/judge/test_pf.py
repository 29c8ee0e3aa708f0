"""pf's evaluation of exo's port for a packet from the LAN (pf.conf(5): last match decides, `quick` at once, no
match passes), on rules as pfctl prints them. The real listings are judged in tests/facts/test_pf.py."""

from __future__ import annotations

import pytest

from macfleet.facts.pf import parse_pf_rules
from macfleet.judge.pf import exposure

ALLOWED = {"lo0", "en2", "en3"}


def judge(text: str, port: int = 52415, proto: str = "tcp") -> str | None:
    return exposure(parse_pf_rules(text), port, ALLOWED, proto)


@pytest.mark.parametrize(("text", "why"), [
    # closed
    ("block drop in quick proto tcp from any to any port = 52415\n", None),
    ("block drop in all\n", None),  # no direction needed: pf's default block-all, last match
    ("block drop quick proto tcp from any to any port 52000:53000\n", None),  # no direction: both
    ("pass in quick on en2 proto tcp from any to any port = 52415 flags S/SA keep state\n"
     "block drop in quick proto tcp from any to any port = 52415\n", None),
    ("pass in proto tcp from any to any port = 52415 flags S/SA keep state\nblock drop in all\n", None),  # last wins
    ("block drop in quick proto tcp from any to any port 52000 >< 53000\n", None),
    ("pass in quick proto tcp from <macfleet_exo_peers> to any port = 52415 flags S/SA keep state\n"
     "block drop in quick proto tcp to any port = 52415\n", None),  # the lab's shorter listing, read too
    # open
    ("", "no rule blocking tcp 52415"),
    ("block drop in all\npass in proto tcp from any to any port = 52415 flags S/SA keep state\n", "from anywhere"),
    ("block drop in quick inet6 all\n", "no rule blocking"),  # IPv4 still reaches it
    ("block drop in quick on en0 proto tcp from any to any port = 52415\n", "no rule blocking"),  # Wi-Fi en1
    ("pass in quick on ! en2 proto tcp from any to any port = 52415 flags S/SA keep state\nblock drop in all\n",
     "from anywhere"),
    ("pass quick on utun4 all flags S/SA keep state\nblock drop in all\n", "on utun4, not a Thunderbolt port"),
    ("block drop in quick proto tcp from any port = 0 to any port = 52415\n", "no rule blocking"),  # src port 0 only
    ("block drop in quick proto tcp from any to any port != 52415\n", "no rule blocking"),
    ("block drop in quick proto tcp from any to any port = 52415 user = 0\n", "no rule blocking"),  # not sure: open
    ("block drop in quick proto udp from any to any port = 52415\n", "no rule blocking"),
    ("pass in quick proto tcp from ! <macfleet_exo_peers> to any port = 52415 flags S/SA keep state\n"
     "block drop in all\n", "from anywhere"),
    ("pass in quick proto tcp from any to any port = 52415 flags /SA keep state\nblock drop in all\n", None),  # no SYN
])
def test_exposure(text: str, why: str | None) -> None:
    got = judge(text)
    assert (got is None) if why is None else (got is not None and why in got)


def test_udp_port_judged_for_udp() -> None:
    rules = "block drop in quick proto udp from any to any port = 52413\n"
    assert judge(rules, 52413, "udp") is None and judge(rules, 52413, "tcp") is not None


def test_client_networks_the_inventory_lets_in_are_not_an_exposure() -> None:
    """macfleet_exo.clients: a source list the person chose, for exo's API port only; rpc-server's port, judged
    with no source list trusted, is still closed by the block that follows."""
    rules = ("pass in quick proto tcp from <macfleet_exo_clients> to any port = 52415 flags S/SA keep state\n"
             "block drop in quick proto tcp from any to any port = 52415\n"
             "pass in quick on en2 proto tcp from any to any port = 50052 flags S/SA keep state\n"
             "block drop in quick proto tcp from any to any port = 50052\n")
    assert judge(rules) is None
    assert exposure(parse_pf_rules(rules), 50052, ALLOWED, "tcp", sources_ok=False) is None
