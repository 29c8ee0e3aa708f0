"""doctor's slow probe (`softwareupdate --list`) is asked at most once per probes.updates_max_age_s per node: the
answer is kept on the controller with when it was read, judged again at each pass, its age said; `--fresh` asks
again. The gather is replaced by one that answers what it is asked (the lab test covers the real pass)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from macfleet.act import probecache
from macfleet.collect.gather import Gathered
from macfleet.collect.ssh import Raw
from macfleet.flow import checks
from macfleet.flow import doctor as flow
from macfleet.inventory.load import load_inventory
from macfleet.render.doctor import render_doctor
from tests.conftest import EXAMPLE_INVENTORY

PENDING = ("Software Update Tool\n\nFinding available software\nSoftware Update found the following new or updated "
           "software:\n* Label: macOS Tahoe 26.3-25D125\n\tTitle: macOS Tahoe 26.3, Version: 26.3, Size: 3693075KiB, "
           "Recommended: YES, Action: restart,\n")


class Answering:
    """A pass that answers every command it is asked: softwareupdate with `updates`, the rest with nothing."""

    def __init__(self, nodes, keys_by_node, updates: str, rc: int = 0):
        out: dict = {}
        for n in nodes:
            out[n.name] = {k: Raw(stdout=updates if k == "softwareupdate" else "", stderr="",
                                  rc=rc if k == "softwareupdate" else 1, took_s=0.1, ended_at=time.time())
                           for k in keys_by_node[n.name]}
        self.gathered = Gathered(outputs=out)

    def result(self) -> Gathered:
        return self.gathered

    def abandon(self) -> None:
        pass


@pytest.fixture
def fake_pass(monkeypatch, tmp_path):
    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path))
    asked: list[dict[str, set[str]]] = []
    answer = {"updates": PENDING, "rc": 0}

    def start_gather(fleet, nodes, specs, **kw):
        nodes = list(nodes)
        per_node = kw["per_node"]
        keys = {n.name: {s.key for s in (*specs, *per_node(n.name))} for n in nodes}
        asked.append(keys)
        return Answering(nodes, keys, answer["updates"], answer["rc"])

    monkeypatch.setattr(checks, "start_gather", start_gather)
    return asked, answer


def su_asked(keys: dict[str, set[str]]) -> set[str]:
    return {n for n, k in keys.items() if "softwareupdate" in k}


def test_softwareupdate_is_asked_once_then_its_cached_answer_judged_with_its_age(fake_pass, tmp_path) -> None:
    asked, _ = fake_pass
    fleet = load_inventory(EXAMPLE_INVENTORY)
    nodes = {n.name for m in fleet.meshes for n in m.nodes}
    first = flow.run_doctor(fleet, list(fleet.meshes), only=["updates"])
    assert su_asked(asked[-1]) == nodes and first.cached == {}
    second = flow.run_doctor(fleet, list(fleet.meshes), only=["updates"])
    assert su_asked(asked[-1]) == set()  # not asked again
    assert set(second.cached) == nodes and all(0 <= a["softwareupdate"] < 60 for a in second.cached.values())
    # the cached answer is judged like a fresh one, and its age is said
    found = [f for f in second.report.findings if f.check == "updates"]
    assert len(found) == len(nodes) and all("cached" in f.evidence and "ago" in f.evidence for f in found)
    shown = render_doctor(second.report, cached=second.cached)
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(shown)
    assert "softwareupdate --list: cached answers used" in console.export_text()
    third = flow.run_doctor(fleet, list(fleet.meshes), only=["updates"], fresh=True)
    assert su_asked(asked[-1]) == nodes and third.cached == {}


def test_an_old_answer_is_asked_again(fake_pass, tmp_path) -> None:
    asked, _ = fake_pass
    fleet = load_inventory(EXAMPLE_INVENTORY)
    flow.run_doctor(fleet, list(fleet.meshes), only=["updates"])
    path = tmp_path / "macfleet" / "probe-cache.json"
    data = json.loads(path.read_text())
    for entry in data["probes"]["softwareupdate"].values():
        entry["read_at"] -= 6 * 3600 + 1  # older than probes.updates_max_age_s (6 h by default)
    path.write_text(json.dumps(data))
    again = flow.run_doctor(fleet, list(fleet.meshes), only=["updates"])
    assert su_asked(asked[-1]) == {n.name for m in fleet.meshes for n in m.nodes} and again.cached == {}


def test_a_failed_or_unreadable_answer_is_not_kept(fake_pass, tmp_path) -> None:
    asked, answer = fake_pass
    fleet = load_inventory(EXAMPLE_INVENTORY)
    answer.update(updates="Software Update Tool\n\nFinding available software\n")  # cut off: no verdict
    flow.run_doctor(fleet, list(fleet.meshes), only=["updates"])
    answer.update(updates="", rc=1)
    flow.run_doctor(fleet, list(fleet.meshes), only=["updates"])
    assert su_asked(asked[-1]) and not (tmp_path / "macfleet" / "probe-cache.json").exists()


def test_other_inventories_nodes_never_share_an_answer(tmp_path) -> None:
    a = probecache.node_key("/inv/lab-a", "s1", "198.18.1.2", None)
    b = probecache.node_key("/inv/lab-b", "s1", "198.18.1.2", None)
    probecache.store("softwareupdate", {a: probecache.CachedAnswer("x", "", 0, time.time())},
                     path=tmp_path / "c.json")
    assert set(probecache.load("softwareupdate", [a, b], path=tmp_path / "c.json")) == {a}
    assert (tmp_path / "c.json").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("content", [b"", b"not json", b"[]", b'{"probes": 3}', b'{"probes": {"softwareupdate": '
                                     b'{"k": {"stdout": 1}}}}', b"x" * (probecache.MAX_FILE_BYTES + 1)])
def test_a_damaged_cache_is_ignored_never_an_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "c.json"
    path.write_bytes(content)
    assert probecache.load("softwareupdate", ["k"], path=path) == {}
    probecache.store("softwareupdate", {"k": probecache.CachedAnswer("y", "", 0, time.time())}, path=path)
    assert probecache.load("softwareupdate", ["k"], path=path)["k"].stdout == "y"


def test_an_unreachable_node_is_not_judged_from_its_kept_answer(fake_pass, monkeypatch) -> None:
    fleet = load_inventory(EXAMPLE_INVENTORY)
    flow.run_doctor(fleet, list(fleet.meshes), only=["updates"])

    def unreachable(fleet, nodes, specs, **kw):
        nodes = list(nodes)
        for n in nodes:
            kw["per_node"](n.name)
        return Answering([], {}, "")

    monkeypatch.setattr(checks, "start_gather", lambda *a, **kw: _all_down(unreachable(*a, **kw), a[1]))
    run = flow.run_doctor(fleet, list(fleet.meshes), only=["updates"])
    assert run.cached == {} and all(not f.reachable for f in run.facts.values())


def _all_down(answering: Answering, nodes) -> Answering:
    answering.gathered.unreachable = {n.name: "no route to host" for n in nodes}
    return answering


def test_doctor_bounds_each_command_by_probes_command_timeout_as_watch_does(tmp_path: Path) -> None:
    """architecture.md §3 item 8: probes.command_timeout_s capped watch's commands only; doctor ran system_profiler
    for 30 s whatever it said. The cached softwareupdate probe (never watch's) keeps its own timeout."""
    fleet = load_inventory(EXAMPLE_INVENTORY)
    m = fleet.meshes[0]
    probes = m.settings.probes.model_copy(update={"command_timeout_s": 7.0})
    mesh = m.model_copy(update={"settings": m.settings.model_copy(update={"probes": probes})})
    specs = {s.key: s.timeout_s for s in checks.CheckPlan.of(fleet, [mesh], None).specs(mesh.node_names[0])}
    assert specs["thunderbolt"] == 7.0 and specs["ibv-devices"] <= 7.0
    assert all(t <= 7.0 for k, t in specs.items() if k != "softwareupdate")
    assert specs["softwareupdate"] > 7.0
