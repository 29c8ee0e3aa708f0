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


def test_enable_names_every_node_it_could_not_read_never_none_needs(cli, example_inventory) -> None:
    """Every Mac refuses the connection (real SSH, to a closed port): `rdma enable --non-interactive` names each
    one as could not be read, with why, and how to walk it through; exit 3, never "no node needs RDMA"."""
    import re
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hosts = example_inventory / "hosts.yml"
    n = iter(range(2, 10))  # one loopback address per Mac
    hosts.write_text(re.sub(r"ansible_host: \S+", lambda m: f"ansible_host: 127.0.0.{next(n)}\n"
                            f"          ansible_port: {port}", hosts.read_text()))
    result = cli("rdma", "enable", "-i", str(example_inventory), "--non-interactive")
    out = result.stdout + result.stderr
    assert result.exit_code == 3, out
    assert "no node needs" not in out
    for n in ("studio-1", "studio-2", "studio-3", "studio-4"):
        assert f"{n}: could not read whether RDMA is on ({n} could not be reached: " in out
    assert "macfleet rdma enable studio-1 studio-2 studio-3 studio-4" in out
