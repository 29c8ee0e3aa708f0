"""The node's live IPv4 addresses and main-table routes, read from the kernel over rtnetlink (stdlib only).

What `ip -j -4 addr show` and `ip -j -4 route show table main` report, in the same order (the kernel's dump
order) and with the same fields the stand-ins use, without starting `ip` and importing subprocess and json for
it: a stand-in call then costs little more than the interpreter's start. Linux's rtnetlink(7) messages:
nlmsghdr, then ifaddrmsg / rtmsg, then route attributes (rtattr), each 4-byte aligned.
"""
# Sources (issue 31): lab plumbing, no behaviour of a Mac of its own; each command's sources are above its handler.

from __future__ import annotations

import _socket
from struct import calcsize, pack, unpack_from

_NLMSG = "=IHHII"  # length, type, flags, sequence, port id
_NLMSG_LEN = calcsize(_NLMSG)
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_RTM_NEWROUTE, _RTM_GETROUTE, _RTM_NEWADDR, _RTM_GETADDR = 24, 26, 20, 22
_AF_NETLINK, _NETLINK_ROUTE, _AF_INET = 16, 0, 2
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_RTA_DST, _RTA_OIF, _RTA_GATEWAY, _RTA_TABLE = 1, 4, 5, 15
_RT_TABLE_MAIN = 254
_RTM_F_CLONED = 0x200


def _dump(msg_type: int, body: bytes, reply_type: int) -> list[tuple[bytes, int]]:
    """(message, offset of its body) of each reply to one dump request."""
    sock = _socket.socket(_AF_NETLINK, _socket.SOCK_RAW | _socket.SOCK_CLOEXEC, _NETLINK_ROUTE)
    try:
        sock.bind((0, 0))
        sock.sendto(pack(_NLMSG, _NLMSG_LEN + len(body), msg_type, _NLM_F_REQUEST | _NLM_F_DUMP, 1, 0) + body,
                    (0, 0))
        out = []
        while True:
            data = sock.recv(1 << 16)
            off = 0
            while off + _NLMSG_LEN <= len(data):
                length, kind = unpack_from("=IH", data, off)
                if kind == _NLMSG_DONE:
                    return out
                if kind == _NLMSG_ERROR:
                    (errno,) = unpack_from("=i", data, off + _NLMSG_LEN)
                    if errno:
                        raise OSError(-errno, "rtnetlink dump failed")
                elif kind == reply_type:
                    out.append((data[off:off + length], _NLMSG_LEN))
                if length < _NLMSG_LEN:
                    raise OSError("rtnetlink: truncated message")
                off += (length + 3) & ~3
    finally:
        sock.close()


def _attrs(msg: bytes, off: int) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while off + 4 <= len(msg):
        length, kind = unpack_from("=HH", msg, off)
        if length < 4:
            break
        out.setdefault(kind, msg[off + 4:off + length])
        off += (length + 3) & ~3
    return out


def _ipv4(raw: bytes) -> str:
    return ".".join(str(b) for b in raw[:4])


def _name(index: int) -> str:
    try:
        return _socket.if_indextoname(index)
    except OSError:
        return f"if{index}"


def ipv4_addresses() -> dict[str, list[tuple[str, int]]]:
    """Interface name -> [(address, prefix length)] of its IPv4 addresses (`ip -4 addr`'s local and prefixlen)."""
    out: dict[str, list[tuple[str, int]]] = {}
    for msg, off in _dump(_RTM_GETADDR, pack("=BBBBI", _AF_INET, 0, 0, 0, 0), _RTM_NEWADDR):
        family, prefixlen, _flags, _scope, index = unpack_from("=BBBBI", msg, off)
        if family != _AF_INET:
            continue
        attrs = _attrs(msg, off + 8)
        local = attrs.get(_IFA_LOCAL) or attrs.get(_IFA_ADDRESS)
        if local is not None:
            out.setdefault(_name(index), []).append((_ipv4(local), prefixlen))
    return out


def ipv4_routes() -> list[dict]:
    """The main table's IPv4 routes as `ip -j -4 route show table main` has them: dst ("default", "a.b.c.d/n",
    or "a.b.c.d" for a host), and gateway and dev when the route has them."""
    out = []
    body = pack("=BBBBBBBBI", _AF_INET, 0, 0, 0, 0, 0, 0, 0, 0)
    for msg, off in _dump(_RTM_GETROUTE, body, _RTM_NEWROUTE):
        family, dst_len, _src_len, _tos, table, _proto, _scope, _type, flags = unpack_from("=BBBBBBBBI", msg, off)
        attrs = _attrs(msg, off + 12)
        if _RTA_TABLE in attrs:
            (table,) = unpack_from("=I", attrs[_RTA_TABLE])
        if family != _AF_INET or table != _RT_TABLE_MAIN or flags & _RTM_F_CLONED:
            continue
        if _RTA_DST in attrs:
            dst = _ipv4(attrs[_RTA_DST]) + ("" if dst_len == 32 else f"/{dst_len}")
        else:
            dst = f"0/{dst_len}" if dst_len else "default"
        route: dict = {"dst": dst}
        if _RTA_GATEWAY in attrs:
            route["gateway"] = _ipv4(attrs[_RTA_GATEWAY])
        if _RTA_OIF in attrs:
            route["dev"] = _name(unpack_from("=I", attrs[_RTA_OIF])[0])
        out.append(route)
    return out
