"""`rollout model --check --events` over real SSH on lab_small: the read-only preflight of every node says what
would be sent where, the stream is one JSON object a line from `started` to `finished`, and nothing is sent,
staged or locked (issue 30: a preview for the model push)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.lab.conftest import Lab

pytestmark = pytest.mark.lab

MODEL = "test-org/preview-model"
MODEL_DIR = "~/.exo/models/test-org--preview-model"


def test_rollout_model_check_sends_nothing_and_streams_its_plan(lab_small: Lab, tmp_path: Path,
                                                                monkeypatch) -> None:
    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path / "state"))
    src = tmp_path / "model"
    src.mkdir()
    (src / "weights.safetensors").write_bytes(random.Random(3).randbytes(200_000))
    (src / "config.json").write_text('{"model_type": "qwen3"}\n')
    lab = lab_small
    first = lab.nodes[0]
    lab.ssh(first, f"mkdir -p {MODEL_DIR} && printf '{{\"model_type\": \"qwen3\"}}\\n' > {MODEL_DIR}/config.json")
    try:
        p = lab.macfleet("rollout", "model", MODEL, "--from", str(src), "-i", str(lab.inventory), "--check",
                         "--events", check=False, timeout=300)
        lines = [json.loads(line) for line in p.stdout.splitlines()]
        assert p.returncode == 0, p.stderr
        assert lines[0]["event"] == "started" and lines[-1]["event"] == "finished", lines
        plan = lines[-1]["result"]
        assert plan["result"] == "check" and plan["files"] == 2 and plan["bytes"] == 200_000 + 24
        assert plan["nodes"][first] == {"has_files": 1, "would_send_files": 1, "would_send_bytes": 200_000,
                                        "refused": None}
        for n in lab.nodes[1:]:
            assert plan["nodes"][n]["would_send_bytes"] == 200_024
        staging = "~/.exo/models/.macfleet-staging/test-org--preview-model"
        for n in lab.nodes:  # nothing sent, nothing staged
            listing = lab.ssh(n, f"ls {MODEL_DIR} 2>/dev/null; ls {staging} 2>/dev/null; true").stdout.split()
            assert listing == (["config.json"] if n == first else []), (n, listing)
        assert not list((tmp_path / "state").rglob("*.lock.json"))
    finally:
        for n in lab.nodes:
            lab.ssh(n, f"rm -rf {MODEL_DIR}")
