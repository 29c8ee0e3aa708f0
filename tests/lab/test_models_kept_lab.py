"""Models kept placed, inference as health, on the shared 4-node lab: a model the inventory declares is placed by
`macfleet reboot` after the mesh is back (exo loses every instance at a reboot, as exo does) and must answer
before the reboot counts as done, and so by the healer's reboot of a wedged mesh and by its restart of an exo
that went down; every placed model is asked, the lab's own instance too (docs/lab.md "Guesses"); `bench exo`
keeps its tokens/s as the baseline; a 40 Gb/s cable between two of its nodes then shows as an inference finding
against that baseline, in `bench exo` and in doctor. Leaves lab4 with no instance placed, no model declared and
no baseline."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from macfleet.lab.exo.standin import DEFAULT_INSTANCE_MODEL as OWN  # the model of the lab's own instance
from tests.lab.conftest import Lab, remove_model

pytestmark = pytest.mark.lab(minutes=2.4)

MODEL = "demo-org/lab-model"  # as test_exo_first_token.py; each removes it from the nodes at its end


def test_reboot_places_the_declared_model_again_and_a_slow_cable_shows_against_the_baseline(
        lab4: Lab, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = str(lab4.inventory)
    src = tmp_path / "model"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "llama"}\n')
    (src / "model.safetensors").write_bytes(b"\0" * 65536)
    lab4.macfleet("rollout", "model", MODEL, "--from", str(src), "-i", inv, timeout=300)
    gv = lab4.inventory / "group_vars" / "all"
    exo = {**yaml.safe_load((gv / "macfleet.yml").read_text())["macfleet_exo"], "place_timeout_s": 180}
    declared = gv / "zz-models.yml"  # read after macfleet.yml: its macfleet_exo replaces that one whole
    declared.write_text(yaml.safe_dump({"macfleet_exo": exo, "macfleet_models": [
        {"name": MODEL, "place": {"sharding": "pipeline", "transport": "ring", "min_nodes": 4}}]}))
    baseline = lab4.inventory / "bench-exo.baseline.json"
    policy = gv / "zz-watch.yml"
    try:
        try:
            p = lab4.macfleet("reboot", "-i", inv, "--json", "--reason", "models kept placed", check=False,
                              timeout=600)
        except subprocess.TimeoutExpired as exc:  # what it said so far: the phase it was in
            pytest.fail(f"the reboot did not end: {str(exc.stderr or '')[-4000:]}")
        out = json.loads(p.stdout or "{}")
        assert p.returncode == 0 and out["result"] == "ok", p.stdout + p.stderr[-3000:]
        last = out["phases"][-1]
        assert last["name"] == "models placed and answering" and last["ok"], last
        assert last["detail"].startswith(f"placed again: {MODEL}; answering: {MODEL}: "), last
        assert f"; {OWN}: " in last["detail"], last  # every placed model answers, not only the declared one

        status = json.loads(lab4.macfleet("exo", "status", "--json", "-i", inv).stdout)
        (inst,) = [i for i in status["instances"] if i["model"] == MODEL]
        assert (inst["model"], inst["transport"], inst["ready"]) == (MODEL, "ring", True), inst
        ranks = [s["node"] for s in sorted(inst["shards"], key=lambda s: s["rank"])]
        assert sorted(ranks) == sorted(lab4.nodes)

        # the healer: a wedge it finds ends, through its reboot of the mesh, with the model answering again
        policy.write_text("macfleet_remediation:\n  checks: [reachable, rdma]\n  debounce: 1\n"
                          "  ladder: {rdma: [reboot]}\n  reboot_gap_s: 0\n")
        lab4.fault("rdma-wedge", lab4.nodes[2])
        def audit() -> list[dict]:
            return [json.loads(x) for f in Path(os.environ["MACFLEET_CLUSTER_STATE_DIR"]).glob("*/audit.jsonl")
                    for x in f.read_text().splitlines()]

        def healer_rebooted() -> bool:  # one probe, one decision each (the wedge shows at exo's next look)
            lab4.macfleet("watch", "--once", "-i", inv, check=False, timeout=600)
            return any(e["action"] == "reboot" for e in audit())

        lab4.wait(healer_rebooted, 600, "the healer's reboot of the wedged mesh")
        (healed,) = [e for e in audit() if e["action"] == "reboot"]
        assert healed["finding"] == "rdma" and healed["result"].startswith("reboot ok"), healed
        assert f"answering: {MODEL}" in healed["result"], healed
        again = json.loads(lab4.macfleet("exo", "chat", MODEL, "still there?", "--json", "-i", inv).stdout)
        assert again["answer"].endswith("You said: still there?") and again["generation_tps"] > 0

        # and an exo that went down: the healer's restart of exo (exo loses every instance) ends, under the
        # cluster lock, with exo's /state verified, the model placed again and every placed model answering
        policy.write_text("macfleet_remediation:\n  checks: [reachable, exo-running]\n  debounce: 1\n"
                          "  settle_s: 0\n  ladder: {exo-running: [restart-exo]}\n")
        lab4.fault("exo-down", lab4.nodes[2])

        def healer_restarted() -> bool:
            lab4.macfleet("watch", "--once", "-i", inv, check=False, timeout=600)
            return any(e["action"] == "restart-exo" for e in audit())

        lab4.wait(healer_restarted, 300, "the healer's restart of exo")
        (restarted,) = [e for e in audit() if e["action"] == "restart-exo"]
        assert restarted["finding"] == "exo-running", restarted
        assert restarted["result"].startswith("exo restarted on every node (under the cluster lock); placed "
                                              f"again: {MODEL}; answering: {MODEL}: "), restarted
        assert f"; {OWN}: " in restarted["result"], restarted
        again = json.loads(lab4.macfleet("exo", "chat", MODEL, "and now?", "--json", "-i", inv).stdout)
        assert again["answer"].endswith("You said: and now?")
        policy.unlink()

        # the lab's own instance is a placed model as any other: bench exo measures it and keeps its figures
        saved = json.loads(lab4.macfleet("bench", "exo", "--save-baseline", "--json", "-i", inv, check=False).stdout)
        assert saved["saved"] and saved["findings"] == [], saved
        assert sorted(m["model"] for m in saved["models"]) == sorted([MODEL, OWN]), saved
        (fig,) = [m for m in saved["models"] if m["model"] == MODEL]
        assert fig["generation_tps"] > 0 and fig["prompt_tps"] > 0
        assert json.loads(baseline.read_text())["meshes"][status["mesh"]]["models"][MODEL]["generation_tps"] > 0

        lab4.fault("slow-cable", ranks[0], ranks[1])  # neighbours on the ring: its slowest link now
        try:
            runs: list[dict] = []

            def slow_now() -> bool:  # exo reads the link's speed on its own cadence: bench until it shows
                slow = lab4.macfleet("bench", "exo", "--json", "-i", inv, check=False)
                runs.append(json.loads(slow.stdout))
                return slow.returncode == 1 and [f["code"] for f in runs[-1]["findings"] if MODEL in f["message"]] \
                    == ["inference-below-baseline"]

            lab4.wait(slow_now, 120, "the 40 Gb/s cable in the model's tokens/s")
            (now,) = [m for m in runs[-1]["models"] if m["model"] == MODEL]
            assert now["generation_tps"] < 0.6 * fig["generation_tps"], runs[-1]
            doctor = lab4.macfleet("doctor", "--only", "model-placed,inference", "--json", "-i", inv, check=False)
            found = json.loads(doctor.stdout)["findings"]
            # placed, but slow: said once, on the node whose exo was read (the lab's own MlxJaccl instance over
            # every node has no RDMA on that TB4 cable: its completion fails, said there too, and nothing else)
            assert {(f["check"], f["node"]) for f in found} == {("inference", lab4.nodes[0])}, doctor.stdout
            said = sorted((MODEL in f["message"], OWN in f["message"], f["severity"]) for f in found)
            assert said == [(False, True, "error"), (True, False, "warning")], doctor.stdout
        finally:
            lab4.fault("slow-cable", ranks[0], ranks[1], clear=True)
    finally:
        declared.unlink(missing_ok=True)
        baseline.unlink(missing_ok=True)
        policy.unlink(missing_ok=True)
        lab4.fault("rdma-wedge", lab4.nodes[2], clear=True, check=False)
        lab4.fault("exo-down", lab4.nodes[2], clear=True, check=False)  # the restart loaded it again, unless it failed
        remove_model(lab4, MODEL)  # the next test finds lab4's models as they were
