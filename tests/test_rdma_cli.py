"""`macfleet rdma` wiring: bad input is refused in one line, exit 2, before anything is read or written."""

from __future__ import annotations


def test_enable_refuses_an_unknown_node_and_writes_nothing(cli, example_inventory) -> None:
    result = cli("rdma", "enable", "-i", str(example_inventory), "studio-9")
    assert result.exit_code == 2
    assert "no node 'studio-9'" in result.stderr
    assert not (example_inventory / "rdma-enable.state.json").exists()


def test_status_refuses_an_unknown_mesh(cli, example_inventory) -> None:
    result = cli("rdma", "status", "-i", str(example_inventory), "--mesh", "nope", "--json")
    assert result.exit_code == 2
    assert '"code": "usage"' in result.stdout
