"""`netstat -an -p tcp` on macOS: every TCP socket, listening ones included, with its local address.

The BSD layout (real captures in tests/fixtures/captures/netstat-listen/): an optional `Active Internet
connections (including servers)` title, the header `Proto Recv-Q Send-Q  Local Address  Foreign Address
(state)` (with `-v`, more columns follow the state), then one row per socket. An address is written
`a.b.c.d.port` (IPv6 too: the port after the LAST dot), `*.port` for every address, `*.*` for no peer; the
protocol is `tcp4`, `tcp6` or `tcp46` (one socket for both families). Reporters' `#` comments are skipped.
"""

from __future__ import annotations

import re

from pydantic import Field

from macfleet.facts._common import Facts, fail, guarded, is_elision, lines_for, nonblank

KIND = "netstat-listen"
_PROTO = re.compile(r"^tcp(?:4|6|46)?$")
_TRAILING_COMMENT = re.compile(r"\s+#.*$")


class TcpSocket(Facts):
    proto: str  # tcp4 | tcp6 | tcp46
    local_address: str  # "*" = every address of the node
    local_port: int | None  # None: "*"
    foreign: str
    state: str | None  # LISTEN, ESTABLISHED... (None when the row has no state column)


class TcpSocketsFacts(Facts):
    sockets: list[TcpSocket]
    notes: list[str] = Field(default_factory=list)

    def listening(self, port: int) -> list[TcpSocket]:
        return [s for s in self.sockets if s.state == "LISTEN" and s.local_port == port]


def _split_address(text: str) -> tuple[str, int | None] | None:
    addr, dot, port = text.rpartition(".")
    if not dot or not addr:
        return None
    if port == "*":
        return addr, None
    if not port.isdigit() or int(port) > 65535:
        return None
    return addr, int(port)


@guarded(KIND)
def parse_netstat_listen(text: str) -> TcpSocketsFacts:
    """Every TCP row; the title and header lines are checked, anything else is refused with its line."""
    sockets: list[TcpSocket] = []
    notes: list[str] = []
    for no, raw in nonblank(lines_for(KIND, text)):
        line = raw.strip()
        if line.startswith("#") or is_elision(line) or line.startswith("Active Internet connections"):
            continue
        if line.startswith("Active ") or line.startswith("Address "):
            notes.append(f"line {no}: another socket family's table follows; not read")
            break
        if line.startswith("Proto"):
            if line.split()[:3] != ["Proto", "Recv-Q", "Send-Q"]:
                raise fail(KIND, "the header `Proto Recv-Q Send-Q  Local Address  Foreign Address  (state)`", no,
                           line)
            continue
        fields = _TRAILING_COMMENT.sub("", line).split()
        if fields and fields[0].startswith("udp"):
            notes.append(f"line {no}: a UDP row; skipped")
            continue
        if len(fields) < 5 or not _PROTO.match(fields[0]) or not (fields[1].isdigit() and fields[2].isdigit()):
            raise fail(KIND, "a row `tcp4|tcp6|tcp46 Recv-Q Send-Q local foreign [state]`", no, line)
        local = _split_address(fields[3])
        if local is None:
            raise fail(KIND, "a local address `a.b.c.d.port` or `*.port`", no, fields[3])
        state = fields[5] if len(fields) > 5 and re.fullmatch(r"[A-Z_0-9]+", fields[5]) else None
        sockets.append(TcpSocket(proto=fields[0], local_address=local[0], local_port=local[1], foreign=fields[4],
                                 state=state))
    return TcpSocketsFacts(sockets=sockets, notes=notes)
