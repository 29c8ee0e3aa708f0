"""`macfleet export` wiring: bad input is refused in one line, exit 2, before any node is dialled; nothing written."""

from __future__ import annotations

import os

import pytest

from macfleet.act.files import check_plain_file_path, write_text_atomic
from macfleet.errors import UsageError


def test_unknown_backend_is_refused(cli, example_inventory) -> None:
    result = cli("export", "mlx-hostfile", "-i", str(example_inventory), "--backend", "mpi")
    assert result.exit_code == 2
    assert "--backend 'mpi': expected one of jaccl, ring" in result.stderr


@pytest.mark.parametrize("kind", ["directory", "symlink", "fifo", "no-parent"])
def test_out_must_be_a_plain_file(cli, example_inventory, tmp_path, kind: str) -> None:
    target = tmp_path / "hostfile.json"
    real = tmp_path / "elsewhere.json"
    if kind == "directory":
        target.mkdir()
    elif kind == "symlink":
        real.write_text("keep\n")
        target.symlink_to(real)
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target = tmp_path / "missing" / "hostfile.json"
    result = cli("export", "mlx-hostfile", "-i", str(example_inventory), "--out", str(target))
    assert result.exit_code == 2, result.stderr
    assert str(target.parent if kind == "no-parent" else target) in result.stderr
    assert "Traceback" not in result.stderr
    if kind == "symlink":
        assert real.read_text() == "keep\n"


def test_atomic_write_replaces_whole_and_leaves_no_temporary(tmp_path) -> None:
    path = tmp_path / "f.json"
    path.write_text("old\n")
    write_text_atomic(path, "new\n")
    assert path.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]
    with pytest.raises(UsageError):
        check_plain_file_path(tmp_path)


def test_a_read_that_did_not_answer_refuses_the_hostfile_instead_of_judging_cables_absent(
        example_inventory, monkeypatch) -> None:
    from macfleet.collect.gather import Gathered
    from macfleet.errors import Refused
    from macfleet.flow import export
    from macfleet.inventory.load import load_inventory

    fleet = load_inventory(example_inventory)
    mesh = fleet.meshes[0]
    got = Gathered()
    got.failed[mesh.node_names[0]] = {"system-profiler-tb": "the shell running it ended (exit 0) before it answered"}
    monkeypatch.setattr(export, "gather", lambda *a, **k: got)
    with pytest.raises(Refused) as e:
        export.export_mlx_hostfile(fleet, mesh, "ring")
    assert "did not answer" in str(e.value) and mesh.node_names[0] in str(e.value) and "no cable" not in str(e.value)
