"""exo stand-in inside the lab (issue 5): on a healthy 4-node lab every node's /state shows 4 nodes and an RDMA
connection for each of the 12 ordered pairs; `unplug A B` removes the two A-B entries within a few seconds.

Uses the `lab4` fixture (tests/lab/conftest.py: `.name`, `.nodes`, `.ssh(node, command)`, `.fault(...)`). The
cable is pulled with `macfleet lab fault unplug A B` and always put back with `--clear`. Traffic stays inside
the lab's namespaces (each node asks its own exo).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.lab(minutes=0.3)

# run on the node by its python3: GET each path from its own exo, print one JSON list
_GET = ("import json, sys, urllib.request; print(json.dumps([json.load(urllib.request.urlopen("
        "'http://127.0.0.1:52415' + p, timeout=5)) for p in sys.argv[1:]]))")
# run on the node: say "ready" once its own /state has A->B and B->A, then poll until neither has an entry
# and print the wall time of that first poll
_WATCH = """
import json, sys, time, urllib.request
a, b, deadline = sys.argv[1], sys.argv[2], time.time() + float(sys.argv[3])
ready = False
while time.time() < deadline:
    try:
        c = json.load(urllib.request.urlopen("http://127.0.0.1:52415/state", timeout=2))["topology"]["connections"]
    except OSError:
        time.sleep(0.1)
        continue
    present = bool(c.get(a, {}).get(b)) or bool(c.get(b, {}).get(a))
    if present and not ready:
        ready = True
        print("ready", flush=True)
    elif ready and not present:
        print(json.dumps({"gone_at": time.time()}), flush=True)
        sys.exit(0)
    time.sleep(0.1)
sys.exit(1)
"""


@pytest.fixture
def lab(lab4):
    return lab4


def _nodes(lab) -> list[str]:
    return list(lab.nodes)


def _ssh(lab, node: str, command: str) -> str:
    proc = lab.ssh(node, command)
    assert proc.returncode == 0, f"{node}: {command}: rc={proc.returncode} {proc.stderr}"
    return proc.stdout


def _api(lab, node: str, *paths: str) -> list:
    return json.loads(_ssh(lab, node, f"python3 -c {shlex.quote(_GET)} " + " ".join(map(shlex.quote, paths))))


def _unplug(lab, a: str, b: str) -> dict:
    """Pull the A-B cable with `macfleet lab fault unplug A B`."""
    lab.fault("unplug", a, b)
    return {"pair": (a, b)}


def _replug(lab, a: str, b: str, pulled: dict) -> None:
    """Plug it back (`--clear`): the lab re-applies each port's persisted network service, as a Mac does."""
    lab.fault("unplug", a, b, clear=True)


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


def _full_mesh(lab, node: str):
    """(node id, state) once this node's exo shows 4 nodes and 12 RDMA connections."""
    node_id, state = _api(lab, node, "/node_id", "/state")
    ok = len(state["topology"]["nodes"]) == 4 and len(_pairs(state, "sourceRdmaIface")) == 12
    return ok and (node_id, state)


def test_every_node_sees_four_nodes_and_twelve_rdma_connections(lab):
    seen = {node: _wait(lambda node=node: _full_mesh(lab, node), 90) for node in _nodes(lab)}
    ids = {node_id for node_id, _state in seen.values()}
    expected = {(a, b) for a in ids for b in ids if a != b}
    for _node_id, state in seen.values():
        assert set(state["topology"]["nodes"]) == ids
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
    seen = {node: _wait(lambda node=node: _full_mesh(lab, node), 90) for node in _nodes(lab)}
    a, b = _nodes(lab)[:2]
    id_a, id_b = seen[a][0], seen[b][0]
    # every node watches its own exo (ssh start-up does not count): wait for all to be ready, then pull
    watchers = {node: subprocess.Popen(
        [sys.executable, "-m", "macfleet", "lab", "ssh", "--name", lab.name, node,
         f"python3 -c {shlex.quote(_WATCH)} {id_a} {id_b} 120"],
        cwd=getattr(lab, "workdir", None), stdout=subprocess.PIPE, text=True) for node in seen}
    try:
        for node, proc in watchers.items():
            assert proc.stdout.readline().strip() == "ready", node
        pulled = _unplug(lab, a, b)
    except BaseException:
        for proc in watchers.values():
            proc.kill()
        raise
    t0 = time.time()
    try:
        took = {}
        for node, proc in watchers.items():
            out, _ = proc.communicate(timeout=60)
            took[node] = json.loads(out)["gone_at"] - t0
        assert max(took.values()) < 8, took  # typically 1-3 s after the cable is out
        for node in seen:
            _node_id, state = _api(lab, node, "/node_id", "/state")
            assert len(state["topology"]["nodes"]) == 4  # A and B still hear of each other through C and D
            assert len(_pairs(state, "sourceRdmaIface")) == 10
            assert not (_pairs(state, "sourceRdmaIface") | _pairs(state, "sinkMultiaddr")) & {(id_a, id_b),
                                                                                               (id_b, id_a)}
    finally:
        _replug(lab, a, b, pulled)
    for node in seen:
        _wait(lambda node=node: _full_mesh(lab, node), 60)


def test_node_id_is_kept_and_log_is_where_exo_writes_it(lab):
    for node in _nodes(lab):
        [node_id] = _wait(lambda node=node: _api(lab, node, "/node_id"), 60)
        assert _ssh(lab, node, "cat ~/.exo/node_zid").strip() == node_id
        log = _ssh(lab, node, "cat ~/.exo/exo_log/exo.log")
        assert f"Node ID: {node_id}" in log
