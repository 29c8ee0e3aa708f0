"""pf as `pfctl` prints it: `pfctl -s info` (its status line) and `pfctl [-a ANCHOR] -s rules` (the rules).

The rule listing is read in the grammar pfctl prints rules in (pf.conf(5); pfctl's `print_rule`, OpenBSD
pfctl_parser.c, from which Apple's pfctl descends): `[@N] ACTION [drop|return…] [in|out] [log [(…)]] [quick]
[on [!] IF] [route-to|reply-to|dup-to POOL|fastroute] [inet|inet6] [proto P|{ P … }] (all | from [!] HOST
[port OP] [os "…"] to [!] HOST [port OP]) [user OP] [group OP] [flags X/Y|any] [icmp-type T [code C]] [tos N]
[no|keep|modulate|synproxy state [(…)]] … [label "…"] [tag T] [[!] tagged T] …`, with HOST `any`, an address
or network, `A - B`, `<table>`, `(if[:mod])`, `self`, `no-route`, `urpf-failed` or a `{ … }` list, and port
operators `=`, `!=`, `<`, `<=`, `>`, `>=`, `A >< B`, `A <> B`, `A:B` on numbers or service names.

Every pass/block rule is read into a `PfRule`: what decides whether a packet to one of exo's ports may come in
(action, direction, quick, interface, family, protocols, source, destination and its port), plus any match
condition that narrows it (`user`, `tagged`, `os`…) in `conditions` and any word this reader does not know in
`unknown`: such a rule is still read, never a parse error, and the judge treats what it cannot be sure of as
"may match". Every other line pfctl prints (scrub, nat, rdr, binat, the anchor calls, the closing brace of
an inline anchor, ALTQ's notices, `-v` counters) is kept only as counted non-filter lines. A `pfctl:` error
line (e.g. "DIOCGETRULES: Invalid argument") is pfctl saying it could not list the rules: a parse error, never
"no rules". The held-out set of real listings is tests/fixtures/pf-rules (SOURCES.md there).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts

# ------------------------------------------------------------------------------------------------ -s info


class PfInfoFacts(Facts):
    enabled: bool
    status_line: str


def parse_pf_info(text: str) -> PfInfoFacts:
    """`pfctl -s info`: its first line, `Status: Enabled for … ` or `Status: Disabled`."""
    for line in text.splitlines():
        if m := re.match(r"^Status:\s*(Enabled|Disabled)\b", line):
            return PfInfoFacts(enabled=m.group(1) == "Enabled", status_line=line.split("  ")[0].strip())
    first = next((t.strip() for t in text.splitlines() if t.strip()), "")
    raise FactsParseError("pfctl -s info", "a 'Status: Enabled|Disabled' line", line=1, found=first[:80])


# ------------------------------------------------------------------------------------------------ -s rules

PortOp = Literal["=", "!=", "<", "<=", ">", ">=", "><", "<>", ":"]
PORT_OPS: tuple[str, ...] = ("=", "!=", "<", "<=", ">", ">=", "><", "<>", ":")


class PfPort(Facts):
    """A port match: `op` and its operand(s), each a number or (when pfctl printed a service name) a name."""

    op: PortOp
    first: str
    second: str | None = None

    def matches(self, port: int) -> bool | None:
        """Whether `port` matches; None when an operand is a service name (its number is the Mac's to know)."""
        try:
            a = int(self.first)
            b = int(self.second) if self.second is not None else None
        except ValueError:
            return None
        return {"=": port == a, "!=": port != a, "<": port < a, "<=": port <= a, ">": port > a,
                ">=": port >= a, "><": b is not None and a < port < b, "<>": b is not None and (port < a or port > b),
                ":": b is not None and a <= port <= b}[self.op]


class PfHost(Facts):
    """One side of `from … to …`: `any`, an address or network, `<table>`, `(if)`, a range, a `{ … }` list."""

    negated: bool = False
    address: str = "any"
    port: PfPort | None = None

    @property
    def is_any(self) -> bool:
        return self.address == "any" and not self.negated


class PfRule(Facts):
    action: Literal["pass", "block"]
    direction: Literal["in", "out"] | None  # None: both
    quick: bool
    interface: str | None  # `on IF`; None: every interface
    interface_negated: bool = False
    family: Literal["inet", "inet6"] | None = None
    protos: list[str] = Field(default_factory=list)  # empty: every protocol
    source: PfHost = PfHost()
    destination: PfHost = PfHost()
    conditions: list[str] = Field(default_factory=list)  # what else narrows it (`user = 0`, `tagged T`…)
    unknown: list[str] = Field(default_factory=list)  # words this reader does not know, kept as read
    text: str = ""  # the line as pfctl printed it

    @property
    def proto(self) -> str | None:
        return self.protos[0] if len(self.protos) == 1 else None

    @property
    def port(self) -> int | None:
        """The destination port when the rule names exactly one (`port = N`), else None."""
        p = self.destination.port
        return int(p.first) if p is not None and p.op == "=" and p.first.isdigit() else None


class PfRulesFacts(Facts):
    rules: list[PfRule]
    other_lines: int = 0  # scrub, nat, rdr, anchor calls…: no filter rule of this ruleset


# Any other statement pfctl lists (scrub, nat, nat64, binat, rdr, dummynet, the `*-anchor` calls, `no ...`): a
# lower-case word, no colon. ALTQ's two notices, `}` closing an inline anchor and `-v`'s `[ ... ]` counters too.
_NON_FILTER = re.compile(r"^(?:[a-z][a-z0-9-]*|\}|\[.*|No ALTQ support in kernel|ALTQ related functions disabled)$")
_BLOCK_POLICY = re.compile(r"^(?:drop|return|return-rst(?:\(.*\))?|return-icmp6?(?:\(.*\))?)$")
_FLAG_WORDS = ("fragment", "no-df", "random-id", "allow-opts", "fastroute")
_ONE_ARG = ("min-ttl", "max-mss", "set-tos", "probability", "rtable", "prio", "queue", "tag", "label", "tos",
            "divert-to", "divert-reply", "divert-packet", "received-on", "max-pkt-rate", "once")
_NARROWING = ("tos", "probability", "received-on", "once", "prio")


def tokens(line: str) -> list[str]:
    """Words as pfctl prints them: a quoted string, a `( … )` group and a `{ … }` list are one word each."""
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    quote = False
    for c in line:
        if quote:
            cur.append(c)
            quote = c != '"'
        elif c == '"':
            cur.append(c)
            quote = True
        elif c in "({":
            depth += 1
            cur.append(c)
        elif c in ")}" and depth:
            depth -= 1
            cur.append(c)
        elif c.isspace() and not depth:
            if cur:
                out.append("".join(cur))
                cur = []
        else:
            cur.append(c)
    if cur:
        out.append("".join(cur))
    return out


class _Words:
    def __init__(self, words: list[str]):
        self.words, self.i = words, 0

    def peek(self, ahead: int = 0) -> str | None:
        j = self.i + ahead
        return self.words[j] if j < len(self.words) else None

    def take(self) -> str | None:
        w = self.peek()
        self.i += w is not None
        return w


def _op_spec(w: _Words) -> PfPort | None:
    """`= N`, `!= N`, `< N` … or `A >< B`, `A <> B`, `A:B` (pfctl's print_op), or None when absent."""
    first = w.peek()
    if first is None:
        return None
    if first in PORT_OPS and first != ":" and w.peek(1) is not None:
        w.take()
        return PfPort(op=first, first=w.take() or "")  # type: ignore[arg-type]
    if w.peek(1) in ("><", "<>") and w.peek(2) is not None:
        a, op, b = w.take(), w.take(), w.take()
        return PfPort(op=op, first=a or "", second=b)  # type: ignore[arg-type]
    if re.fullmatch(r"[\w-]+:[\w-]+", first):
        a, _, b = first.partition(":")
        w.take()
        return PfPort(op=":", first=a, second=b)
    return None


def _host(w: _Words) -> tuple[PfHost, list[str]]:
    negated = w.peek() == "!"
    if negated:
        w.take()
    address = w.take() or "any"
    if address.startswith("!") and len(address) > 1:  # `!<table>` written without the space
        negated, address = True, address[1:]
    if w.peek() == "-" and w.peek(1) is not None:  # an address range `A - B`
        w.take()
        address = f"{address} - {w.take()}"
    port = None
    extra: list[str] = []
    if w.peek() == "port":
        w.take()
        port = _op_spec(w)
        if port is None:
            extra.append(f"port {w.take() or ''}".strip())
    if w.peek() == "os" and w.peek(1) is not None:
        w.take()
        extra.append(f"os {w.take()}")
    return PfHost(negated=negated, address=address, port=port), extra


def _filter_rule(words: list[str], text: str) -> PfRule:
    w = _Words(words)
    action = w.take()
    out: dict = {"action": action, "direction": None, "quick": False, "interface": None, "text": text}
    conditions: list[str] = []
    unknown: list[str] = []
    if action == "block" and w.peek() is not None and _BLOCK_POLICY.match(w.peek() or ""):
        w.take()
    while (word := w.take()) is not None:
        if word in ("in", "out"):
            out["direction"] = word
        elif word == "log":
            if (w.peek() or "").startswith("("):
                w.take()
        elif word == "quick":
            out["quick"] = True
        elif word == "on":
            if w.peek() == "!":
                w.take()
                out["interface_negated"] = True
            out["interface"] = w.take()
        elif word in ("route-to", "reply-to", "dup-to"):
            w.take()
        elif word in ("inet", "inet6"):
            out["family"] = word
        elif word == "proto":
            p = w.take() or ""
            out["protos"] = p.strip("{}").replace(",", " ").split() if p.startswith("{") else [p]
        elif word == "all":
            pass
        elif word == "from":
            out["source"], extra = _host(w)
            conditions += extra
        elif word == "to":
            out["destination"], extra = _host(w)
            conditions += extra
        elif word in ("user", "group"):
            spec = _op_spec(w)
            what = f"{spec.op} {spec.first}" if spec is not None else (w.take() or "")
            conditions.append(f"{word} {what}")
        elif word == "flags":
            conditions.append(f"flags {w.take() or ''}")
        elif word in ("icmp-type", "icmp6-type"):
            what = f"{word} {w.take() or ''}"
            if w.peek() == "code":
                w.take()
                what += f" code {w.take() or ''}"
            conditions.append(what)
        elif word in ("no", "keep", "modulate", "synproxy") and w.peek() == "state":
            w.take()
            if (w.peek() or "").startswith("("):
                w.take()
        elif word == "!" and w.peek() == "tagged":
            w.take()
            conditions.append(f"! tagged {w.take() or ''}")
        elif word == "tagged":
            conditions.append(f"tagged {w.take() or ''}")
        elif word in _ONE_ARG:
            arg = w.take() or ""
            if word in _NARROWING:
                conditions.append(f"{word} {arg}")
        elif word in _FLAG_WORDS:
            pass
        else:
            unknown.append(word)
    return PfRule(**out, conditions=conditions, unknown=unknown)


def parse_pf_rules(text: str) -> PfRulesFacts:
    """`pfctl [-a ANCHOR] -s rules`: its pass/block rules in order (an empty listing: no rules loaded)."""
    rules: list[PfRule] = []
    other = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("pfctl:"):
            raise FactsParseError("pfctl -a ANCHOR -s rules", "pf rules (pfctl printed an error instead)", line=n,
                                  found=line[:80])
        words = tokens(line)
        if words and re.fullmatch(r"@\d+", words[0]):  # `-v` prints each rule's number first
            words = words[1:]
        if not words:
            continue
        if words[0] in ("pass", "block"):
            rules.append(_filter_rule(words, line))
        elif _NON_FILTER.match(words[0]) or _NON_FILTER.match(line):
            other += 1
        else:
            raise FactsParseError("pfctl -a ANCHOR -s rules", "pf rules as pfctl prints them ('pass …', "
                                  "'block …', 'anchor …', 'scrub …', 'nat …', 'rdr …')", line=n, found=line[:80])
    return PfRulesFacts(rules=rules, other_lines=other)
