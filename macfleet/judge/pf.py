"""Whether pf rules let the LAN reach one of exo's ports: pf's evaluation (pf.conf(5), "Packet Filtering": the
last matching rule decides; a matching `quick` rule decides at once; no match passes) run for a connection
attempt from the LAN, read as pfctl prints the rules (facts/pf.py).

The packet judged: a TCP SYN (or a UDP datagram) to PORT, inbound, IPv4 and IPv6, from a LAN host that is in
none of the rules' source lists or tables (those lists are the Thunderbolt networks and the controller that
bootstrap writes), arriving on any interface that is not allowed (not a Thunderbolt port, not lo0): each
interface a rule names, and one no rule names. Where a rule's match cannot be settled from its text (a
destination address, a service-name port, `user`, `tagged`, a source port, a word the reader does not know),
a pass rule is taken as matching and a block rule as not: exo is said closed only when it surely is.
Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal

from macfleet.facts.pf import PfRule, PfRulesFacts

Match = Literal["yes", "no", "maybe"]
OTHER = ""  # an interface no rule names
_PROTO_NUMBERS = {"tcp": "6", "udp": "17"}


def _syn_flags(spec: str) -> Match:
    """`flags X/Y` against a bare SYN: it matches when the SYN's flags masked by Y are exactly X."""
    if spec == "any":
        return "yes"
    want, _, mask = spec.partition("/")
    if not mask or not set(want + mask) <= set("FSRPAUEW"):
        return "maybe"
    return "yes" if set(want) == ({"S"} & set(mask)) else "no"


def rule_matches(rule: PfRule, *, proto: str, port: int, family: str, interface: str,
                 sources_ok: bool = True) -> Match:
    """Whether `rule` matches an inbound `proto` packet to `port` from an untrusted LAN host on `interface`.
    `sources_ok` False: the rules' source lists are not trusted for this port (llama.cpp's rpc-server is for the
    Thunderbolt ports only, not the controller), so a host may be in one."""
    if rule.direction == "out":
        return "no"
    if rule.family is not None and rule.family != family:
        return "no"
    if rule.protos and proto not in rule.protos and _PROTO_NUMBERS.get(proto) not in rule.protos:
        return "no"
    if rule.interface is not None and (rule.interface == interface) == rule.interface_negated:
        return "no"
    out: Match = "yes"
    src = rule.source
    if src.address == "any" and src.negated:
        return "no"
    if src.address != "any" and not src.negated:
        if sources_ok:
            return "no"  # a source list: the LAN host is not in it
        out = "maybe"
    if src.port is not None:
        out = "maybe"
    dst = rule.destination
    if dst.address == "any" and dst.negated:
        return "no"
    if dst.address != "any":
        out = "maybe"  # the node's own address on that interface is not in the rule's text
    if dst.port is not None:
        hit = dst.port.matches(port)
        if hit is False:
            return "no"
        if hit is None:
            out = "maybe"
    for cond in rule.conditions:
        if cond.startswith("flags ") and proto == "tcp":
            flags = _syn_flags(cond.removeprefix("flags "))
            if flags == "no":
                return "no"
            if flags == "maybe":
                out = "maybe"
        elif not cond.startswith("flags "):
            out = "maybe"
    if rule.unknown:
        out = "maybe"
    return out


def deciding_rule(rules: PfRulesFacts, *, proto: str, port: int, family: str, interface: str,
                  sources_ok: bool = True) -> PfRule | None:
    """The rule pf's evaluation ends on for that packet (None: no rule matches, so it passes)."""
    last = None
    for rule in rules.rules:
        m = rule_matches(rule, proto=proto, port=port, family=family, interface=interface, sources_ok=sources_ok)
        if m == "no" or (m == "maybe" and rule.action == "block"):
            continue
        last = rule
        if rule.quick:
            break
    return last


def exposure(rules: PfRulesFacts, port: int, allowed_ifaces: set[str], proto: str = "tcp", *,
             sources_ok: bool = True) -> str | None:
    """Why `proto` `port` is open to the LAN under these rules, or None when every untrusted packet to it ends
    on a block rule. `sources_ok` False: a pass from a source list on any interface is an opening too."""
    named = {r.interface for r in rules.rules if r.interface is not None} - allowed_ifaces
    for interface in (*sorted(named), OTHER):
        for family in ("inet", "inet6"):
            rule = deciding_rule(rules, proto=proto, port=port, family=family, interface=interface,
                                 sources_ok=sources_ok)
            if rule is None:
                return f"the anchor has no rule blocking {proto} {port} for everyone else"
            if rule.action == "pass":
                if rule.interface is not None and not rule.interface_negated:
                    return (f"the anchor lets {proto} {port} in on {rule.interface}, not a Thunderbolt port "
                            f"({rule.text})")
                if rule.source.address != "any" and not rule.source.negated:
                    return (f"the anchor lets {proto} {port} in from {rule.source.address} on any interface, not "
                            f"the Thunderbolt ports only ({rule.text})")
                return f"the anchor lets {proto} {port} in from anywhere ({rule.text})"
    return None
