"""From boxes to the first token on the shared 4-node lab: a model refused before it is on the nodes, pushed
with `rollout model`, placed over RDMA on all four nodes through exo's API (over real SSH and curl, the exo
stand-in answering as exo's source says), an answer streamed with its tokens/s, then stopped. Leaves lab4 with
no instance placed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.lab.conftest import Lab, remove_model

pytestmark = pytest.mark.lab(minutes=0.4)

MODEL = "demo-org/lab-model"


def test_push_place_over_rdma_and_chat_with_tokens_per_second(lab4: Lab, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    inv = str(lab4.inventory)
    # as a person does after `rollout exo` (day-1.md step 7): every exo running and seeing the three others
    lab4.wait(lambda: all(n["running"] and len(n["peers"]) == 3 for n in json.loads(lab4.macfleet(
        "exo", "status", "--json", "-i", inv, check=False).stdout)["nodes"]), 180, "every exo to see the mesh")
    missing = lab4.macfleet("exo", "place", MODEL, "--over", "rdma", "-i", inv, check=False)
    assert missing.returncode == 1 and f"macfleet rollout model {MODEL}" in missing.stderr, missing.stderr

    src = tmp_path / "model"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "llama"}\n')
    (src / "model.safetensors").write_bytes(b"\0" * 65536)
    lab4.macfleet("rollout", "model", MODEL, "--from", str(src), "-i", inv, timeout=300)
    try:
        placed = lab4.macfleet("exo", "place", MODEL, "--over", "rdma", "--min-nodes", "4", "--wait", "--json",
                               "-i", inv, timeout=300)
        report = json.loads(placed.stdout)
        inst = report["instance"]
        assert inst["transport"] == "rdma" and inst["ready"], report
        assert sorted(s["node"] for s in inst["shards"]) == sorted(lab4.nodes)

        chat = lab4.macfleet("exo", "chat", MODEL, "hello from the first token", "-i", inv, timeout=120)
        assert chat.stdout.startswith("Hello from the lab's exo on 4 nodes. You said: hello from the first token")
        said = " ".join(chat.stdout.split())
        assert "generation:" in said and "tokens/s" in said
        figures = json.loads(lab4.macfleet("exo", "chat", MODEL, "again", "--json", "-i", inv, timeout=120).stdout)
        assert figures["generation_tps"] > 0 and figures["prompt_tps"] > 0 and figures["speeds_from"] == "exo"

        status = json.loads(lab4.macfleet("exo", "status", "--json", "-i", inv).stdout)
        assert all(n["running"] and len(n["peers"]) == 3 for n in status["nodes"]), status
        # the stand-in's own instance (docs/lab.md "Guesses": the runner checks read it) is of another model
        assert [i["model"] for i in status["instances"]].count(MODEL) == 1, status["instances"]
    finally:
        remove_model(lab4, MODEL)  # the next test finds lab4's models as they were
    after = json.loads(lab4.macfleet("exo", "status", "--json", "-i", inv, check=False).stdout)
    assert MODEL not in [i["model"] for i in after["instances"]], after["instances"]
