"""What `watch` does about what a probe saw: pure `step(policy, state, observation, now) -> Step`.

A problem (a doctor check with findings on the mesh) must be seen on `debounce` probes in a row before
anything is done. Then it climbs its ladder from the policy, one rung per episode of `debounce` bad
probes: restart exo on the mesh, then reboot the whole mesh, then stop and page. A check that is not in
the ladder is only paged. Reboots are limited by a circuit breaker (at most R per window; once tripped,
nothing automatic until `macfleet watch --reset`) and happen only inside a maintenance window; a pause
file stops every action. Every step carries its reason, including each time it decides not to act.
No I/O, no clock: `now` is passed in, and the loop persists the state between probes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from macfleet.inventory.model import MaintenanceWindow, RemediationSettings

Action = Literal["none", "restart-exo", "reboot", "page"]
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


@dataclass(frozen=True)
class Observation:
    """One probe of one mesh: which checks found a problem, on which nodes, in a few words."""

    problems: dict[str, list[str]] = field(default_factory=dict)  # check -> "node: message" lines
    paused: bool = False  # the pause file exists


@dataclass(frozen=True)
class State:
    """What the loop remembers between probes (persisted as JSON)."""

    streak: dict[str, int] = field(default_factory=dict)  # check -> consecutive bad probes this episode
    rung: dict[str, int] = field(default_factory=dict)  # check -> next rung of its ladder
    reboots: tuple[str, ...] = ()  # ISO times of the reboots watch started
    breaker_open_since: str | None = None
    paged: tuple[str, ...] = ()  # what was already paged this episode ("breaker", "window:rdma"...)

    def to_json(self) -> dict:
        return {"streak": dict(self.streak), "rung": dict(self.rung), "reboots": list(self.reboots),
                "breaker_open_since": self.breaker_open_since, "paged": list(self.paged)}

    @classmethod
    def from_json(cls, data: dict) -> State:
        return cls(streak={str(k): int(v) for k, v in dict(data.get("streak") or {}).items()},
                   rung={str(k): int(v) for k, v in dict(data.get("rung") or {}).items()},
                   reboots=tuple(str(t) for t in data.get("reboots") or ()),
                   breaker_open_since=data.get("breaker_open_since"),
                   paged=tuple(str(p) for p in data.get("paged") or ()))


@dataclass(frozen=True)
class Step:
    action: Action
    state: State
    reason: str
    check: str | None = None  # the finding class the decision is about
    page: bool = False  # also notify a human (set with an action, or alone with action "page")


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
        f"reboots only: {windows}",
        f"pause file: {policy.pause_file} (while it exists, no action)",
        f"webhook: {'set' if policy.webhook else 'none'}",
    ]


# ---------------------------------------------------------------------------------------------- step


def reboots_in_window(state: State, policy: RemediationSettings, now: datetime) -> int:
    since = now - timedelta(seconds=policy.reboot_breaker_window_s)
    return sum(datetime.fromisoformat(t) > since for t in state.reboots)


def _once(state: State, key: str) -> tuple[State, bool]:
    """(state with `key` marked paged, whether this is the first time this episode)."""
    if key in state.paged:
        return state, False
    return replace(state, paged=(*state.paged, key)), True


def _count(state: State, obs: Observation) -> State:
    streak = {c: state.streak.get(c, 0) + 1 for c in obs.problems}
    rung = {c: r for c, r in state.rung.items() if c in obs.problems}
    # a class that cleared ends its episode: its pages may be sent again next time
    paged = tuple(p for p in state.paged if p == "breaker" or p.split(":", 1)[-1] in obs.problems)
    return replace(state, streak=streak, rung=rung, paged=paged)


def _what(obs: Observation, check: str) -> str:
    lines = obs.problems[check]
    return f"{check} ({'; '.join(lines[:3])}{' …' if len(lines) > 3 else ''})"


def step(policy: RemediationSettings, state: State, obs: Observation, now: datetime) -> Step:
    """One decision for one probe of one mesh."""
    if state.breaker_open_since is not None:
        what = f"; now: {', '.join(obs.problems)}" if obs.problems else ""
        return Step("none", _count(state, obs) if obs.problems else state,
                    f"circuit breaker open since {state.breaker_open_since}: no automatic action until "
                    f"`macfleet watch --reset`{what}")
    if not obs.problems:
        was = ", ".join(state.streak) if state.streak else None
        return Step("none", replace(state, streak={}, rung={}, paged=()),
                    f"healthy (recovered from {was})" if was else "healthy")
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


def _climb(policy: RemediationSettings, state: State, obs: Observation, check: str, now: datetime) -> Step:
    rungs = policy.ladder.get(check)
    what = _what(obs, check)
    if not rungs:
        state, first = _once(state, f"page:{check}")
        return Step("page" if first else "none", state,
                    f"{what}: not remediable by policy (not in the ladder); "
                    + ("paging" if first else "already paged"), check=check, page=first)
    index = state.rung.get(check, 0)
    if index >= len(rungs):
        state, first = _once(state, f"page:{check}")
        return Step("page" if first else "none", state,
                    f"{what}: still there after {' -> '.join(rungs)}; stop and page"
                    + ("" if first else " (already paged)"), check=check, page=first)
    rung = rungs[index]
    if rung == "reboot":
        blocked = _reboot_blocked(policy, state, what, check, now)
        if blocked is not None:
            return blocked
        state = replace(state, reboots=(*state.reboots, now.isoformat()))
    state = replace(state, rung={**state.rung, check: index + 1}, streak={**state.streak, check: 0})
    return Step(rung, state, f"{what} seen on {policy.debounce} probes in a row: {rung} (rung {index + 1} of "
                             f"{len(rungs)})", check=check, page=True)


def _reboot_blocked(policy: RemediationSettings, state: State, what: str, check: str, now: datetime) -> Step | None:
    done = reboots_in_window(state, policy, now)
    if done >= policy.reboot_breaker_limit:
        state = replace(state, breaker_open_since=now.isoformat())
        state, _ = _once(state, "breaker")
        return Step("page", state, f"{what} needs a reboot, but {done} reboot(s) in the last "
                                   f"{policy.reboot_breaker_window_s:g} s reach the limit of "
                                   f"{policy.reboot_breaker_limit}: circuit breaker tripped; no automatic action "
                                   "until `macfleet watch --reset`", check=check, page=True)
    if not in_windows(policy.windows, now):
        windows = "; ".join(describe_window(w) for w in policy.windows)
        state, first = _once(state, f"window:{check}")
        return Step("page" if first else "none", state,
                    f"{what} needs a reboot, but now ({now.isoformat(timespec='minutes')}) is outside the "
                    f"maintenance window ({windows}): not rebooting" + ("; paging" if first else " (already paged)"),
                    check=check, page=first)
    return None
