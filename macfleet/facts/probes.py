"""Doctor's small probes: `date -u +%s`, `softwareupdate --list`, `pfctl -s info`, `pfctl -a ANCHOR -s rules`
and `ping -c 1`.

No real capture of these commands from a Mac is in the repository yet. The parsers read only the lines whose
shape is stable across macOS releases and public reports (the epoch number; softwareupdate's `* Label:` and
`Title:` lines or its "No new software available."; pfctl's `Status:` line and its rule listing as pf.conf(5)
writes rules; ping's "N packets transmitted, M packets received" summary), and refuse anything else with
FactsParseError. docs/lab.md lists the lab's stand-ins for them as guesses.
"""

from __future__ import annotations

import re

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts

# ------------------------------------------------------------------------------------------------ date


class EpochFacts(Facts):
    epoch_s: int


def parse_epoch(text: str) -> EpochFacts:
    """`date -u +%s`: one integer, the seconds since 1970 by the node's clock."""
    body = [t.strip() for t in text.splitlines() if t.strip()]
    if len(body) != 1 or not re.fullmatch(r"\d{9,11}", body[0]):
        raise FactsParseError("date -u +%s", "one line with the seconds since 1970", line=1,
                              found=(body[0] if body else "")[:80])
    return EpochFacts(epoch_s=int(body[0]))


# --------------------------------------------------------------------------------------- softwareupdate


class PendingUpdate(Facts):
    label: str
    title: str | None = None
    version: str | None = None
    restart: bool = False  # "Action: restart"

    @property
    def is_macos(self) -> bool:
        return self.label.startswith("macOS") or (self.title or "").startswith("macOS")


class UpdatesFacts(Facts):
    pending: list[PendingUpdate]


_LABEL = re.compile(r"^\s*\*\s*Label:\s*(?P<label>.+?)\s*$")
_TITLE = re.compile(r"^\s*Title:\s*(?P<rest>.+?)\s*$")


def parse_softwareupdate_list(text: str) -> UpdatesFacts:
    """`softwareupdate --list` (stdout and stderr together: macOS prints its progress lines on stderr)."""
    pending: list[PendingUpdate] = []
    for line in text.splitlines():
        if m := _LABEL.match(line):
            pending.append(PendingUpdate(label=m.group("label")))
        elif (m := _TITLE.match(line)) and pending and pending[-1].title is None:
            fields = dict(_title_fields(m.group("rest")))
            last = pending[-1]
            pending[-1] = last.model_copy(update={
                "title": fields.get("", m.group("rest")), "version": fields.get("Version"),
                "restart": fields.get("Action", "").lower() == "restart"})
    if pending:
        return UpdatesFacts(pending=pending)
    if re.search(r"No new software available\.", text):
        return UpdatesFacts(pending=[])
    first = next((t.strip() for t in text.splitlines() if t.strip()), "")
    raise FactsParseError("softwareupdate --list", "'* Label: …' lines or 'No new software available.'",
                          line=1, found=first[:80])


def _title_fields(rest: str) -> list[tuple[str, str]]:
    """`macOS Tahoe 26.2, Version: 26.2, Size: 3693075KiB, Recommended: YES, Action: restart,` → the title
    under "" and each `Key: value`."""
    out = []
    for i, part in enumerate(p.strip() for p in rest.split(",")):
        if not part:
            continue
        key, sep, value = part.partition(":")
        out.append((key.strip(), value.strip()) if sep and i > 0 else ("", part))
    return out


# ------------------------------------------------------------------------------------------------- pf


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


class PfRule(Facts):
    action: str  # pass | block
    interface: str | None  # `on IF`; None: every interface
    proto: str | None
    source: str  # "any", an address or network, or "<table>"
    port: int | None  # `port = N`; None: every port


class PfRulesFacts(Facts):
    rules: list[PfRule]


_PF_RULE = re.compile(
    r"^(?P<action>pass|block)(?: (?:drop|return))? in(?: log)?(?: quick)?(?: on (?P<iface>\S+))?"
    r"(?: inet6?)?(?: proto (?P<proto>\w+))?"
    r"(?: all\b| from (?P<src>\S+)(?: port = \S+)? to \S+(?: port = (?P<port>\d+))?\b"
    r"| to \S+(?: port = (?P<port2>\d+))?\b)")


def parse_pf_rules(text: str) -> PfRulesFacts:
    """`pfctl -a ANCHOR -s rules`: the anchor's inbound rules, one a line (empty: no rules loaded)."""
    rules = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("No ALTQ") or line.startswith("ALTQ"):
            continue
        m = _PF_RULE.match(line)
        if not m:
            if line.startswith(("pass out", "block out", "anchor", "scrub", "nat", "rdr")):
                continue  # not an inbound filter rule: no bearing on who may reach exo
            raise FactsParseError("pfctl -a ANCHOR -s rules", "pf rules such as 'pass in quick on en2 proto tcp "
                                  "from any to any port = 52415'", line=n, found=line[:80])
        rules.append(PfRule(action=m.group("action"), interface=m.group("iface"), proto=m.group("proto"),
                            source=m.group("src") or "any", port=_port(m)))
    return PfRulesFacts(rules=rules)


def _port(m: re.Match[str]) -> int | None:
    port = m.group("port") or m.group("port2")
    return int(port) if port else None


# ----------------------------------------------------------------------------------------------- ping


class PingFacts(Facts):
    transmitted: int
    received: int
    rtt_ms: float | None = None


def parse_ping(text: str) -> PingFacts:
    """`ping -c N HOST`: the summary line `N packets transmitted, M packets received, …` (BSD ping)."""
    m = re.search(r"^(\d+) packets transmitted, (\d+) (?:packets )?received", text, re.MULTILINE)
    if not m:
        first = next((t.strip() for t in text.splitlines() if t.strip()), "")
        raise FactsParseError("ping", "'N packets transmitted, M packets received'", line=1, found=first[:80])
    rtt = re.search(r"= [\d.]+/([\d.]+)/", text)
    return PingFacts(transmitted=int(m.group(1)), received=int(m.group(2)),
                     rtt_ms=float(rtt.group(1)) if rtt else None)
