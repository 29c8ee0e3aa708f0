"""Doctor's small probes: `date -u +%s`, `softwareupdate --list`, and `ping -c 1`
(pf's `pfctl -s info` and `pfctl -a ANCHOR -s rules`: facts/pf.py, re-exported here).

No real capture of these commands from a Mac is in the repository yet. The parsers read only the lines whose
shape is stable across macOS releases and public reports (the epoch number; softwareupdate's `* Label:` and
`Title:` lines or its "No new software available."; ping's "N packets transmitted, M packets received"
summary), and refuse anything else with FactsParseError. docs/lab.md lists the lab's stand-ins for them as guesses.
"""

from __future__ import annotations

import re

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts
from macfleet.facts.pf import (  # noqa: F401  pf's parsers live in facts/pf.py; still importable from here
    PfInfoFacts,
    PfRule,
    PfRulesFacts,
    parse_pf_info,
    parse_pf_rules,
)

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

    @property
    def build(self) -> str | None:
        """The build a macOS update installs: the label's last `-` part (`macOS Tahoe 26.2-25C56` -> 25C56;
        `macOS Big Sur 11.1 Beta 2-20C5061b` -> 20C5061b, tests/fixtures/probes/public), else None."""
        m = _LABEL_BUILD.search(self.label)
        return m.group(1) if m and self.is_macos else None


class UpdatesFacts(Facts):
    pending: list[PendingUpdate]


_LABEL_BUILD = re.compile(r"-(\d{2}[A-Z]\d{1,5}[a-z]?)$")
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
