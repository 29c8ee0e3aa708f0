"""macOS updates: none pending, the inventory's target build, and automatic updates switched off."""

from __future__ import annotations

from macfleet.errors import FactsParseError
from macfleet.facts.commands import probe_specs
from macfleet.facts.defaults import parse_defaults_read
from macfleet.facts.kinds import AUTO_UPDATE_DOMAINS
from macfleet.facts.probes import parse_softwareupdate_list
from macfleet.judge.autoupdate import AUTO_UPDATE_PREFS, wrong_prefs
from macfleet.judge.checks.base import (
    Answers,
    Check,
    HealthContext,
    HealthFinding,
    Probe,
    Unknown,
    Verdict,
    parsed,
    pick,
)


def check_updates(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.updates is None:
        return Unknown(reason=f.why("softwareupdate"))
    if not f.updates.pending:
        return []
    labels = [u.label for u in f.updates.pending]
    macos = [u.label for u in f.updates.pending if u.is_macos]
    what = f"a macOS update ({', '.join(macos)})" if macos else "software updates"
    return [HealthFinding(
        node=node, check="updates", severity="warning",
        message=f"{node} has {what} pending: installed on one node only, the mesh would run two builds and "
                "exo and JACCL need one",
        fix="name the build in the inventory (macfleet_macos.build) and install it on every node of the mesh with "
            "`macfleet upgrade` (docs/runbooks/macos-upgrade.md; Screen Sharing for what it cannot install)",
        evidence=f"softwareupdate --list{cached_note(f.ages.get('softwareupdate'))}: " + "; ".join(labels))]


def check_macos_target(ctx: HealthContext, node: str) -> Verdict:
    """Where the node stands against the inventory's target build (macfleet_macos.build): on it, offered it, or
    not offered it (judge/upgrade.py)."""
    from macfleet.judge.upgrade import standing

    settings = ctx.mesh_of(node).settings.macos
    if not settings.build:
        return []
    f = ctx.facts[node]
    build = f.sw_vers.build_version if f.sw_vers is not None else None
    s = standing(node, build, f.updates, settings.build, why=f.why("softwareupdate"))
    if s.standing == "on-target":
        return []
    if s.standing == "unknown":
        return Unknown(reason=s.why)
    late = settings.deadline is not None and ctx.now.date() > settings.deadline
    due = f" (deadline {settings.deadline} {'passed' if late else 'ahead'})" if settings.deadline else ""
    if s.standing == "offered":
        return [HealthFinding(
            node=node, check="macos-target", severity="error" if late else "warning",
            message=f"{node} runs build {build}, not the mesh's target {settings.build}{due}; Apple offers it there",
            fix="`macfleet upgrade --check` shows the plan, then `macfleet upgrade --password-file FILE` installs it "
                "one node at a time (docs/runbooks/macos-upgrade.md)",
            evidence=f"sw_vers: {build}; softwareupdate --list{cached_note(f.ages.get('softwareupdate'))}: "
                     f"{s.label}")]
    return [HealthFinding(
        node=node, check="macos-target", severity="error",
        message=f"{node} runs build {build}, not the mesh's target {settings.build}{due}, and Apple does not offer "
                f"{settings.build} there ({', '.join(s.offered) or 'no macOS update'} offered)",
        fix="if Apple offers only a newer build, choose it as the target for the whole mesh (macfleet_macos.build) "
            "or keep the current one; see docs/runbooks/macos-upgrade.md",
        evidence=f"sw_vers: {build}; softwareupdate --list{cached_note(f.ages.get('softwareupdate'))}: "
                 f"{', '.join(s.offered) or 'no macOS update'}")]


def check_auto_updates(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    wrong = wrong_prefs(f.update_prefs or {})
    if wrong is None:
        return Unknown(reason=f.why("auto-updates"))
    if not wrong:
        return []
    return [HealthFinding(
        node=node, check="auto-updates", severity="error",
        message=f"{node} may install a macOS update or restart by itself: {'; '.join(wrong)}. One node updated "
                "overnight leaves the mesh on two builds (exo and JACCL need one), and may come back with RDMA off",
        fix="`macfleet bootstrap` switches them off again (playbooks/roles/autoupdate); if they come back after "
            "that, an MDM profile or a person in System Settings > General > Software Update sets them",
        evidence="defaults read " + ", ".join(AUTO_UPDATE_PREFS) + ": " + "; ".join(wrong))]


def age_words(seconds: float) -> str:
    """`3 min`, `2 h 5 min`, `1 d 3 h`: how old an answer is, for a person."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def cached_note(age_s: float | None) -> str:
    """` (answer of 2 h 5 min ago, cached; doctor --fresh asks again)`, or "" for an answer read in this pass."""
    return "" if age_s is None else f" (answer of {age_words(age_s)} ago, cached; `doctor --fresh` asks again)"


# ------------------------------------------------------------------------------------------- declarations


def _read_updates(answers: Answers) -> dict[str, object]:
    """`softwareupdate --list`: it prints its progress, and on some releases its verdict, on stderr."""
    if answers.text("softwareupdate") is None:
        return {}
    raw = answers.raw("softwareupdate")
    updates = parsed(answers, "softwareupdate", parse_softwareupdate_list, f"{raw.stdout}\n{raw.stderr}")
    return {} if updates is None else {"updates": updates}


def _read_prefs(answers: Answers) -> dict[str, object]:
    """Each Software Update preferences domain's `defaults read` (a domain that does not exist is exit 1 and a
    fact: no key set), or None with the reason under "auto-updates" when one could not be read."""
    out = {}
    for domain in AUTO_UPDATE_DOMAINS:
        key = f"auto-updates:{domain}"
        raw = answers.raw(key)
        if raw is None or answers.problem(key) is not None:
            answers.text(key)
            answers.unread("auto-updates", answers.problem(key) or "no answer")
            return {"update_prefs": None}
        try:
            out[domain] = parse_defaults_read(raw.stdout, raw.stderr, raw.rc)
        except FactsParseError as e:
            answers.unread("auto-updates", e.message)
            return {"update_prefs": None}
    return {"update_prefs": out}


PROBES = (
    # asks Apple's catalogue over the network: slow on a real Mac, so its answer is kept between passes
    Probe(key="softwareupdate", command=lambda s: pick(probe_specs(), "softwareupdate"), read=_read_updates,
          fills=("updates",), cache="updates_max_age_s"),
    Probe(key="auto-updates", command=lambda s: pick(probe_specs(), "auto-updates"), read=_read_prefs,
          fills=("update_prefs",)),
)
_R = ("reachable",)
CHECKS = (
    Check(code="updates", title="no pending software update (softwareupdate --list)", order=180,
          judge=check_updates, reads=("softwareupdate",), depends=_R),
    Check(code="macos-target", title="the node runs the inventory's target build (macfleet_macos.build), or Apple "
          "offers it there", order=190, judge=check_macos_target, reads=("sw-vers", "softwareupdate"), depends=_R),
    Check(code="auto-updates", title="automatic macOS install, download and restart switched off (the Software "
          "Update preferences bootstrap sets)", order=200, judge=check_auto_updates, reads=("auto-updates",),
          depends=_R),
)
