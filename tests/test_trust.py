"""`macfleet trust` against a real OpenSSH server: the fingerprint is OpenSSH's own, a key is recorded only
once confirmed, a changed key is refused with both fingerprints, an unreachable node exits 3."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from tests import sshd

pytestmark = pytest.mark.skipif(not sshd.available(), reason="needs root and OpenSSH (scripts/setup installs it)")


@pytest.fixture
def inv(server, tmp_path: Path) -> Path:
    """The server's inventory with an empty known_hosts: a Mac never contacted."""
    import shutil

    d = tmp_path / "inv"
    shutil.copytree(server.inventory, d)
    (d / "known_hosts").write_text("")
    return d


def _ssh_keygen_fingerprint(server) -> str:
    host_key = Path(server.inventory).parent / "host_key.pub"
    out = subprocess.run(["ssh-keygen", "-lf", str(host_key)], capture_output=True, text=True, check=True).stdout
    return out.split()[1]


def test_yes_records_the_key_openssh_would_show_then_it_is_known(cli, server, inv: Path) -> None:
    r = cli("trust", "-i", str(inv), "--yes", "--json")
    assert r.exit_code == 0, r.output
    node = cli.json(r)["nodes"][0]
    assert node["fingerprint"] == _ssh_keygen_fingerprint(server)
    assert node["recorded"] is True and node["status"] == "new"
    line = (inv / "known_hosts").read_text().strip()
    assert line == f"[127.0.0.1]:{server.port} {server.host_key_pub}"
    # ssh itself now accepts the host strictly
    p = subprocess.run(["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={inv / 'known_hosts'}",
                        "-o", "StrictHostKeyChecking=yes", "-i", str(inv / "id_ed25519"), "-p", str(server.port),
                        "127.0.0.1", "true"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    again = cli("trust", "-i", str(inv), "--json")
    assert again.exit_code == 0
    assert cli.json(again)["nodes"][0]["status"] == "known"
    assert (inv / "known_hosts").read_text().strip() == line  # nothing added twice


def test_without_a_terminal_or_yes_nothing_is_recorded(cli, inv: Path) -> None:
    r = cli("trust", "-i", str(inv), "--json")
    assert r.exit_code == 1
    node = cli.json(r)["nodes"][0]
    assert node["recorded"] is False and "not confirmed" in node["refused"]
    assert (inv / "known_hosts").read_text() == ""


def test_fingerprint_option_records_only_a_match(cli, server, inv: Path) -> None:
    wrong = "SHA256:" + "A" * 43
    r = cli("trust", "-i", str(inv), "--fingerprint", f"node-1={wrong}", "--json")
    assert r.exit_code == 1
    assert wrong in cli.json(r)["nodes"][0]["refused"]
    assert (inv / "known_hosts").read_text() == ""
    right = _ssh_keygen_fingerprint(server)
    r = cli("trust", "-i", str(inv), "--fingerprint", f"node-1={right}", "--json")
    assert r.exit_code == 0, r.output
    assert cli.json(r)["nodes"][0]["recorded"] is True


def test_changed_key_is_refused_with_both_fingerprints(cli, server, inv: Path, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()
    (inv / "known_hosts").write_text(f"[127.0.0.1]:{server.port} {other[0]} {other[1]}\n")
    before = (inv / "known_hosts").read_text()
    r = cli("trust", "-i", str(inv), "--yes")
    assert r.exit_code == 1
    old_fp = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "other.pub")], capture_output=True, text=True,
                            check=True).stdout.split()[1]
    text = " ".join(r.output.split())
    assert old_fp in text and _ssh_keygen_fingerprint(server) in text
    assert (inv / "known_hosts").read_text() == before


def test_unreachable_node_exits_3(cli, inv: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    hosts = inv / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("ansible_port: ", f"ansible_port: {closed}  # was ", 1))
    r = cli("trust", "-i", str(inv), "--yes", "--json")
    assert r.exit_code == 3
    assert cli.json(r)["nodes"][0]["status"] == "unreachable"


@pytest.mark.parametrize("value", ["node-1", "node-1=MD5:aa", "node-9=SHA256:" + "A" * 43])
def test_bad_fingerprint_option_exits_2(cli, inv: Path, value: str) -> None:
    r = cli("trust", "-i", str(inv), "--fingerprint", value)
    assert r.exit_code == 2
    assert "--fingerprint" in r.stderr
    assert (inv / "known_hosts").read_text() == ""
