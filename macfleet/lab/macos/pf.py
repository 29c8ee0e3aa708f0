"""A `pfctl` stand-in that really filters: the rules of an anchor become an nftables table in the node's
network namespace, so a packet the anchor blocks is dropped there.

It understands the subset of pf's grammar macfleet writes (tables, `pass in quick [on IF] proto P [from
<TABLE>] to any port { … }`, `block in quick proto P to any port { … }`, comments), with the verbs
`-s info`, `-a ANCHOR -s rules`, `[-n] [-E] -a ANCHOR -f FILE`, `-E`, `-d`. Like pf, its state is runtime
only (boot.json): at boot pf is off until a LaunchDaemon loads the anchor again. `lo0` is the node's `lo`.
Status and error lines follow pfctl's; the rule listing is simplified (docs/lab.md).
"""

from __future__ import annotations

import os
import sys
import time

from .common import Node, err, is_root

NFT = "/usr/sbin/nft"
TABLE = "macfleet_pf"
# The anchor syntax the lab understands (compiled in parse(): re's import would cost every pfctl call)
_TABLE_DEF = r"^table <(?P<name>\w+)> const \{ (?P<items>[0-9A-Fa-f:./, ]+) \}$"
_RULE = (r"^(?P<action>pass|block) in quick(?: on (?P<iface>[a-z]+[0-9]+))? proto (?P<proto>tcp|udp)"
         r"(?: from <(?P<table>\w+)>)? to any port \{ (?P<ports>[0-9, ]+) \}$")
_ADDR = r"^[0-9A-Fa-f:.]+(/[0-9]{1,3})?$"


class PfSyntaxError(Exception):
    pass


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - the rule grammar (tables, `pass|block in quick [on IF] proto P [from <T>] to any port {…}`): pf.conf(5)
def parse(text: str, source: str) -> list[dict]:
    import re

    table_def, rule, addr = re.compile(_TABLE_DEF), re.compile(_RULE), re.compile(_ADDR)
    tables: dict[str, list[str]] = {}
    rules: list[dict] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        t, r = table_def.match(line), rule.match(line)
        if t:
            items = [i.strip() for i in t.group("items").split(",") if i.strip()]
            if not all(addr.match(i) for i in items):
                raise PfSyntaxError(f"{source}:{number}: syntax error")
            tables[t.group("name")] = items
        elif r:
            if r.group("table") and r.group("table") not in tables:
                raise PfSyntaxError(f"{source}:{number}: table <{r.group('table')}> is not defined")
            ports = [int(p) for p in r.group("ports").replace(",", " ").split()]
            if not ports or not all(0 < p < 65536 for p in ports):
                raise PfSyntaxError(f"{source}:{number}: syntax error")
            rules.append({"action": r.group("action"), "iface": r.group("iface"), "proto": r.group("proto"),
                          "sources": tables.get(r.group("table") or ""), "table": r.group("table"),
                          "ports": ports})
        else:
            raise PfSyntaxError(f"{source}:{number}: syntax error")
    return rules


def _nft_rules(rules: list[dict]) -> list[str]:
    out = []
    for r in rules:
        match = []
        if r["iface"]:
            match.append(f'iifname "{"lo" if r["iface"] == "lo0" else r["iface"]}"')
        verdict = "accept" if r["action"] == "pass" else "drop"
        dport = f"{r['proto']} dport {{ {', '.join(map(str, r['ports']))} }}"
        if r["sources"] is None:
            out.append(" ".join([*match, dport, verdict]))
            continue
        v4 = [s for s in r["sources"] if ":" not in s]
        v6 = [s for s in r["sources"] if ":" in s]
        for family, addrs in (("ip", v4), ("ip6", v6)):
            if addrs:
                out.append(" ".join([*match, f"{family} saddr {{ {', '.join(addrs)} }}", dport, verdict]))
    return out


def apply_nft(anchors: dict[str, list[dict]], enabled: bool) -> str | None:
    """Replace the node's table with the loaded anchors' rules (none when pf is off); an error text or None."""
    lines = [f"table inet {TABLE} {{}}", f"delete table inet {TABLE}"]
    if enabled:
        body = [rule for name in sorted(anchors) for rule in _nft_rules(anchors[name])]
        lines += [f"table inet {TABLE} {{", "  chain input {",
                  "    type filter hook input priority 0; policy accept;", *(f"    {b}" for b in body), "  }", "}"]
    import subprocess

    p = subprocess.run([NFT, "-f", "-"], input="\n".join(lines) + "\n", capture_output=True, text=True)
    if p.returncode != 0:
        return p.stderr.strip() or "nft failed"
    return None


# - GUESS: `-s rules`' listing, one line per port (pfctl expands lists; docs/lab.md)
def _listing(rules: list[dict]) -> str:
    out = []
    for r in rules:
        on = f" on {r['iface']}" if r["iface"] else ""
        src = f" from <{r['table']}>" if r["table"] else ""
        for port in r["ports"]:
            extra = " flags S/SA keep state" if r["action"] == "pass" and r["proto"] == "tcp" else (
                " keep state" if r["action"] == "pass" else "")
            out.append(f"{r['action']} {'drop ' if r['action'] == 'block' else ''}in quick{on} proto {r['proto']}"
                       f"{src} to any port = {port}{extra}")
    return "".join(f"{line}\n" for line in out)


def _args(args: list[str]) -> dict:
    opts: dict = {"n": False, "E": False, "d": False, "a": None, "f": None, "s": None}
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-n", "-E", "-d"):
            opts[a[1]] = True
        elif a in ("-a", "-f", "-s") and i + 1 < len(args):
            opts[a[1]] = args[i + 1]
            i += 1
        else:
            raise PfSyntaxError(f"pfctl: illegal option -- {a.lstrip('-')[:1] or a}")
        i += 1
    return opts


# - verbs `-s info`, `-a ANCHOR -s rules`, `[-n] [-E] -a ANCHOR -f FILE`, `-E`, `-d`: pfctl(8); the `Status:`
#   line of `-s info`: GUESS (docs/lab.md); pf off at boot until a LaunchDaemon enables it: GUESS; `-E`'s
#   token outliving pfctl: xnu bsd/net/pf_ioctl.c generate_token (reviews-2026-12/real-mac.md)
def pfctl(node: Node, args: list[str]) -> int:
    try:
        o = _args(args)
    except PfSyntaxError as e:
        err(f"{e}\nusage: pfctl [-AdeghMmNnOPqRrvz] [-a anchor] [-f file] [-s modifier]")
        return 1
    if not is_root() and not (o["n"] and o["f"]):
        err("pfctl: /dev/pf: Permission denied")
        return 1
    if o["f"]:
        return _load(node, o)
    if o["s"] == "info":
        boot = node.boot
        since = boot.get("pf_enabled_at")
        if since:
            up = int(time.time() - since)
            status = f"Enabled for {up // 86400} days {up % 86400 // 3600:02d}:{up % 3600 // 60:02d}:{up % 60:02d}"
        else:
            status = "Disabled"
        sys.stdout.write(f"Status: {status:<36}Debug: Urgent\n\nState Table                          Total"
                         "             Rate\n  current entries                        0               \n")
        return 0
    if o["s"] == "rules":
        sys.stdout.write(_listing((node.boot.get("pf_anchors") or {}).get(o["a"] or "", [])))
        return 0
    if o["E"] or o["d"]:
        return _enable(node, o["E"])
    err("pfctl: only -s info|rules, -a ANCHOR -f FILE, -n, -E and -d are simulated by the macfleet lab")
    return 1


def _load(node: Node, o: dict) -> int:
    try:
        with open(o["f"]) as f:
            rules = parse(f.read(), o["f"])
    except OSError as e:
        err(f"pfctl: {o['f']}: {e.strerror}")
        return 1
    except PfSyntaxError as e:
        err(str(e))
        err("pfctl: Syntax error in config file: pf rules not loaded")
        return 1
    if o["n"]:
        return 0
    anchor = o["a"] or ""
    state: dict = {}

    def mutate(b: dict) -> None:
        b.setdefault("pf_anchors", {})[anchor] = rules
        if o["E"] and not b.get("pf_enabled_at"):
            b["pf_enabled_at"] = time.time()
        state.update(b)

    node.update("boot", mutate)
    problem = apply_nft(state.get("pf_anchors") or {}, bool(state.get("pf_enabled_at")))
    if problem:
        err(f"pfctl: {problem}")
        return 1
    if o["E"]:
        err(f"No ALTQ support in kernel\nALTQ related functions disabled\npf enabled\nToken : {os.getpid()}")
    return 0


def _enable(node: Node, on: bool) -> int:
    state: dict = {}

    def mutate(b: dict) -> None:
        b["pf_enabled_at"] = (b.get("pf_enabled_at") or time.time()) if on else None
        state.update(b)

    node.update("boot", mutate)
    problem = apply_nft(state.get("pf_anchors") or {}, on)
    if problem:
        err(f"pfctl: {problem}")
        return 1
    err("No ALTQ support in kernel\nALTQ related functions disabled\n" + ("pf enabled" if on else "pf disabled"))
    return 0


def reset_at_boot() -> None:
    """pf is runtime state: a booting node starts with no rules (its LaunchDaemon loads them again)."""
    apply_nft({}, False)
