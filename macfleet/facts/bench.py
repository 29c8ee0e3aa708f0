"""What `bench links` reads from a node: iperf3's `-J` document (a `--bidir` run) and ping's summary line.

iperf3 writes the same JSON on macOS (Homebrew) and Linux (Debian). In a `--bidir` run from the client,
`end.sum_received` is what arrived at the server (client → server) and `end.sum_received_bidir_reverse` what
arrived back at the client (server → client): the receiver's figures, not what the sender pushed into its buffer.
"""

from __future__ import annotations

import json
import re

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts

IPERF3_COMMAND = "iperf3 -c … --bidir -J"
PING_COMMAND = "ping -q -c N -S SRC DST"


class Iperf3Result(Facts):
    version: str | None = None
    forward_bps: float | None = None  # client → server, as received
    reverse_bps: float | None = None  # server → client, as received
    error: str | None = None  # iperf3's own "error" field (e.g. "unable to connect to server: Connection refused")


class PingSummary(Facts):
    transmitted: int
    received: int
    avg_ms: float | None = None  # None when no reply came back
    min_ms: float | None = None
    max_ms: float | None = None


def _bps(end: dict, key: str) -> float | None:
    value = (end.get(key) or {}).get("bits_per_second")
    return float(value) if isinstance(value, int | float) and value >= 0 else None


def parse_iperf3_json(text: str) -> Iperf3Result:
    try:
        doc = json.loads(text)
    except ValueError:
        first = text.strip().splitlines()[0][:80] if text.strip() else ""
        raise FactsParseError(IPERF3_COMMAND, "a JSON document", found=first or None) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("end", {}), dict):
        raise FactsParseError(IPERF3_COMMAND, "a JSON object with an `end` object")
    start = doc.get("start") if isinstance(doc.get("start"), dict) else {}
    end = doc.get("end") or {}
    error = doc.get("error")
    return Iperf3Result(version=start.get("version") if isinstance(start.get("version"), str) else None,
                        forward_bps=_bps(end, "sum_received"), reverse_bps=_bps(end, "sum_received_bidir_reverse"),
                        error=str(error) if error else None)


_COUNTS = re.compile(r"^(\d+) packets transmitted, (\d+) (?:packets )?received", re.M)
# macOS / BSD: "round-trip min/avg/max/stddev = a/b/c/d ms"; Linux iputils: "rtt min/avg/max/mdev = a/b/c/d ms"
_RTT = re.compile(r"^(?:round-trip|rtt) min/avg/max/(?:stddev|mdev) = ([\d.]+)/([\d.]+)/([\d.]+)/[\d.]+ ms", re.M)


def parse_ping(text: str) -> PingSummary:
    counts = _COUNTS.search(text)
    if counts is None:
        raise FactsParseError(PING_COMMAND, "an `N packets transmitted, M packets received` line")
    rtt = _RTT.search(text)
    lo, avg, hi = (float(x) for x in rtt.groups()) if rtt else (None, None, None)
    return PingSummary(transmitted=int(counts[1]), received=int(counts[2]), avg_ms=avg, min_ms=lo, max_ms=hi)
