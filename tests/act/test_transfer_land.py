"""Landing files on a node (over a real local sshd): only a file whose digest matches reaches its final name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from macfleet.act import transfer
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
    args = transfer.SshArgs.for_node(fleet, fleet.node("node-1"))

    res = transfer.land(args, manifest, str(staging), str(final))

    assert res.ok == ["good"] and (final / "good").read_bytes() == (src / "good").read_bytes()
    assert res.bad == {"wrong": "digest differs", "partial": "size 100, expected 7000"}
    assert sorted(os.listdir(final)) == ["good"]  # nothing unverified under a final name
    # the wrong copy is gone, so the next push sends it afresh (rsync would take a full-size file as done);
    # the partial one stays for rsync to continue
    assert sorted(os.listdir(staging)) == ["partial"]
