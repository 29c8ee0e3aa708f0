"""Landing files on a node (over a real local sshd): only a file whose digest matches reaches its final name."""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from macfleet.act import transfer
from macfleet.errors import RemoteCommandError, UnreachableError
from macfleet.inventory.load import load_inventory
from tests import sshd

pytestmark = pytest.mark.skipif(not sshd.available(), reason="needs root and OpenSSH's sshd")


def test_land_moves_matching_files_drops_complete_wrong_ones_and_keeps_partial_ones(server, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("good", "wrong", "partial"):
        (src / name).write_bytes(name.encode() * 1000)
    manifest = transfer.local_manifest(src)
    staging, final = tmp_path / "staging", tmp_path / "final"
    staging.mkdir()
    (staging / "good").write_bytes((src / "good").read_bytes())
    (staging / "wrong").write_bytes(b"x" * (src / "wrong").stat().st_size)  # full size, other bytes
    (staging / "partial").write_bytes((src / "partial").read_bytes()[:100])
    fleet = load_inventory(server.inventory)
    args = transfer.ssh_target(fleet, "node-1")

    res = transfer.land(args, manifest, str(staging), str(final))

    assert res.ok == ["good"] and (final / "good").read_bytes() == (src / "good").read_bytes()
    assert res.bad == {"wrong": "digest differs", "partial": "size 100, expected 7000"}
    assert sorted(os.listdir(final)) == ["good"]  # nothing unverified under a final name
    # the wrong copy is gone, so the next push sends it afresh (rsync would take a full-size file as done);
    # the partial one stays for rsync to continue
    assert sorted(os.listdir(staging)) == ["partial"]


def test_one_session_lands_several_requests_at_once_and_an_ended_one_says_so(server, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for i in range(4):
        (src / f"w{i}").write_bytes(bytes([i]) * 5000)
    manifest = transfer.local_manifest(src)
    staging, final = tmp_path / "staging", tmp_path / "final"
    staging.mkdir()
    for i in range(4):
        (staging / f"w{i}").write_bytes((src / f"w{i}").read_bytes())
    fleet = load_inventory(server.inventory)
    args = transfer.ssh_target(fleet, "node-1")
    session = transfer.NodeSession(args, {})
    try:
        parts = [transfer.Manifest(files=(f,)) for f in manifest.files]
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda m: session.land(m, str(staging), str(final)), parts))
        assert [r.ok for r in results] == [[f"w{i}"] for i in range(4)] and all(not r.bad for r in results)
        assert sorted(os.listdir(final)) == ["w0", "w1", "w2", "w3"] and os.listdir(staging) == []
    finally:
        session.close()
    with pytest.raises(RemoteCommandError, match="push session"):
        session.land(manifest, str(staging), str(final))

    gone = dataclasses.replace(args, port=1)
    with pytest.raises(UnreachableError):
        transfer.NodeSession(gone, {}).land(manifest, str(staging), str(final), timeout_s=60)


def test_the_feed_continues_staged_parts_resends_a_wrong_one_whole_and_says_when_each_arrived(
        server, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    for name, size in (("fresh", 3_000_000), ("partial", 2_500_000), ("wrong", 2_000_000), ("sub/empty", 0)):
        (src / name).write_bytes(os.urandom(size))
    manifest = transfer.local_manifest(src)
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "partial").write_bytes((src / "partial").read_bytes()[:1_000_000])  # a good prefix: continued
    (staging / "wrong").write_bytes(b"x" * 500_000)  # a prefix that is not this file's: sent again whole
    staged = {"partial": 1_000_000, "wrong": 500_000}
    fleet = load_inventory(server.inventory)
    feed = transfer.Feed(transfer.ssh_target(fleet, "node-1"))
    arrived: list[str] = []
    try:
        feed.send(src, str(staging), [(f, staged.get(f.path, 0)) for f in manifest.files], arrived.append)
    finally:
        feed.close()
    assert sorted(arrived) == sorted(f.path for f in manifest.files)
    for f in manifest.files:
        assert (staging / f.path).read_bytes() == (src / f.path).read_bytes(), f.path


def test_the_feed_refuses_a_path_outside_its_directory_and_an_unreachable_node(server, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"a" * 10)
    (tmp_path / "escape").write_bytes(b"e" * 10)  # the source side exists; the node must not write outside
    bad = transfer.ManifestFile.model_construct(path="../escape", size=10, digest="0" * 64, executable=False,
                                                sha256=None)
    fleet = load_inventory(server.inventory)
    args = transfer.ssh_target(fleet, "node-1")
    feed = transfer.Feed(args)
    try:
        with pytest.raises(RemoteCommandError, match="bad frame"):
            feed.send(src, str(tmp_path / "in" / "staging"), [(bad, 0)], lambda p: None)
    finally:
        feed.close()
    assert not (tmp_path / "in").exists()
    gone = dataclasses.replace(args, port=1)
    with pytest.raises(UnreachableError):
        transfer.Feed(gone).send(src, str(tmp_path / "staging"),
                                 [(f, 0) for f in transfer.local_manifest(src).files], lambda p: None)


def test_a_session_answers_the_preflight_and_writes_the_mesh_known_hosts(server, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "w").write_bytes(b"w" * 5000)
    manifest = transfer.local_manifest(src)
    models = tmp_path / "models"
    (models / "org--m").mkdir(parents=True)
    (models / "org--m" / "w").write_bytes(b"w" * 5000)
    fleet = load_inventory(server.inventory)
    session = transfer.NodeSession(transfer.ssh_target(fleet, "node-1"), {})
    try:
        pre = session.preflight(str(models), "org--m", manifest)
        assert pre["have"] == {"w": [5000, manifest.files[0].digest]} and pre["staged"] == {}
        assert pre["df_rc"] == 0 and pre["final"] == str(models / "org--m")
        assert session.size_under([str(models)]) == 5000
    finally:
        session.close()


def test_a_transfer_logs_in_as_doctor_does_through_a_jump_host_from_the_ssh_config(
        server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node's address is a name only the ssh config (read through collect/ssh) knows, behind a jump host with
    its own key and known_hosts: the OpenSSH transfer reaches it as paramiko does (issue 26 item 2; before, the
    transfer's ssh followed none of it). The same nothing-listening jump host fails, naming nothing else."""
    from macfleet.collect import ssh as ssh_module

    inv = server.inventory
    hosts = inv / "hosts.yml"
    original = hosts.read_text()

    def config(jump_port: int) -> Path:
        path = tmp_path / f"ssh_config_{jump_port}"
        path.write_text(f"Host behind-the-jump\n  HostName 127.0.0.1\n  Port {server.port}\n  ProxyJump jumper\n"
                        f"Host jumper\n  HostName 127.0.0.1\n  Port {jump_port}\n  User root\n"
                        f"  IdentityFile {inv / 'id_ed25519'}\n  UserKnownHostsFile {inv / 'known_hosts'}\n")
        return path

    hosts.write_text(original.replace(f"ansible_host: 127.0.0.1\n          ansible_port: {server.port}\n",
                                      "ansible_host: behind-the-jump\n", 1))
    try:
        fleet = load_inventory(inv)
        monkeypatch.setattr(ssh_module, "USER_SSH_CONFIG", config(server.port))
        target = transfer.ssh_target(fleet, "node-1")
        assert transfer.run_remote(target, "echo through") == "through\n"
        src = tmp_path / "src"
        src.mkdir()
        (src / "f").write_bytes(b"jumped" * 100)
        transfer.rsync_from_controller(target, src, str(tmp_path / "dst"), None)
        assert (tmp_path / "dst" / "f").read_bytes() == b"jumped" * 100
        monkeypatch.setattr(ssh_module, "USER_SSH_CONFIG", config(1))
        with pytest.raises(UnreachableError):
            transfer.run_remote(transfer.ssh_target(fleet, "node-1"), "true", timeout_s=60)
    finally:
        hosts.write_text(original)
