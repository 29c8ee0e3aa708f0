"""`ping` with macOS flags and output (-c count, -i wait, -t timeout, -W waittime ms, -q, -s size, -S src, -o).

Uses an unprivileged ICMP datagram socket (the node's init opens net.ipv4.ping_group_range in its
namespace). Exit 0 when any reply came back, 2 when none, 68 for an unknown host, 64 for bad usage.
"""

from __future__ import annotations

import math
import os
import select
import socket
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


def ping(args: list[str]) -> int:
    count, interval, timeout, wait_ms, quiet, size, src, once = None, 1.0, None, 10000, False, 56, None, False
    host = None
    i = 0
    try:
        args = _split_attached(args)
        while i < len(args):
            a = args[i]
            if a == "-c":
                count = int(args[i + 1])
                i += 1
            elif a == "-i":
                interval = float(args[i + 1])
                i += 1
            elif a == "-t":
                timeout = float(args[i + 1])
                i += 1
            elif a == "-W":
                wait_ms = int(args[i + 1])
                i += 1
            elif a == "-s":
                size = int(args[i + 1])
                i += 1
            elif a == "-S":
                src = args[i + 1]
                i += 1
            elif a == "-q":
                quiet = True
            elif a == "-o":
                once = True
            elif a in ("-n", "-D", "-Q"):
                pass
            elif a.startswith("-"):
                err(f"ping: invalid option -- {a.lstrip('-')[:1]}")
                return 64
            else:
                host = a
            i += 1
    except (IndexError, ValueError):
        err("usage: ping [-c count] [-i wait] [-t timeout] [-W waittime] [-s packetsize] [-S src_addr] host")
        return 64
    if host is None:
        err("usage: ping [-c count] [-i wait] [-t timeout] [-W waittime] [-s packetsize] [-S src_addr] host")
        return 64
    try:
        addr = socket.gethostbyname(host)
    except OSError:
        err(f"ping: cannot resolve {host}: Unknown host")
        return 68
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
    except OSError as e:
        err(f"ping: socket: {e.strerror}")
        return 71
    if src:
        try:
            sock.bind((src, 0))
        except OSError:
            err("ping: bind: Can't assign requested address")
            return 64
    sys.stdout.write(f"PING {host} ({addr}): {size} data bytes\n")
    sys.stdout.flush()
    start = time.monotonic()
    sent = received = 0
    rtts: list[float] = []
    seq = 0
    ident = os.getpid() & 0xFFFF
    next_send = start
    last_sent = start
    try:
        while True:
            now = time.monotonic()
            if timeout is not None and now - start >= timeout:
                break
            if count is not None and sent >= count and (received >= sent or now - last_sent >= wait_ms / 1000):
                break
            if (count is None or sent < count) and now >= next_send:
                payload = struct.pack("!d", time.monotonic()) + bytes(max(0, size - 8))
                header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
                pkt = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident, seq) + payload
                try:
                    sock.sendto(pkt, (addr, 0))
                except OSError as e:
                    err(f"ping: sendto: {e.strerror}")
                sent += 1
                seq += 1
                last_sent = now
                next_send = now + interval
            wait = max(0.0, min(next_send - time.monotonic(), 0.2))
            if count is not None and sent >= count:
                wait = 0.05
            r, _, _ = select.select([sock], [], [], wait)
            if r:
                data, _peer = sock.recvfrom(65535)
                if len(data) >= 16 and data[0] == 0:
                    rseq = struct.unpack("!H", data[6:8])[0]
                    t0 = struct.unpack("!d", data[8:16])[0]
                    ms = (time.monotonic() - t0) * 1000
                    received += 1
                    rtts.append(ms)
                    if not quiet:
                        sys.stdout.write(f"{len(data)} bytes from {addr}: icmp_seq={rseq} ttl=64 time={ms:.3f} ms\n")
                        sys.stdout.flush()
                    if once:
                        break
            elif count is None and timeout is None:
                continue
    except KeyboardInterrupt:
        pass
    loss = 0.0 if sent == 0 else (sent - received) * 100.0 / sent
    sys.stdout.write(f"\n--- {host} ping statistics ---\n")
    sys.stdout.write(f"{sent} packets transmitted, {received} packets received, {loss:.1f}% packet loss\n")
    if rtts:
        avg = sum(rtts) / len(rtts)
        std = math.sqrt(sum((x - avg) ** 2 for x in rtts) / len(rtts))
        sys.stdout.write(f"round-trip min/avg/max/stddev = {min(rtts):.3f}/{avg:.3f}/{max(rtts):.3f}/{std:.3f} ms\n")
    return 0 if received else 2
