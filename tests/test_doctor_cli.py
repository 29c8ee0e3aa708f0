"""`macfleet doctor` wiring: --list, --only validation, exit codes, and --fix's plan (playbook runs recorded)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from macfleet.flow.doctor import doctor_exit_code as exit_code
from macfleet.flow.doctor import plan_fixes
from macfleet.judge.health import CHECK_CODES, CheckResult, HealthFinding, HealthReport, HealthSummary
from tests.conftest import EXAMPLE_INVENTORY

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "captures"


def report(findings: list[HealthFinding], unreachable: list[str] | None = None, unknown: int = 0) -> HealthReport:
    return HealthReport(findings=findings, checks=[CheckResult(check="reachable", node="a", result="ok")],
                        summary=HealthSummary(nodes=1, checks=1, ok=1, findings=len(findings), unknown=unknown,
                                              errors=len(findings), warnings=0, unreachable=unreachable or [],
                                              healthy=not findings and not unknown,
                                              checked_at=datetime(2026, 1, 1, tzinfo=UTC).isoformat()))


def finding(node: str, check: str) -> HealthFinding:
    return HealthFinding(node=node, check=check, severity="error", message="m", fix=f"fix {check}")


def test_list_names_every_check(cli) -> None:
    result = cli("doctor", "--list", "--json")
    assert result.exit_code == 0
    assert [c["code"] for c in json.loads(result.stdout)["checks"]] == list(CHECK_CODES)


def test_unknown_check_in_only_is_bad_input(cli) -> None:
    result = cli("doctor", "-i", str(EXAMPLE_INVENTORY), "--only", "power,nonsense")
    assert result.exit_code == 2
    assert "nonsense" in result.stderr


def test_exit_codes_follow_the_precedence() -> None:
    assert exit_code(report([])) == 0
    assert exit_code(report([], unknown=1)) == 1  # could not tell is not healthy
    assert exit_code(report([finding("a", "power")])) == 1
    assert exit_code(report([finding("a", "reachable")], unreachable=["a"])) == 3


def test_fix_plan_groups_by_playbook_and_never_reboots() -> None:
    r = report([finding("a", "bridge"), finding("a", "ip-plan"), finding("b", "power"), finding("c", "wired-limit"),
                finding("b", "exo-running"), finding("c", "rdma"), finding("a", "cabling")])
    steps, left = plan_fixes(r)
    assert {(s.playbook, tuple(s.nodes)) for s in steps} == {("network", ("a",)), ("power", ("b", "c")),
                                                            ("exo-service", ("b",))}
    assert {(n, c) for n, c, _ in left} == {("c", "rdma"), ("a", "cabling")}
    from macfleet.judge.checks.catalogue import BY_CODE

    assert BY_CODE["rdma"].fix is None and BY_CODE["reachable"].fix is None


def test_node_facts_keep_why_a_fact_is_missing() -> None:
    from macfleet.collect.gather import Gathered
    from macfleet.collect.ssh import Raw
    from macfleet.flow.checks import node_facts

    rdma = (FIXTURES / "rdma-ctl" / "macos__rdma_ctl_status_enabled_1.txt").read_text()
    g = Gathered(outputs={"a": {"rdma-ctl": Raw(stdout=rdma, stderr="", rc=0, took_s=0.1),
                                "exo-node-id": Raw(stdout="", stderr="curl: (7) Failed to connect", rc=7, took_s=0.1),
                                "pmset": Raw(stdout="", stderr="pmset: not found", rc=127, took_s=0.1)}},
                 failed={"a": {"ibv-devinfo:verbose": "`ibv_devinfo -v` gave no answer within 10 s"}},
                 unreachable={"b": "cannot connect to b:22: timed out"})
    a = node_facts(g, "a")
    assert a.rdma_ctl is not None and a.rdma_ctl.enabled
    assert a.timed_out == ["ibv-devinfo:verbose"]
    assert a.exo_api == "refused" and "refused" in a.problems["exo"]
    assert a.pmset is None and "exit 127" in a.problems["pmset"]
    assert a.sw_vers is None and "no answer" in a.problems["sw-vers"]
    b = node_facts(g, "b")
    assert not b.reachable and "timed out" in b.unreachable_reason


def test_could_not_tell_is_shown_with_its_reason_without_verbose() -> None:
    from rich.console import Console

    from macfleet.render.doctor import render_doctor

    r = HealthReport(findings=[], checks=[
        CheckResult(check="reachable", node="a", result="ok"),
        CheckResult(check="exo-log", node="a", result="unknown", reason="`tail exo.log` timed out after 10 s \x1b[2J"),
    ], summary=HealthSummary(nodes=1, checks=2, ok=1, findings=0, unknown=1, errors=0, warnings=0, unreachable=[],
                             healthy=False, checked_at=datetime(2026, 1, 1, tzinfo=UTC).isoformat()))
    console = Console(width=120, record=True, color_system=None, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render_doctor(r))
    out = console.export_text()
    assert "unknown exo-log" in out and "timed out after 10 s" in out and "\x1b" not in out
    assert "1 check(s) could not tell" in out


def test_node_facts_of_the_small_probes() -> None:
    """The clock reading keeps when the answer came; softwareupdate is read with its stderr; each ping is filed
    under the peer address it went to; a probe not answered is a problem, never an empty fact."""
    from macfleet.collect.gather import Gathered
    from macfleet.collect.ssh import Raw
    from macfleet.flow.checks import node_facts

    probes = FIXTURES.parent / "probes"
    g = Gathered(outputs={"a": {
        "date": Raw(stdout="1796075974\n", stderr="", rc=0, took_s=0.2, ended_at=1796075970.5),
        "softwareupdate": Raw(stdout="", stderr=(probes / "softwareupdate_none.txt").read_text(), rc=0, took_s=3),
        "pf-rules": Raw(stdout="", stderr="", rc=0, took_s=0.1),
        "tb-ping:10.213.0.2": Raw(stdout=(probes / "ping_lost.txt").read_text(), stderr="", rc=2, took_s=2.0),
        "df": Raw(stdout="", stderr="df: .exo/models: No such file or directory", rc=1, took_s=0.1)}},
        failed={"a": {"tb-ping:10.213.0.6": "`ping -c 1 -t 2 10.213.0.6` gave no answer within 5 s"}})
    a = node_facts(g, "a")
    assert a.clock is not None and round(a.clock.offset_s, 1) == 3.6
    assert a.updates is not None and a.updates.pending == []
    assert a.pf_rules is not None and a.pf_rules.rules == []  # an empty anchor is read, and judged as open
    assert a.pf_info is None and "no answer" in a.problems["pf-info"]
    assert a.df is None and "No such file" in a.problems["df"]
    assert a.pings["10.213.0.2"].received == 0
    assert "10.213.0.6" not in a.pings and "gave no answer" in a.problems["tb-ping:10.213.0.6"]


def test_only_leaves_out_the_probes_no_selected_check_reads(monkeypatch, tmp_path) -> None:
    """`--only rdma` (what `watch` runs) does not ask softwareupdate, pfctl, date, df or ping."""
    from macfleet.collect.gather import Gathered
    from macfleet.flow import checks
    from macfleet.flow import doctor as flow
    from macfleet.inventory.load import load_inventory

    asked: dict = {}

    class NotDialled:
        def __init__(self, nodes):
            self.nodes = nodes

        def result(self):
            return Gathered(unreachable={n.name: "not dialled" for n in self.nodes})

        def abandon(self):
            raise AssertionError("the pass was not given up")

    def fake_start_gather(fleet, nodes, specs, **kw):
        nodes = list(nodes)
        per_node = kw.get("per_node")
        extra = [s for n in nodes for s in (per_node(n.name) if per_node else ())]
        asked["keys"] = {s.key for s in (*specs, *extra)}  # a slow probe is asked per node (its cache)
        asked["pings"] = [s for s in extra if s.kind == "tb-ping"]
        return NotDialled(nodes)

    monkeypatch.setenv("MACFLEET_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(checks, "start_gather", fake_start_gather)
    fleet = load_inventory(EXAMPLE_INVENTORY)
    flow.run_doctor(fleet, list(fleet.meshes), only=["rdma"])
    assert not asked["keys"] & {"date", "df", "softwareupdate", "pf-info", "pf-rules"} and not asked["pings"]
    flow.run_doctor(fleet, list(fleet.meshes))
    assert {"date", "df", "softwareupdate", "pf-info", "pf-rules"} <= asked["keys"] and asked["pings"]
