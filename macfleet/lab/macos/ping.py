"""`ping` with macOS flags and output (-c count, -i wait, -t timeout, -W waittime ms, -q, -s size, -S src, -o).

Uses an unprivileged ICMP datagram socket (the node's init opens net.ipv4.ping_group_range in its
namespace). Exit 0 when any reply came back, 2 when none, 68 for an unknown host, 64 for bad usage.
"""

from __future__ import annotations

# _socket, not socket: socket.py's import (enum, selectors) costs more than the rest of a call
import _socket as socket
import math
import os
import select
import struct
import sys
import time

from .common import err


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def _split_attached(args: list[str]) -> list[str]:
    """BSD getopt: `-c1` is `-c 1`, `-qc1` is `-q -c 1`."""
    out: list[str] = []
    for a in args:
        if a.startswith("-") and len(a) > 2 and not a[1].isdigit():
            j = 1
            while j < len(a):
                c = a[j]
                if c in "citWsS":
                    out.append("-" + c)
                    if j + 1 < len(a):
                        out.append(a[j + 1:])
                    break
                out.append("-" + c)
                j += 1
        else:
            out.append(a)
    return out


USAGE = "usage: ping [-c count] [-i wait] [-t timeout] [-W waittime] [-s packetsize] [-S src_addr] host"
# flag -> (option, how its value is read); flags with no value set the option to True
VALUED = {"-c": ("count", int), "-i": ("interval", float), "-t": ("timeout", float), "-W": ("wait_ms", int),
          "-s": ("size", int), "-S": ("src", str)}
FLAGS = {"-q": "quiet", "-o": "once", "-n": None, "-D": None, "-Q": None}


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - flags -c -i -t -W -q -s -S -o and the usage line: ping(8) (macOS)
def _options(args: list[str]) -> dict | int:
    """The options as a dict, or the exit code of a usage error (already reported)."""
    opts: dict = {"count": None, "interval": 1.0, "timeout": None, "wait_ms": 10000, "quiet": False, "size": 56,
                  "src": None, "once": False, "host": None}
    args = _split_attached(args)
    i = 0
    try:
        while i < len(args):
            a = args[i]
            if a in VALUED:
                key, read = VALUED[a]
                opts[key] = read(args[i + 1])
                i += 1
            elif a in FLAGS:
                if FLAGS[a]:
                    opts[FLAGS[a]] = True
            elif a.startswith("-"):
                err(f"ping: invalid option -- {a.lstrip('-')[:1]}")
                return 64
            else:
                opts["host"] = a
            i += 1
    except (IndexError, ValueError):
        err(USAGE)
        return 64
    if opts["host"] is None:
        err(USAGE)
        return 64
    return opts


def _open(addr_src: str | None) -> socket.socket | int:
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError as e:
        err(f"ping: socket: {e.strerror}")
        return 71
    if addr_src:
        try:
            sock.bind((addr_src, 0))
        except OSError:
            err("ping: bind: Can't assign requested address")
            return 64
    return sock


def _send(sock: socket.socket, addr: str, ident: int, seq: int, size: int) -> None:
    payload = struct.pack("!d", time.monotonic()) + bytes(max(0, size - 8))
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    pkt = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, seq) + payload
    try:
        sock.sendto(pkt, (addr, 0))
    except OSError as e:
        err(f"ping: sendto: {e.strerror}")


def _reply(sock: socket.socket) -> tuple[int, int, float] | None:
    """(length, icmp_seq, round trip in ms) of an echo reply, or None for anything else."""
    data, _peer = sock.recvfrom(65535)
    if len(data) < 16 or data[0] != 0:
        return None
    t0 = struct.unpack("!d", data[8:16])[0]
    return len(data), struct.unpack("!H", data[6:8])[0], (time.monotonic() - t0) * 1000


def _exchange(sock: socket.socket, addr: str, o: dict, rtts: list[float]) -> None:
    """Send and receive as the options say: o["sent"] counts what was sent, RTTS gets each reply's round trip
    (both stay right when Ctrl-C interrupts)."""
    count, timeout, wait_s = o["count"], o["timeout"], o["wait_ms"] / 1000
    start = next_send = last_sent = time.monotonic()
    sent = 0
    ident = os.getpid() & 0xFFFF
    while True:
        now = time.monotonic()
        if timeout is not None and now - start >= timeout:
            return
        if count is not None and sent >= count and (len(rtts) >= sent or now - last_sent >= wait_s):
            return
        if (count is None or sent < count) and now >= next_send:
            _send(sock, addr, ident, sent, o["size"])
            sent = o["sent"] = sent + 1
            last_sent, next_send = now, now + o["interval"]
        wait = 0.05 if count is not None and sent >= count else max(0.0, min(next_send - time.monotonic(), 0.2))
        if not select.select([sock], [], [], wait)[0]:
            continue
        got = _reply(sock)
        if got is None:
            continue
        length, rseq, ms = got
        rtts.append(ms)
        if not o["quiet"]:
            sys.stdout.write(f"{length} bytes from {addr}: icmp_seq={rseq} ttl=64 time={ms:.3f} ms\n")
            sys.stdout.flush()
        if o["once"]:
            return


# - reply and summary lines: tests/fixtures/probes/public/ping_macos12_one.txt, ping_osx_five.txt; exit 0 with
#   a reply, 2 without, 68 unknown host, 64 usage: ping(8) EXIT STATUS
def ping(args: list[str]) -> int:
    o = _options(args)
    if isinstance(o, int):
        return o
    host = o["host"]
    try:
        # an address as bytes: a str would load the idna codec (re, stringprep, unicodedata) to encode it
        addr = socket.gethostbyname(host.encode() if host.replace(".", "").isdigit() else host)
    except OSError:
        err(f"ping: cannot resolve {host}: Unknown host")
        return 68
    sock = _open(o["src"])
    if isinstance(sock, int):
        return sock
    sys.stdout.write(f"PING {host} ({addr}): {o['size']} data bytes\n")
    sys.stdout.flush()
    rtts: list[float] = []
    o["sent"] = 0
    try:  # noqa: SIM105  (contextlib's import costs more than the rest of a call)
        _exchange(sock, addr, o, rtts)
    except KeyboardInterrupt:
        pass
    sent, received = o["sent"], len(rtts)
    loss = 0.0 if sent == 0 else (sent - received) * 100.0 / sent
    sys.stdout.write(f"\n--- {host} ping statistics ---\n")
    sys.stdout.write(f"{sent} packets transmitted, {received} packets received, {loss:.1f}% packet loss\n")
    if rtts:
        avg = sum(rtts) / len(rtts)
        std = math.sqrt(sum((x - avg) ** 2 for x in rtts) / len(rtts))
        sys.stdout.write(f"round-trip min/avg/max/stddev = {min(rtts):.3f}/{avg:.3f}/{max(rtts):.3f}/{std:.3f} ms\n")
    return 0 if received else 2
