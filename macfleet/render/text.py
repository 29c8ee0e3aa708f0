"""Text read from a Mac, a file or a flag, made safe to show: never rich markup, never a terminal control.

Every renderer puts such text through `text()` (a rich Text, which rich never parses as markup) or, where a
string is built with deliberate markup around it, `markup()`. Control characters (ESC and the rest of C0/C1,
DEL) and the Unicode bidirectional overrides that can make a line read differently from what it is are
replaced by U+FFFD, so the reader sees that something was there and the terminal never acts on it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

# rich is imported when text is first made for it: a `--json` run dials its Macs before paying for rich.
if TYPE_CHECKING:
    from rich.text import Text

# C0 controls except newline (tab becomes a space below), DEL, C1 controls, and the bidi embedding /
# override / isolate characters (the "Trojan Source" trick, CVE-2021-42574).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
REPLACEMENT = "\ufffd"


def plain(value: Any) -> str:
    """`value` as a string with every terminal control replaced; newlines are kept, tabs become spaces."""
    s = value if isinstance(value, str) else str(value)
    return _UNSAFE.sub(REPLACEMENT, s.replace("\t", " "))


def text(value: Any, style: str = "") -> Text:
    """`value` as a rich Text: shown as it is (brackets included), with terminal controls replaced."""
    from rich.text import Text

    return Text(plain(value), style=style)


def markup(value: Any) -> str:
    """`value` to be put inside a string that carries deliberate rich markup (`f"[red]{markup(x)}[/red]"`)."""
    from rich.markup import escape

    return escape(plain(value))
