"""`rollout model`'s judgement before a byte moves, as tables: a node's preflight (typed), what it lacks and has
to receive, whether it fits, and the seed."""

from __future__ import annotations

from pathlib import Path

from macfleet.judge.push import DISK_MARGIN_BYTES, NodeHolding, plan_push, size_refusals
from macfleet.judge.rollout import Manifest, ManifestFile

# `df -k` as the preflight reads it (tests/fixtures/probes: the models volume's line), its Available column set
DF = (Path(__file__).resolve().parent.parent / "fixtures" / "probes" / "df_k_models.txt").read_text().replace(
    "81856376", "{free}")


def holding(have: dict | None = None, staged: dict | None = None, free_kb: int = 10**9) -> NodeHolding:
    return NodeHolding.model_validate({"final": "/m/org--x", "staging": "/m/.macfleet-staging/org--x",
                                       "df": DF.format(free=free_kb), "df_rc": 0, "have": have or {},
                                       "staged": staged or {}})


MANIFEST = Manifest(files=(ManifestFile(path="a", size=100, digest="d" * 64),
                           ManifestFile(path="b", size=300, digest="e" * 64)))


def test_the_seed_is_a_node_with_the_whole_model_else_the_first_that_needs_it() -> None:
    whole = {"a": [100, "d" * 64], "b": [300, "e" * 64]}
    plan = plan_push(["n1", "n2", "n3"], {"n1": holding(), "n2": holding(whole), "n3": holding(staged={"b": 200})},
                     MANIFEST)
    assert plan.seed == "n2" and plan.needing == ["n1", "n3"] and plan.refusals == {}
    assert plan.need == {"n1": 400, "n2": 0, "n3": 200}  # what is staged already is not sent again
    assert plan_push(["n1", "n2"], {"n1": holding(), "n2": holding()}, MANIFEST).seed == "n1"
    assert plan_push(["n2"], {"n2": holding(whole)}, MANIFEST).seed is None


def test_a_node_without_room_or_whose_free_space_is_unknown_is_refused() -> None:
    tight = holding(free_kb=(DISK_MARGIN_BYTES + 200) // 1024)
    assert "margin" in plan_push(["n1"], {"n1": tight}, MANIFEST).refusals["n1"]
    blind = holding().model_copy(update={"df": "df: /m: No such file or directory\n"})
    assert "free space unknown" in size_refusals({"n1": blind}, MANIFEST)["n1"]
    same_size = holding({"a": [100, None], "b": [300, None]}, free_kb=1)
    assert size_refusals({"n1": same_size}, MANIFEST) == {}  # by sizes alone it needs nothing
