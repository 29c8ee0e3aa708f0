"""The lab's llama.cpp stand-in build: the real rpc-server's flags, banner and start lines; it listens on the one
host it is told and answers ggml-rpc's HELLO; a --broken build exits as one without its backend."""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from pathlib import Path

from macfleet.lab.llama.build import write_build


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_rpc_server_listens_where_told_and_answers(tmp_path: Path) -> None:
    build = write_build(tmp_path / "b")
    assert {p.name for p in (build / "bin").iterdir()} == {"rpc-server", "llama-cli", "llama-server"}
    port = _free_port()
    p = subprocess.Popen([str(build / "bin" / "rpc-server"), "-H", "127.0.0.1", "-p", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        first = [p.stdout.readline() for _ in range(4)]
        assert first[0] == "Starting RPC server v2.0.0\n" and first[1] == f"  endpoint       : 127.0.0.1:{port}\n"
        deadline = time.monotonic() + 10
        while True:
            try:
                conn = socket.create_connection(("127.0.0.1", port), timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        with conn:
            conn.sendall(bytes([14]) + struct.pack("<Q", 0))
            assert conn.recv(11) == struct.pack("<Q", 3) + bytes([2, 0, 0])
    finally:
        p.kill()
        p.wait()


def test_banner_unknown_flag_and_broken_build(tmp_path: Path) -> None:
    bad = write_build(tmp_path / "bad", broken=True)
    r = subprocess.run([str(bad / "bin" / "rpc-server"), "-H", "10.213.0.1"], capture_output=True, text=True)
    assert r.returncode == 1 and "WARNING: Host ('10.213.0.1') is != '127.0.0.1'" in r.stderr
    assert r.stderr.rstrip().endswith("Failed to find RPC backend")
    r = subprocess.run([str(bad / "bin" / "rpc-server"), "--bogus"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr.startswith("error: unknown argument: --bogus\nUsage: ")
