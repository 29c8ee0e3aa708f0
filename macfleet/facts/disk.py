"""`df -k PATH`: the free space of the volume holding PATH.

The 1024-block layout's first four columns are POSIX's (Filesystem, 1024-blocks, Used, Available); macOS adds
Capacity, inode columns and the mount point. No capture from a real Mac is in the repository yet: this parser
reads only those four POSIX columns, from the last line, counting from the left after the device name.
"""

from __future__ import annotations

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts


class DfFacts(Facts):
    device: str
    total_kb: int
    used_kb: int
    available_kb: int

    @property
    def available_bytes(self) -> int:
        return self.available_kb * 1024


def parse_df(text: str) -> DfFacts:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2 or not lines[0].startswith("Filesystem") or "1024-blocks" not in lines[0]:
        raise FactsParseError("df -k", "a header `Filesystem 1024-blocks Used Available …` and one volume line",
                              line=1, found=lines[0][:80] if lines else "")
    fields = lines[-1].split()
    try:
        return DfFacts(device=fields[0], total_kb=int(fields[1]), used_kb=int(fields[2]),
                       available_kb=int(fields[3]))
    except (IndexError, ValueError):
        raise FactsParseError("df -k", "device, 1024-blocks, used and available as integers",
                              line=len(lines), found=lines[-1][:80]) from None
