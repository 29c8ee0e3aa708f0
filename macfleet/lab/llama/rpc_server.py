"""A stand-in for llama.cpp's `rpc-server` (tools/rpc/rpc-server.cpp, ggml-org/llama.cpp), stdlib only.

Flags as the real one parses them: `-H/--host HOST` (one address, default 127.0.0.1), `-p/--port PORT`
(default 50052), `-t/--threads N`, `-d/--device LIST`, `-m/--mem LIST`, `-c/--cache`, `-h/--help`; an unknown
argument prints `error: unknown argument: X` and the usage, and exits 0, as the real one does. At start it
prints, as the real one: on stderr the "Never expose the RPC server to an open network!" banner when the host
is not 127.0.0.1, then on stdout `Starting RPC server v…`, `endpoint`, `local cache`, `backend memory`.
It then accepts connections on that one address and answers ggml-rpc's HELLO (command 14: the server's
version, three bytes) and closes any other request; enough for a client that checks the server is there.
A build written with `--broken` prints "Failed to find RPC backend" and exits 1 (a build missing its backend).
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading

VERSION = (2, 0, 0)
RPC_CMD_HELLO = 14
USAGE = """Usage: {prog} [options]

options:
  -h, --help                       show this help message and exit
  -t, --threads N                  number of threads for the CPU device (default: {threads})
  -d, --device <dev1,dev2,...>     comma-separated list of devices
  -H, --host HOST                  host to bind to (default: 127.0.0.1)
  -p, --port PORT                  port to bind to (default: 50052)
  -m, --mem <M1,M2,...>            memory size for each device (in MB)
  -c, --cache                      enable local file cache

"""
BANNER = """
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!
WARNING: Host ('{host}') is != '127.0.0.1'
         Never expose the RPC server to an open network!
         This is an experimental feature and is not secure!
!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!

"""


def parse_args(argv: list[str], prog: str) -> dict | int:
    params = {"host": "127.0.0.1", "port": 50052, "cache": False, "mem": None}
    threads = max(1, (os.cpu_count() or 2) // 2)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-H", "--host", "-p", "--port", "-t", "--threads", "-d", "--device", "-m", "--mem"):
            if i + 1 >= len(argv):
                return 1
            value = argv[i + 1]
            i += 1
            if arg in ("-H", "--host"):
                params["host"] = value
            elif arg in ("-p", "--port"):
                port = int(value)
                if not 0 < port <= 65535:
                    return 1
                params["port"] = port
            elif arg in ("-m", "--mem"):
                params["mem"] = int(value.split(",")[0])
        elif arg in ("-c", "--cache"):
            params["cache"] = True
        elif arg in ("-h", "--help"):
            sys.stderr.write(USAGE.format(prog=prog, threads=threads))
            return 0
        else:
            sys.stderr.write(f"error: unknown argument: {arg}\n" + USAGE.format(prog=prog, threads=threads))
            return 0
        i += 1
    return params


def _serve_one(conn: socket.socket) -> None:
    with conn:
        conn.settimeout(30)
        try:
            while True:
                head = conn.recv(1)
                if not head:
                    return
                size = struct.unpack("<Q", _recv_exact(conn, 8))[0]
                if size:
                    _recv_exact(conn, min(size, 1 << 20))
                if head[0] != RPC_CMD_HELLO:
                    return
                conn.sendall(struct.pack("<Q", 3) + bytes(VERSION))
        except (OSError, struct.error, ValueError):
            return


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise ValueError("closed")
        buf += chunk
    return buf


def main(argv: list[str], *, broken: bool = False, prog: str = "rpc-server") -> int:
    params = parse_args(argv, prog)
    if isinstance(params, int):
        if params:
            sys.stderr.write("Invalid parameters\n")
        return params
    host, port = params["host"], params["port"]
    if host != "127.0.0.1":
        sys.stderr.write(BANNER.format(host=host))
    if broken:
        sys.stderr.write("Failed to find RPC backend\n")
        return 1
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        srv.bind((host, port))
    except OSError as exc:
        sys.stderr.write(f"Failed to create server socket ({exc.strerror})\n")
        return 1
    srv.listen(16)
    memory = params["mem"] or 16384
    sys.stdout.write(f"Starting RPC server v{'.'.join(map(str, VERSION))}\n  endpoint       : {host}:{port}\n"
                     f"  local cache    : {'n/a' if not params['cache'] else '~/Library/Caches/llama.cpp/rpc/'}\n"
                     f"  backend memory : {memory} MB\n")
    sys.stdout.flush()
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=_serve_one, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
