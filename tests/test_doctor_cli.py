"""`macfleet doctor` wiring: --list, --only validation, exit codes, and --fix's plan (playbook runs recorded)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from macfleet.cli.doctor import exit_code
from macfleet.flow.doctor import FIX_PLAYBOOKS, plan_fixes
from macfleet.judge.health import CHECK_CODES, CheckResult, HealthFinding, HealthReport, HealthSummary
from tests.conftest import EXAMPLE_INVENTORY


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
    assert "rdma" not in FIX_PLAYBOOKS and "reachable" not in FIX_PLAYBOOKS
