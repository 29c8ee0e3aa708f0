"""`bench links` keeps its latest run beside the inventory, and doctor reads it with the baseline (files only)."""

from __future__ import annotations

from pathlib import Path

from macfleet.flow.bench_links import _save_latest, latest_path, links_bench_inputs, load_latest
from macfleet.inventory.model import Fleet, Settings
from macfleet.judge.links_bench import BASELINE_FILE, Baselines, LatestRun, LinkResult, baseline_of
from tests.judge.builders import mesh


def _fleet(root: Path) -> Fleet:
    return Fleet(root=root, meshes=(mesh("s1", "s2"),), settings=Settings())


def _run(at: str, gbps: float) -> LatestRun:
    return LatestRun(measured_at=at, duration_s=5, links=[LinkResult(a="s1", b="s2", a_to_b_gbps=gbps,
                                                                      b_to_a_gbps=gbps)])


def test_the_latest_run_replaces_the_last_and_keeps_other_meshes(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    _save_latest(fleet, "other", _run("t0", 1.0))
    _save_latest(fleet, "mesh1", _run("t1", 9.0))
    _save_latest(fleet, "mesh1", _run("t2", 4.0))
    got = load_latest(latest_path(fleet))
    assert got is not None and set(got.meshes) == {"other", "mesh1"}
    assert got.meshes["mesh1"].measured_at == "t2"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # written atomically, no leftovers


def test_doctor_reads_nothing_without_a_baseline_and_cannot_tell_from_a_foreign_file(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    _save_latest(fleet, "mesh1", _run("t1", 4.0))
    assert links_bench_inputs(fleet, list(fleet.meshes)) == {}
    base = baseline_of(_run("t0", 10.0).links, "t0", 5)
    (tmp_path / BASELINE_FILE).write_text(Baselines(meshes={"mesh1": base}).model_dump_json())
    got = links_bench_inputs(fleet, list(fleet.meshes))["mesh1"]
    assert got.latest is not None and got.latest.measured_at == "t1" and got.problem is None
    latest_path(fleet).write_text("not json")
    assert "is not a bench result" in (links_bench_inputs(fleet, list(fleet.meshes))["mesh1"].problem or "")
