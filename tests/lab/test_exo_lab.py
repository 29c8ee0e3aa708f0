"""exo stand-in inside the lab (issue 5): on a healthy 4-node lab every node's /state shows 4 nodes and an RDMA
connection for each of the 12 ordered pairs; `unplug A B` removes the two A-B entries within a few seconds.

Needs the lab (root, Linux) and its `lab4` fixture (tests/lab/conftest.py): a 4-node lab started with exo. The
fixture is expected to offer `.name` and `.nodes` (node names, inventory order) and, if it has them,
`.ssh(node, command) -> CompletedProcess`, `.unplug(a, b)` and `.replug(a, b)`; otherwise the CLI is used
(`macfleet lab ssh --name NAME NODE CMD`, `macfleet lab unplug --name NAME A B`, `... replug ...`).
Without the fixture these tests skip. Traffic stays inside the lab's namespaces (each node asks its own exo).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.lab

# run on the node, by the node's python3: GET its own exo API
_GET = ("import sys, urllib.request; "
        "sys.stdout.write(urllib.request.urlopen('http://127.0.0.1:52415' + sys.argv[1], timeout=5).read().decode())")


@pytest.fixture
def lab(request):
    try:
        return request.getfixturevalue("lab4")
    except pytest.FixtureLookupError:
        pytest.skip("the lab4 fixture (tests/lab/conftest.py) is not available yet")


def _nodes(lab) -> list[str]:
    nodes = getattr(lab, "nodes", None)
    if isinstance(nodes, dict):
        return list(nodes)
    return list(nodes)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "macfleet", *args], capture_output=True, text=True, timeout=60)


def _ssh(lab, node: str, command: str) -> str:
    proc = lab.ssh(node, command) if hasattr(lab, "ssh") else _cli("lab", "ssh", "--name", lab.name, node, command)
    assert proc.returncode == 0, f"{node}: {command}: rc={proc.returncode} {proc.stderr}"
    return proc.stdout


def _api(lab, node: str, path: str):
    return json.loads(_ssh(lab, node, f"python3 -c {shlex.quote(_GET)} {shlex.quote(path)}"))


def _cable(lab, action: str, a: str, b: str) -> None:
    if hasattr(lab, action):
        getattr(lab, action)(a, b)
        return
    proc = _cli("lab", action, "--name", lab.name, a, b)
    assert proc.returncode == 0, proc.stderr


def _pairs(state: dict, kind: str) -> set[tuple[str, str]]:
    return {(src, sink) for src, sinks in state["topology"]["connections"].items()
            for sink, conns in sinks.items() if any(kind in c for c in conns)}


def _wait(pred, timeout: float, every: float = 0.5):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except (AssertionError, ValueError, KeyError) as exc:  # exo not up yet on that node
            last = exc
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"not within {timeout}s; last: {last!r}")


def _ids(lab) -> dict[str, str]:
    return {node: _wait(lambda node=node: _api(lab, node, "/node_id"), 60) for node in _nodes(lab)}


def _full_mesh(lab, node: str):
    state = _api(lab, node, "/state")
    return len(state["topology"]["nodes"]) == 4 and len(_pairs(state, "sourceRdmaIface")) == 12 and state


def test_every_node_sees_four_nodes_and_twelve_rdma_connections(lab):
    ids = _ids(lab)
    for node in _nodes(lab):
        state = _wait(lambda node=node: _full_mesh(lab, node), 60)
        assert set(state["topology"]["nodes"]) == set(ids.values())
        expected = {(a, b) for a in ids.values() for b in ids.values() if a != b}
        assert _pairs(state, "sourceRdmaIface") == expected
        assert _pairs(state, "sinkMultiaddr") == expected
        for rdma in (c for sinks in state["topology"]["connections"].values() for cs in sinks.values() for c in cs
                     if "sourceRdmaIface" in c):
            assert rdma["sourceRdmaIface"].startswith("rdma_en") and rdma["sinkRdmaIface"].startswith("rdma_en")
        assert all(v == {"enabled": True} for v in state["nodeRdmaCtl"].values())
        assert all("RunnerReady" in r for r in state["runners"].values())
        # exo's friendlyName is the ComputerName the node's scutil reports
        assert {i["friendlyName"] for i in state["nodeIdentities"].values()} == set(_nodes(lab))
        assert len({i["osBuildVersion"] for i in state["nodeIdentities"].values()}) == 1


def test_unplug_removes_the_pair_within_seconds(lab):
    ids = _ids(lab)
    a, b = _nodes(lab)[:2]
    for node in _nodes(lab):
        _wait(lambda node=node: _full_mesh(lab, node), 60)
    gone = {(ids[a], ids[b]), (ids[b], ids[a])}
    _cable(lab, "unplug", a, b)
    try:
        t0 = time.monotonic()
        for node in _nodes(lab):
            state = _wait(lambda node=node: (s := _api(lab, node, "/state"))
                          and not (_pairs(s, "sourceRdmaIface") | _pairs(s, "sinkMultiaddr")) & gone and s, 10)
            assert len(_pairs(state, "sourceRdmaIface")) == 10
        assert time.monotonic() - t0 < 10
    finally:
        _cable(lab, "replug", a, b)
    for node in _nodes(lab):
        _wait(lambda node=node: _full_mesh(lab, node), 30)


def test_node_id_is_kept_and_log_is_where_exo_writes_it(lab):
    ids = _ids(lab)
    for node, node_id in ids.items():
        assert _ssh(lab, node, "cat ~/.exo/node_zid").strip() == node_id
        log = _ssh(lab, node, "cat ~/.exo/exo_log/exo.log")
        assert f"Node ID: {node_id}" in log
