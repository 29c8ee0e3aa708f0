"""Models kept placed and `macfleet bench exo` end to end without a lab, as tests/test_exo_cli.py runs `macfleet
exo`: a real OpenSSH server on 127.0.0.1 is the node, the lab's exo stand-in answers on the port the inventory
names, and macfleet reaches it through curl over the SSH login."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macfleet.flow.placed import models_answer
from macfleet.inventory.load import load_inventory
from macfleet.lab.exo.standin import DEFAULT_INSTANCE_MODEL as OWN  # the model of the stand-in's own instance
from tests import sshd
from tests.test_exo_cli import (
    node,  # noqa: F401  (the fixture)
    start_mesh,  # noqa: F401  (the fixture it needs)
)
from tests.test_lab_exo_instances import MODEL

pytestmark = pytest.mark.skipif(not sshd.available(), reason="needs root and OpenSSH's sshd")


def test_a_declared_model_is_placed_and_answers_then_bench_exo_keeps_and_compares_its_figures(
        cli, node, tmp_path: Path, monkeypatch) -> None:  # noqa: F811
    inv, _app = node
    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    exo = inv / "group_vars" / "all" / "exo.yml"  # the port the stand-in answers on; placing bounded
    exo.write_text(exo.read_text() + "  place_timeout_s: 30\n")
    (inv / "group_vars" / "all" / "models.yml").write_text(
        f"macfleet_models:\n  - name: {MODEL}\n    place: {{sharding: pipeline, transport: ring}}\n")
    fleet = load_inventory(inv)
    said: list[str] = []
    ok, detail = models_answer(fleet, fleet.meshes[0], said.append)
    assert ok, detail
    assert detail.startswith(f"placed again: {MODEL}; answering: {MODEL}: "), detail
    assert f"; {OWN}: " in detail  # the stand-in's own instance is a placed model too: health asks it as well
    assert said == [f"placing {MODEL} (pipeline, over ring)…"]
    assert models_answer(fleet, fleet.meshes[0], said.append)[1].startswith(f"answering: {MODEL}: ")  # kept

    saved = cli("bench", "exo", "--save-baseline", "--json", "-i", str(inv))
    run = json.loads(saved.stdout)
    assert run["saved"], saved.stderr
    (fig,) = [m for m in run["models"] if m["model"] == MODEL]
    assert fig["transport"] == "ring" and fig["generation_tps"] > 0 and fig["error"] is None
    assert [f for f in run["findings"] if MODEL in f["message"]] == []
    base = json.loads((inv / "bench-exo.baseline.json").read_text())
    assert base["meshes"][run["mesh"]]["models"][MODEL]["generation_tps"] == fig["generation_tps"]

    again = cli("bench", "exo", "-i", str(inv))
    assert "compared with the baseline of" in again.stdout, again.stdout + again.stderr

    doctor = cli("doctor", "--only", "model-placed,inference", "--json", "-i", str(inv))
    report = json.loads(doctor.stdout)
    assert [c["result"] for c in report["checks"] if c["check"] in ("model-placed", "inference")] == ["ok", "ok"]
