"""The remediation step as tables (kured's timewindow tests style): sequences of probes → decisions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from macfleet.inventory.model import MaintenanceWindow, RemediationSettings
from macfleet.judge.remediation import Observation, State, after, describe_policy, in_windows, step, window_contains

T0 = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)  # a Monday
WEDGE = Observation(problems={"rdma": ["studio-1: RDMA wedged"]})
EXO = Observation(problems={"exo-running": ["studio-2: exo does not answer"]})
OK = Observation()


def run(policy: RemediationSettings, probes: list[Observation], every_s: float = 30, state: State | None = None,
        outcome: str = "done"):
    """Each probe's step, its action carried out (`outcome`) as the loop does."""
    state = state or State()
    out = []
    for i, obs in enumerate(probes):
        now = T0 + timedelta(seconds=i * every_s)
        s = step(policy, state, obs, now)
        assert s.reason, "every decision says why"
        out.append(s)
        state = after(policy, s, outcome, now)
    return out


def actions(steps) -> list[str]:
    return [s.action for s in steps]


@pytest.mark.parametrize(
    ("probes", "expected"),
    [
        ([OK, OK], ["none", "none"]),
        ([WEDGE, WEDGE], ["none", "none"]),  # debounce 3: not yet
        ([WEDGE, WEDGE, WEDGE], ["none", "none", "reboot"]),
        ([WEDGE, OK, WEDGE, WEDGE], ["none", "none", "none", "none"]),  # a good probe resets the count
        ([WEDGE, WEDGE, WEDGE, WEDGE, WEDGE, WEDGE], ["none", "none", "reboot", "none", "none", "page"]),
        ([EXO, EXO, EXO], ["none", "none", "restart-exo"]),
        ([EXO] * 6 + [EXO], ["none", "none", "restart-exo", "none", "none", "page", "none"]),  # paged once
    ],
)
def test_debounce_and_ladder(probes, expected):
    assert actions(run(RemediationSettings(debounce=3, settle_s=0), probes)) == expected


def test_restart_then_reboot_then_page():
    policy = RemediationSettings(debounce=2, ladder={"exo-runners": ["restart-exo", "reboot"]}, settle_s=0)
    bad = Observation(problems={"exo-runners": ["studio-1: RunnerFailed"]})
    steps = run(policy, [bad] * 7)
    assert actions(steps) == ["none", "restart-exo", "none", "reboot", "none", "page", "none"]
    assert "stop and page" in steps[5].reason and steps[5].page


def test_breaker_trips_after_r_reboots_and_stays_open_until_reset():
    policy = RemediationSettings(debounce=1, ladder={"rdma": ["reboot"]}, reboot_breaker_limit=2)
    state = State()
    seen = []
    for i in range(5):
        # after every reboot the wedge comes back: a new episode each time (a good probe between)
        for obs in (OK, WEDGE):
            s = step(policy, state, obs, T0 + timedelta(minutes=40 * i))
            state = after(policy, s, "done", T0 + timedelta(minutes=40 * i))
        seen.append(s)
    assert actions(seen) == ["reboot", "reboot", "page", "none", "none"]
    assert "circuit breaker tripped" in seen[2].reason
    assert all("circuit breaker open since" in s.reason and "--reset" in s.reason for s in seen[3:])
    assert step(policy, state, OK, T0 + timedelta(hours=1)).action == "none"  # healthy: still open
    fresh = step(policy, State(), WEDGE, T0 + timedelta(hours=1))  # what --reset gives
    assert fresh.action == "reboot"


def test_breaker_window_slides():
    policy = RemediationSettings(debounce=1, ladder={"rdma": ["reboot"]}, reboot_breaker_limit=1,
                                 reboot_breaker_window_s=3600)
    old = State(reboots=((T0 - timedelta(hours=2)).isoformat(),))
    assert step(policy, old, WEDGE, T0).action == "reboot"
    recent = State(reboots=((T0 - timedelta(minutes=5)).isoformat(),))
    assert step(policy, recent, WEDGE, T0).action == "page"


def test_outside_window_no_reboot_pages_once_and_says_why():
    policy = RemediationSettings(debounce=1, windows=[MaintenanceWindow(days=["sat", "sun"], start="02:00",
                                                                        end="06:00")])
    steps = run(policy, [WEDGE, WEDGE])
    assert actions(steps) == ["page", "none"]
    assert "outside the maintenance window" in steps[0].reason and "sat,sun between 02:00 and 06:00" in \
        steps[0].reason
    assert "already paged" in steps[1].reason
    # exo restarts are not bound to the window
    assert actions(run(policy, [EXO])) == ["restart-exo"]


def test_pause_file_stops_every_action():
    policy = RemediationSettings(debounce=1)
    s = step(policy, State(), Observation(problems=WEDGE.problems, paused=True), T0)
    assert s.action == "none" and "paused" in s.reason and "watch.pause" in s.reason


def test_not_in_ladder_is_paged_only():
    policy = RemediationSettings(debounce=2)
    hung = Observation(problems={"reachable": ["studio-3: unreachable"]})
    steps = run(policy, [hung, hung, hung])
    assert actions(steps) == ["none", "page", "none"]
    assert "not remediable by policy" in steps[1].reason


def test_ladder_class_wins_over_a_paged_one():
    policy = RemediationSettings(debounce=1)
    both = Observation(problems={"reachable": ["studio-3: unreachable"], "rdma": ["studio-1: wedged"]})
    assert step(policy, State(), both, T0).action == "reboot"


def test_state_round_trips_through_json():
    s = run(RemediationSettings(debounce=1, reboot_breaker_limit=0), [WEDGE])[-1].state
    assert State.from_json(s.to_json()) == s and s.breaker_open_since


@pytest.mark.parametrize(
    ("days", "start", "end", "tz", "at", "inside"),
    [
        (["mon"], "02:00", "06:00", "UTC", "2026-11-30T03:00+00:00", True),
        (["mon"], "02:00", "06:00", "UTC", "2026-11-30T06:01+00:00", False),
        (["tue"], "02:00", "06:00", "UTC", "2026-11-30T03:00+00:00", False),
        (["mon"], "21:00", "05:00", "UTC", "2026-11-30T23:00+00:00", True),  # across midnight
        (["mon"], "21:00", "05:00", "UTC", "2026-12-01T04:59+00:00", True),  # Tuesday morning, Monday's window
        (["mon"], "21:00", "05:00", "UTC", "2026-11-30T04:00+00:00", False),  # Monday morning: Sunday's
        (["mon"], "03:00", "03:00", "UTC", "2026-11-30T03:00+00:00", True),  # one minute
        (["mon"], "02:00", "06:00", "Europe/Paris", "2026-11-30T03:30+00:00", True),  # 04:30 in Paris
        (["mon"], "02:00", "06:00", "Europe/Paris", "2026-11-30T05:30+00:00", False),
    ],
)
def test_window_contains(days, start, end, tz, at, inside):
    w = MaintenanceWindow(days=days, start=start, end=end, timezone=tz)
    assert window_contains(w, datetime.fromisoformat(at)) is inside


def test_no_window_means_any_time():
    assert in_windows([], T0)


@pytest.mark.parametrize(
    "bad",
    [
        {"windows": [{"start": "25:00"}]},
        {"windows": [{"timezone": "Mars/Olympus"}]},
        {"ladder": {"rdma": ["reboot", "restart-exo"]}},
        {"ladder": {"rdma": []}},
        {"ladder": {"rdma": ["reset"]}},
        {"debounce": 0},
        {"webhook": "ftp://x"},
    ],
)
def test_bad_policy_is_refused(bad):
    with pytest.raises(ValidationError):
        RemediationSettings.model_validate(bad)


def test_policy_in_words():
    words = "\n".join(describe_policy(RemediationSettings(), 30))
    assert "3 probes in a row" in words and "rdma: reboot -> page" in words and "--reset" in words


# ------------------------------------------------------------------ guards (issue 28 items 2 and 3)

REBOOTER = RemediationSettings(debounce=1, settle_s=0, ladder={"rdma": ["reboot"]})


def test_a_mesh_in_maintenance_is_observed_only_nothing_counted_nobody_paged():
    work = Observation(problems=WEDGE.problems, maintenance="mesh m in maintenance by ana until …: recabling")
    s = step(REBOOTER, State(streak={"rdma": 5}), work, T0)
    assert s.action == "none" and not s.page and "observing only" in s.reason and "recabling" in s.reason
    assert s.state.streak == {} and s.state.rung == {}
    # once it ends, a fresh episode: the debounce counts from the first probe after the work
    policy = RemediationSettings(debounce=2, settle_s=0, ladder={"rdma": ["reboot"]})
    assert step(policy, s.state, WEDGE, T0).action == "none"


def test_planned_work_silences_pages_and_every_page_is_followed_by_one_back_to_healthy_notice():
    runner = Observation(problems={"exo-runners": ["studio-3: RunnerFailed"]})
    paged = step(REBOOTER, State(), runner, T0)
    assert paged.action == "page" and paged.page and paged.state.paging
    back = step(REBOOTER, paged.state, OK, T0)
    assert back.resolved and not back.state.paging
    assert not step(REBOOTER, back.state, OK, T0).resolved  # once
    quiet = step(REBOOTER, State(), Observation(problems=runner.problems, maintenance="in maintenance"), T0)
    assert not quiet.page and not quiet.state.paging


@pytest.mark.parametrize(("observed", "acts"), [(4, True), (3, True), (2, False), (0, False)])
def test_no_action_while_too_few_nodes_answer(observed, acts):
    """A controller that cannot see half the mesh (its own network is down) does not reboot it."""
    obs = Observation(problems=WEDGE.problems, observed=observed, total=4)
    policy = RemediationSettings(debounce=2, settle_s=0, ladder={"rdma": ["reboot"]})
    first = step(policy, State(), obs, T0)
    s = step(policy, first.state, obs, T0)
    assert (s.action == "reboot") is acts
    if not acts:
        assert not first.page and "1/2 probes" in first.reason  # one blind probe pages nobody
        assert f"only {observed} of 4" in s.reason and "rdma" not in s.state.streak and s.page
        assert not step(policy, s.state, obs, T0).page  # paged once
        assert step(policy, s.state, WEDGE, T0).action == "none"  # seen again: the rdma streak starts anew


def test_reboots_are_apart_by_the_gap():
    policy = RemediationSettings(debounce=1, settle_s=0, ladder={"rdma": ["reboot"]}, reboot_gap_s=1800,
                                 reboot_breaker_limit=5)
    recent = State(reboots=((T0 - timedelta(minutes=10)).isoformat(),))
    s = step(policy, recent, WEDGE, T0)
    assert s.action == "none" and "at least 1800 s apart" in s.reason
    assert step(policy, recent, WEDGE, T0 + timedelta(minutes=21)).action == "reboot"


def test_a_failed_reboot_is_retried_before_the_page():
    policy = RemediationSettings(debounce=1, settle_s=0, ladder={"rdma": ["reboot"]}, reboot_gap_s=0,
                                 reboot_breaker_limit=5, reboot_retries=1)
    first = step(policy, State(), WEDGE, T0)
    state = after(policy, first, "failed", T0)
    again = step(policy, state, WEDGE, T0 + timedelta(minutes=1))
    assert again.action == "reboot" and "retry 1 of 1" in again.reason
    state = after(policy, again, "failed", T0 + timedelta(minutes=1))
    assert step(policy, state, WEDGE, T0 + timedelta(minutes=2)).action == "page"
