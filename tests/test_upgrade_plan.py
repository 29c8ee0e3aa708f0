"""The macOS target build (issue 29 items 2 and 4): where a node stands against it (on it, offered it, not
offered it, cannot tell), doctor's macos-target check, and `macfleet upgrade`'s plan and refusals."""

from __future__ import annotations

from datetime import date
from pathlib import Path

from macfleet.facts.probes import parse_softwareupdate_list
from macfleet.facts.system import SwVersFacts
from macfleet.inventory.model import Fleet, MacosSettings, Settings
from macfleet.judge.checks.catalogue import BY_CODE
from macfleet.judge.health import HealthContext, NodeFacts, Unknown
from macfleet.judge.upgrade import plan_upgrade, standing
from tests.judge.builders import mesh
from tests.judge.test_health_probes import NODES, NOW, text

PENDING = "softwareupdate_macos_pending.txt"  # macOS Tahoe 26.2-25C56 offered (and Safari)


def test_build_of_a_macos_label_only() -> None:
    ups = parse_softwareupdate_list(text(PENDING)).pending
    assert [u.build for u in ups] == ["25C56", None]
    [beta] = parse_softwareupdate_list(text("public/softwareupdate_bigsur_pending.txt")).pending
    assert beta.build == "20C5061b"


def test_standing_on_offered_not_offered_unknown() -> None:
    ups = parse_softwareupdate_list(text(PENDING))
    none = parse_softwareupdate_list(text("softwareupdate_none.txt"))
    assert standing("a", "25C56", None, "25C56").standing == "on-target"
    s = standing("a", "25B78", ups, "25C56")
    assert s.standing == "offered" and s.label == "macOS Tahoe 26.2-25C56" and s.restart
    n = standing("a", "25B78", ups, "25D100")
    assert n.standing == "not-offered" and n.offered == ("25C56",) and "Apple offers 25C56" in n.words("25D100")
    assert standing("a", "25B78", none, "25C56").standing == "not-offered"
    assert standing("a", "25B78", None, "25C56", why="timed out").standing == "unknown"


def _check(node_facts: NodeFacts, macos: MacosSettings, now=NOW):
    m = mesh(*NODES).model_copy(update={"settings": Settings(macos=macos)})
    fleet = Fleet(root=Path("/nonexistent"), meshes=(m,), settings=Settings())
    facts = {n: node_facts for n in NODES}
    return BY_CODE["macos-target"].judge(HealthContext(fleet=fleet, meshes=[m], facts=facts, now=now), "s1")


def _sw(build: str) -> SwVersFacts:
    return SwVersFacts(product_name="macOS", product_version="26.1", build_version=build)


def test_doctor_says_where_the_node_stands_against_the_target() -> None:
    ups = parse_softwareupdate_list(text(PENDING))
    assert _check(NodeFacts(sw_vers=_sw("25B78"), updates=ups), MacosSettings()) == []  # no target, no finding
    assert _check(NodeFacts(sw_vers=_sw("25C56"), updates=ups), MacosSettings(build="25C56")) == []
    [f] = _check(NodeFacts(sw_vers=_sw("25B78"), updates=ups), MacosSettings(build="25C56"))
    assert f.severity == "warning" and "offers it" in f.message and "macfleet upgrade" in f.fix
    [late] = _check(NodeFacts(sw_vers=_sw("25B78"), updates=ups),
                    MacosSettings(build="25C56", deadline=date(2026, 11, 1)))
    assert late.severity == "error" and "passed" in late.message
    [no] = _check(NodeFacts(sw_vers=_sw("25B78"), updates=ups), MacosSettings(build="25D100"))
    assert no.severity == "error" and "does not offer" in no.message and "newer build" in no.fix
    out = _check(NodeFacts(sw_vers=_sw("25B78"), problems={"softwareupdate": "timed out"}),
                 MacosSettings(build="25C56"))
    assert isinstance(out, Unknown) and "timed out" in out.reason


def test_plan_one_at_a_time_refuses_when_a_node_is_not_offered_the_target() -> None:
    ups = parse_softwareupdate_list(text(PENDING))
    nodes = [standing("s1", "25C56", ups, "25C56"), standing("s2", "25B78", ups, "25C56"),
             standing("s3", "25B78", ups, "25C56")]
    plan = plan_upgrade("m", "25C56", nodes, together=False)
    assert not plan.refusals and [n.node for n in plan.todo] == ["s2", "s3"]
    resumed = plan_upgrade("m", "25C56", nodes, together=False, done=["s2"])
    assert [n.node for n in resumed.todo] == ["s3"]
    blocked = plan_upgrade("m", "25D100", [standing("s1", "25B78", ups, "25D100"), *nodes[1:]], together=False)
    assert len(blocked.refusals) == 1 and "not offered" in blocked.refusals[0]
    assert plan_upgrade("m", None, nodes, together=False).refusals[0].startswith("no target build")
    assert plan_upgrade("m", "25C56", [nodes[0]], together=True).nothing_to_do


def test_a_target_is_a_build_not_a_version() -> None:
    import pytest
    from pydantic import ValidationError

    for bad in (26.2, "26.2", "25c56", "25C56; rm"):
        with pytest.raises(ValidationError, match="sw_vers -buildVersion"):
            MacosSettings(build=bad)
    assert MacosSettings(build="25C5061b").build == "25C5061b"
