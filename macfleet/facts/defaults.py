"""`defaults read DOMAIN`: a preferences domain as macOS prints it, for the keys doctor judges.

defaults(1): "read domain  Prints all of domain's defaults". The print is the old-style (NeXTSTEP) property-list
text Apple's "Old-Style ASCII Property Lists" describes: a dictionary `{ key = value; ... }`, one `key = value;`
per line at the top level, a key or string value quoted when it holds other than letters, digits and `_$+/:.-`;
a boolean prints as 1 or 0. A domain that does not exist is exit 1 with "Domain DOMAIN does not exist" on stderr.

No real capture of `defaults read /Library/Preferences/com.apple.SoftwareUpdate` from a Mac is in
/work/shared/samples: this parser reads only the top-level `key = value;` lines of that documented shape (nested
arrays and dictionaries are kept as their first line, never judged), and docs/lab.md lists the lab's stand-in as
a guess.
"""

from __future__ import annotations

import re

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts
from macfleet.facts.kinds import AUTO_UPDATE_DOMAINS, COMMERCE, SOFTWARE_UPDATE  # noqa: F401  (importable here)

MISSING_DOMAIN = re.compile(r"Domain \S.* does not exist")
_LINE = re.compile(r'^ {4}"?(?P<key>[^"=\s]+)"?\s*=\s*(?P<value>.*?);?\s*$')


class DefaultsFacts(Facts):
    exists: bool  # False: the domain does not exist (no key set; macOS's own defaults apply)
    values: dict[str, str]  # top-level key -> its printed value ("1"/"0" for a boolean), quotes removed


def parse_defaults_read(text: str, stderr: str = "", rc: int = 0) -> DefaultsFacts:
    """One domain's `defaults read` (stdout), its stderr and exit code."""
    if rc != 0:
        if MISSING_DOMAIN.search(stderr or text):
            return DefaultsFacts(exists=False, values={})
        first = next((t.strip() for t in (stderr or text).splitlines() if t.strip()), "")
        raise FactsParseError("defaults read", "a { key = value; } dictionary, or 'Domain … does not exist'",
                              line=1, found=first[:80])
    body = [t for t in text.splitlines() if t.strip()]
    if not body or body[0].strip() != "{" or body[-1].strip() != "}":
        raise FactsParseError("defaults read", "a { key = value; } dictionary", line=1,
                              found=(body[0].strip() if body else "")[:80])
    values: dict[str, str] = {}
    for line in body[1:-1]:
        if (m := _LINE.match(line)) and not line.startswith("     "):  # top level only (4 spaces)
            values[m.group("key")] = m.group("value").strip().strip('"')
    return DefaultsFacts(exists=True, values=values)
