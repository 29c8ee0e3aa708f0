"""What `watch` does about what a probe saw: pure `step(policy, state, observation, now) -> Step`.

A problem (a doctor check with findings on the mesh) must be seen on `debounce` probes in a row before
anything is done. Then it climbs its ladder from the policy, one rung per episode of `debounce` bad
probes: restart exo on the mesh, then reboot the whole mesh, then stop and page. A check that is not in
the ladder is only paged. Reboots are limited by a circuit breaker (at most R per window; once tripped,
nothing automatic until `macfleet watch --reset`) and happen only inside a maintenance window; exo restarts
are limited per window too (past the limit the ladder climbs past them); a pause file stops every action.
Every step carries its reason, including each time it decides not to act.

Guards (issue 28): a mesh in maintenance (a person's, or a rollout's, reboot's or upgrade's for its duration) is
observed and reported, never acted on, and nothing is counted toward an action meanwhile; no action while fewer
than `min_observed_share` of the mesh's nodes answered (a controller that lost its own network sees every node
down, and must not reboot the mesh); two reboots are at least `reboot_gap_s` apart; a reboot that failed (a node
did not come back) is tried again `reboot_retries` times before the ladder climbs to the page. Every page is
followed by one "back to healthy" notice (`Step.resolved`) once the mesh is healthy again.

A rung is used up only by an action that was carried out (`after(policy, step, outcome, now)`): a reboot
refused because the cluster lock is held uses no rung and does not count toward the breaker. After an action
the mesh settles for `settle_s`: what is seen then is recorded, not counted, and the ladder is kept (a probe
just after an exo restart reads exo refusing, then a runner that may crash again). The ladder starts again
only on a healthy probe after the mesh settled. A check the probe could not judge on a node counts as that
check's problem (the loop puts it in the observation as "could not tell"): a hung exo is not healthy.
No I/O, no clock: `now` is passed in, and the loop persists the state between probes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from macfleet.inventory.model import MaintenanceWindow, RemediationSettings

Action = Literal["none", "restart-exo", "reboot", "page"]
UNOBSERVED = "(too few nodes answered)"  # the streak of probes that could not see enough of the mesh
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True)
class Observation:
    """One probe of one mesh: which checks found a problem, on which nodes, in a few words."""

    problems: dict[str, list[str]] = field(default_factory=dict)  # check -> "node: message" lines
    paused: bool = False  # the pause file exists
    maintenance: str | None = None  # the maintenance in force on the mesh, in words (judge/maintenance.describe)
    observed: int | None = None  # how many of the mesh's `total` nodes answered the probe (None: not counted)
    total: int | None = None


@dataclass(frozen=True)
class State:
    """What the loop remembers between probes (persisted as JSON)."""

    streak: dict[str, int] = field(default_factory=dict)  # check -> consecutive bad probes this episode
    rung: dict[str, int] = field(default_factory=dict)  # check -> next rung of its ladder
    reboots: tuple[str, ...] = ()  # ISO times of the reboots watch carried out
    breaker_open_since: str | None = None
    paged: tuple[str, ...] = ()  # what was already paged this episode ("breaker", "window:rdma"...)
    restarts: tuple[str, ...] = ()  # ISO times of the exo restarts watch carried out
    settle_until: str | None = None  # ISO time: until then the last action's effects are not judged
    breaker_reason: str | None = None  # why the breaker opened, when not the reboot limit (a damaged state file)
    paging: bool = False  # a page went out this episode: a "back to healthy" notice is owed
    failed_reboots: int = 0  # reboots of this episode that failed (retried up to policy.reboot_retries)

    def to_json(self) -> dict:
        return {"streak": dict(self.streak), "rung": dict(self.rung), "reboots": list(self.reboots),
                "breaker_open_since": self.breaker_open_since, "paged": list(self.paged),
                "restarts": list(self.restarts), "settle_until": self.settle_until,
                "breaker_reason": self.breaker_reason, "paging": self.paging,
                "failed_reboots": self.failed_reboots}

    @classmethod
    def from_json(cls, data: object) -> State:
        """Strict: ValueError naming the first field that is not what `to_json` writes (a damaged file must
        be seen as damaged, never read as a smaller state)."""
        if not isinstance(data, dict):
            raise ValueError(f"a mesh's state is {type(data).__name__}, not an object")
        unknown = set(data) - set(cls().to_json())
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
        return cls(streak=_counts(data, "streak"), rung=_counts(data, "rung"), reboots=_times(data, "reboots"),
                   breaker_open_since=_time_or_none(data, "breaker_open_since"),
                   paged=_strings(data, "paged"), restarts=_times(data, "restarts"),
                   settle_until=_time_or_none(data, "settle_until"),
                   breaker_reason=_str_or_none(data, "breaker_reason"), paging=_bool(data, "paging"),
                   failed_reboots=_int(data, "failed_reboots"))


def _bool(data: dict, key: str) -> bool:
    value = data.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"{key}: expected true or false, got {str(value)[:80]!r}")
    return value


def _int(data: dict, key: str) -> int:
    value = data.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 10**9:
        raise ValueError(f"{key}: expected a count, got {str(value)[:80]!r}")
    return value


def _counts(data: dict, key: str) -> dict[str, int]:
    value = data.get(key, {})
    if not isinstance(value, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 10**9 for v in value.values()):
        raise ValueError(f"{key}: expected an object of check -> count, got {str(value)[:80]!r}")
    return {str(k): v for k, v in value.items()}


def _strings(data: dict, key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key}: expected a list of strings, got {str(value)[:80]!r}")
    return tuple(value)


def _times(data: dict, key: str) -> tuple[str, ...]:
    value = _strings(data, key)
    for t in value:
        _aware(key, t)
    return value


def _aware(key: str, t: str) -> datetime:
    try:
        when = datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(f"{key}: {t[:80]!r} is not an ISO time") from None
    if when.tzinfo is None:
        raise ValueError(f"{key}: {t[:80]!r} has no time zone")
    return when


def _str_or_none(data: dict, key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise ValueError(f"{key}: expected a string or null, got {str(value)[:80]!r}")
    return value


def _time_or_none(data: dict, key: str) -> str | None:
    value = _str_or_none(data, key)
    if value is not None:
        _aware(key, value)
    return value


def damaged(state: State, why: str, now: datetime) -> State:
    """What watch goes on from when its state file was damaged: whatever it still knows (`state`, from
    memory), with the breaker open, so it is never more willing to act than with the state it lost."""
    return replace(state, breaker_open_since=state.breaker_open_since or now.isoformat(), breaker_reason=why)


@dataclass(frozen=True)
class Step:
    action: Action
    state: State
    reason: str
    check: str | None = None  # the finding class the decision is about
    page: bool = False  # also notify a human (set with an action, or alone with action "page")
    rung: int | None = None  # with an action: the index of the rung it takes (used up once carried out)
    resolved: bool = False  # healthy again after a page: send the "back to healthy" notice


Outcome = Literal["done", "failed", "refused"]


def after(policy: RemediationSettings, s: Step, outcome: Outcome, now: datetime) -> State:
    """The state once the step's action was tried: carried out ("done", or "failed" part way: something was
    done) uses up its rung, counts toward its limit, and starts the settling time; "refused" (the lock was
    held, the reboot's preflight said no) changes nothing: the next probe that still sees the problem tries
    again."""
    if s.action not in ("restart-exo", "reboot") or s.check is None or s.rung is None or outcome == "refused":
        return s.state
    state = s.state
    settle = (now + timedelta(seconds=policy.settle_s)).isoformat()
    if s.action == "reboot":
        state = replace(state, reboots=(*state.reboots, now.isoformat()))
        if outcome == "failed" and state.failed_reboots < policy.reboot_retries:
            # a node did not come back: the same rung once more (after the gap) before the ladder climbs
            return replace(state, failed_reboots=state.failed_reboots + 1, streak={**state.streak, s.check: 0},
                           settle_until=settle)
    else:
        state = replace(state, restarts=(*state.restarts, now.isoformat()))
    return replace(state, rung={**state.rung, s.check: s.rung + 1}, streak={**state.streak, s.check: 0},
                   settle_until=settle)


# ------------------------------------------------------------------------------------------- windows


def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def window_contains(window: MaintenanceWindow, now: datetime) -> bool:
    """True when `now` (aware) falls in the window; an end before the start runs past midnight, and then the
    part after midnight belongs to the day the window started (kured's semantics)."""
    local = now.astimezone(ZoneInfo(window.timezone))
    minute = local.hour * 60 + local.minute
    start, end = _minutes(window.start), _minutes(window.end)
    today = DAYS[local.weekday()]
    if start <= end:
        return today in window.days and start <= minute <= end
    yesterday = DAYS[(local.weekday() - 1) % 7]
    return (today in window.days and minute >= start) or (yesterday in window.days and minute <= end)


def in_windows(windows: list[MaintenanceWindow], now: datetime) -> bool:
    """No window configured means any time."""
    return not windows or any(window_contains(w, now) for w in windows)


def describe_window(w: MaintenanceWindow) -> str:
    return f"{','.join(w.days)} between {w.start} and {w.end} {w.timezone}"


def describe_policy(policy: RemediationSettings, interval_s: float) -> list[str]:
    """The whole policy in words, logged when watch starts (as kured does)."""
    ladder = "; ".join(f"{check}: {' -> '.join(rungs)} -> page" for check, rungs in policy.ladder.items())
    windows = "; ".join(describe_window(w) for w in policy.windows) or "any time (no maintenance window set)"
    return [
        f"probe every {interval_s:g} s (jittered), checks: {', '.join(policy.checks)}",
        f"a problem must be seen on {policy.debounce} probes in a row before any action",
        f"ladder: {ladder}; any other finding is paged only",
        f"circuit breaker: at most {policy.reboot_breaker_limit} reboot(s) per {policy.reboot_breaker_window_s:g} s, "
        "then no automatic action until `macfleet watch --reset`",
        f"exo restarts: at most {policy.restart_limit} per {policy.restart_window_s:g} s, then the ladder climbs "
        f"past them; after an action the mesh settles for {policy.settle_s:g} s before it is judged again",
        "a check that cannot be judged on a node (exo hung, an answer that cannot be read) counts as its problem",
        f"reboots only: {windows}",
        f"pause file: {policy.pause_file} (while it exists, no action); a mesh in maintenance (`macfleet "
        "maintenance`, or a rollout, reboot or upgrade under way) is observed only, and nobody is paged",
        f"no action while fewer than {policy.min_observed_share:.0%} of a mesh's nodes answer the probe",
        f"reboots at least {policy.reboot_gap_s:g} s apart; a failed reboot is tried {policy.reboot_retries} more "
        "time(s) before paging; every page is followed by a \"back to healthy\" notice",
        f"webhook: {'set' if policy.webhook else 'none'}",
    ]


# ---------------------------------------------------------------------------------------------- step


def reboots_in_window(state: State, policy: RemediationSettings, now: datetime) -> int:
    since = now - timedelta(seconds=policy.reboot_breaker_window_s)
    return sum(datetime.fromisoformat(t) > since for t in state.reboots)


def restarts_in_window(state: State, policy: RemediationSettings, now: datetime) -> int:
    since = now - timedelta(seconds=policy.restart_window_s)
    return sum(datetime.fromisoformat(t) > since for t in state.restarts)


def settling(state: State, now: datetime) -> bool:
    return state.settle_until is not None and now < datetime.fromisoformat(state.settle_until)


def _once(state: State, key: str) -> tuple[State, bool]:
    """(state with `key` marked paged, whether this is the first time this episode)."""
    if key in state.paged:
        return state, False
    return replace(state, paged=(*state.paged, key)), True


def _count(state: State, obs: Observation) -> State:
    """Another bad probe. Streaks count per check; the rungs are kept until a healthy probe after the mesh
    settled (the probe after an exo restart sees other checks fail than the one it was for)."""
    streak = {c: state.streak.get(c, 0) + 1 for c in obs.problems}
    # a class that cleared ends its episode: its pages may be sent again next time
    paged = tuple(p for p in state.paged if p == "breaker" or p.split(":", 1)[-1] in obs.problems)
    return replace(state, streak=streak, paged=paged)


def _what(obs: Observation, check: str) -> str:
    lines = obs.problems[check]
    return f"{check} ({'; '.join(lines[:3])}{' …' if len(lines) > 3 else ''})"


def step(policy: RemediationSettings, state: State, obs: Observation, now: datetime) -> Step:
    """One decision for one probe of one mesh, and whether a page or a "back to healthy" notice goes with it."""
    s = _decide(policy, state, obs, now)  # in maintenance it never pages: planned work
    if s.page:
        return replace(s, state=replace(s.state, paging=True))
    if state.paging and not obs.problems:
        return replace(s, resolved=True, state=replace(s.state, paging=False))
    return s


def _decide(policy: RemediationSettings, state: State, obs: Observation, now: datetime) -> Step:
    if obs.maintenance is not None:
        # the work under way owns the mesh: a streak seen now is its doing, and counts for nothing after it
        what = f"; now: {', '.join(obs.problems)}" if obs.problems else "; healthy"
        return Step("none", replace(state, streak={}, rung={}, settle_until=None, failed_reboots=0),
                    f"{obs.maintenance}: observing only, not acting{what}")
    if state.breaker_open_since is not None:
        what = f"; now: {', '.join(obs.problems)}" if obs.problems else ""
        why = f" ({state.breaker_reason})" if state.breaker_reason else ""
        return Step("none", _count(state, obs) if obs.problems else state,
                    f"circuit breaker open since {state.breaker_open_since}{why}: no automatic action until "
                    f"`macfleet watch --reset`{what}")
    if settling(state, now):
        if not obs.problems:
            return Step("none", replace(state, streak={}),
                        f"healthy so far; settling after the last action until {state.settle_until} "
                        "(the ladder is kept until the mesh is healthy after that)")
        return Step("none", replace(state, streak={}),
                    f"settling after the last action until {state.settle_until}: "
                    f"{', '.join(obs.problems)} seen, not counted yet")
    if not obs.problems:
        was = ", ".join(state.streak or state.rung) if state.streak or state.rung else None
        return Step("none", replace(state, streak={}, rung={}, paged=(), settle_until=None, failed_reboots=0),
                    f"healthy (recovered from {was})" if was else "healthy")
    blind = _blind(policy, obs)
    if blind is not None:
        # counted apart (a glitch of one probe pages nobody); the checks' own streaks stop meanwhile
        seen = state.streak.get(UNOBSERVED, 0) + 1
        state = replace(state, streak={UNOBSERVED: seen})
        if seen < policy.debounce:
            return Step("none", state, f"{blind}; {seen}/{policy.debounce} probes in a row")
        state, first = _once(state, "blind")
        return Step("page" if first else "none", state, blind + ("; paging" if first else " (already paged)"),
                    page=first)
    state = _count(state, obs)
    if obs.paused:
        return Step("none", state, f"paused by the pause file {policy.pause_file}: not acting on "
                                   f"{', '.join(obs.problems)}")
    ready = [c for c in obs.problems if state.streak[c] >= policy.debounce]
    if not ready:
        seen = ", ".join(f"{c} {state.streak[c]}/{policy.debounce}" for c in obs.problems)
        return Step("none", state, f"debouncing: {seen} probes in a row")
    # the ladder's classes first (in policy order), so a remediable problem is not hidden by a paged one
    check = next((c for c in policy.ladder if c in ready), ready[0])
    return _climb(policy, state, obs, check, now)


def _blind(policy: RemediationSettings, obs: Observation) -> str | None:
    """Why nothing may be done: too few of the mesh's nodes answered to tell the mesh from the controller's
    own network (None: enough did)."""
    if obs.observed is None or not obs.total or obs.observed / obs.total >= policy.min_observed_share:
        return None
    return (f"only {obs.observed} of {obs.total} node(s) answered the probe, under the {policy.min_observed_share:.0%} "
            "needed to act: the controller may have lost its own network; not acting, nothing counted "
            f"({', '.join(obs.problems)})")


def _climb(policy: RemediationSettings, state: State, obs: Observation, check: str, now: datetime) -> Step:
    rungs = policy.ladder.get(check)
    what = _what(obs, check)
    if not rungs:
        state, first = _once(state, f"page:{check}")
        return Step("page" if first else "none", state,
                    f"{what}: not remediable by policy (not in the ladder); "
                    + ("paging" if first else "already paged"), check=check, page=first)
    index = state.rung.get(check, 0)
    skipped = ""
    restarts = restarts_in_window(state, policy, now)
    while index < len(rungs) and rungs[index] == "restart-exo" and restarts >= policy.restart_limit:
        skipped = (f"; exo was restarted {restarts} time(s) in the last {policy.restart_window_s:g} s (the limit "
                   f"is {policy.restart_limit}): not again")
        index += 1
    if index >= len(rungs):
        state, first = _once(state, f"page:{check}")
        return Step("page" if first else "none", state,
                    f"{what}: still there after {' -> '.join(rungs)}{skipped}; stop and page"
                    + ("" if first else " (already paged)"), check=check, page=first)
    rung = rungs[index]
    if rung == "reboot":
        blocked = _reboot_blocked(policy, state, what, check, now)
        if blocked is not None:
            return blocked
        if state.failed_reboots:
            skipped += (f"; the last reboot failed: trying again (retry {state.failed_reboots} of "
                        f"{policy.reboot_retries}) before paging")
    return Step(rung, state, f"{what} seen on {policy.debounce} probes in a row{skipped}: {rung} (rung "
                             f"{index + 1} of {len(rungs)})", check=check, page=True, rung=index)


def _reboot_blocked(policy: RemediationSettings, state: State, what: str, check: str, now: datetime) -> Step | None:
    done = reboots_in_window(state, policy, now)
    if done >= policy.reboot_breaker_limit:
        state = replace(state, breaker_open_since=now.isoformat())
        state, _ = _once(state, "breaker")
        return Step("page", state, f"{what} needs a reboot, but {done} reboot(s) in the last "
                                   f"{policy.reboot_breaker_window_s:g} s reach the limit of "
                                   f"{policy.reboot_breaker_limit}: circuit breaker tripped; no automatic action "
                                   "until `macfleet watch --reset`", check=check, page=True)
    last = max((datetime.fromisoformat(t) for t in state.reboots), default=None)
    if last is not None and now < last + timedelta(seconds=policy.reboot_gap_s):
        return Step("none", state, f"{what} needs a reboot, but the last was at {last.isoformat(timespec='seconds')}: "
                                   f"reboots are at least {policy.reboot_gap_s:g} s apart; waiting", check=check)
    if not in_windows(policy.windows, now):
        windows = "; ".join(describe_window(w) for w in policy.windows)
        state, first = _once(state, f"window:{check}")
        return Step("page" if first else "none", state,
                    f"{what} needs a reboot, but now ({now.isoformat(timespec='minutes')}) is outside the "
                    f"maintenance window ({windows}): not rebooting" + ("; paging" if first else " (already paged)"),
                    check=check, page=first)
    return None
