"""The node itself: SSH reaches it, its macOS build, power settings, wired memory, FileVault, clock and disk."""

from __future__ import annotations

import re

from macfleet.errors import AT_UNLOCK_SCREEN
from macfleet.facts.commands import probe_specs
from macfleet.facts.disk import parse_df
from macfleet.facts.probes import parse_epoch
from macfleet.inventory.model import Mesh
from macfleet.judge.checks.base import (
    Answers,
    Check,
    ClockReading,
    HealthContext,
    HealthFinding,
    Probe,
    Unknown,
    Verdict,
    kind_probe,
    odd_one_out,
    parsed,
    pick,
)

MIN_MACOS = (26, 2)


# --------------------------------------------------------------------------------------------- the checks


def check_reachable(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts.get(node)
    if f is not None and f.reachable:
        return []
    why = (f.unreachable_reason if f else None) or "no answer"
    if AT_UNLOCK_SCREEN in why:  # up, but its FileVault Data volume is locked (apple_ssh_and_filevault(7))
        fix = (f"unlock it: `macfleet unlock {node} --password-file FILE` (a FileVault-enabled user's password), "
               "or type the password at its console (docs/runbooks/unattended-reboot.md)")
    elif "host key" in why.lower():
        fix = (f"if {node} was reinstalled, check its new host key out of band and replace its line in the "
               "inventory's known_hosts; otherwise treat it as an intrusion")
    else:
        from macfleet.judge.reach import is_dns_failure, unreachable_fix

        fix = unreachable_fix(node, why) if is_dns_failure(why) else (
            f"check that {node} is powered on and on the network; a hung Mac needs a power cycle")
    return [HealthFinding(node=node, check="reachable", severity="error", message=f"{node} is unreachable: {why}",
                          fix=fix, evidence=why)]


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version)[:3])


def _build(ctx: HealthContext, node: str) -> str | None:
    sw = ctx.facts[node].sw_vers if ctx.up(node) else None
    return sw.build_version or None if sw is not None else None


def check_macos_build(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.sw_vers is None or not f.sw_vers.build_version:
        return Unknown(reason=f.why("sw-vers"))
    mine = f.sw_vers
    out: list[HealthFinding] = []
    if mine.product_version and _version_tuple(mine.product_version) < MIN_MACOS:
        out.append(HealthFinding(
            node=node, check="macos-build", severity="error",
            message=f"{node} runs macOS {mine.product_version}: RDMA over Thunderbolt needs 26.2 or later",
            fix="upgrade macOS on every node to the same build (docs/runbooks/macos-upgrade.md)",
            evidence=f"sw_vers: {mine.product_version} ({mine.build_version})"))
    builds = {n: _build(ctx, n) for n in ctx.mesh_of(node).node_names}
    odd = odd_one_out(builds, node, "macOS build")
    if isinstance(odd, Unknown):
        return out or odd
    if odd:
        others = ", ".join(f"{n} {b}" for n, b in sorted(builds.items()) if n != node and b)
        out.append(HealthFinding(
            node=node, check="macos-build", severity="error",
            message=f"{node} runs build {mine.build_version} ({mine.product_version}), not the mesh's "
                    f"{'/'.join(odd)}: exo and JACCL need the same macOS build on every node",
            fix="bring every node to one build with the macOS-upgrade runbook (docs/runbooks/macos-upgrade.md); "
                "macOS updates need the Mac's screen or Screen Sharing",
            evidence=f"sw_vers on {node}: {mine.build_version}; {others}"))
    return out


def check_power(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.pmset is None:
        return Unknown(reason=f.why("pmset"))
    want = ctx.mesh_of(node).settings.power.pmset
    wrong = {k: (f.pmset.settings.get(k), str(v)) for k, v in want.items() if f.pmset.settings.get(k) != str(v)}
    if not wrong:
        return []
    have = ", ".join(f"{k} {h if h is not None else 'unset'} (want {w})" for k, (h, w) in sorted(wrong.items()))
    return [HealthFinding(node=node, check="power", severity="error",
                          message=f"{node}'s power settings would let it sleep or not restart: {have}",
                          fix="`macfleet doctor --fix` applies the inventory's pmset values (playbooks/power.yml)",
                          evidence=f"pmset -g: {have}")]


def wired_limit_target(mesh: Mesh, memsize_bytes: int | None) -> int | None:
    """The iogpu.wired_limit_mb the inventory asks for on a node with that much memory (None: unknown)."""
    setting = mesh.settings.power.wired_limit_mb
    if setting != "auto":
        return int(setting)
    if memsize_bytes is None:
        return None
    return max(0, memsize_bytes // (1024 * 1024) - mesh.settings.power.wired_reserve_mb)


def check_wired_limit(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.sysctl is None:
        return Unknown(reason=f.why("sysctl"))
    have = f.sysctl.int_value("iogpu.wired_limit_mb")
    want = wired_limit_target(ctx.mesh_of(node), f.sysctl.int_value("hw.memsize"))
    if have is None or want is None:
        return Unknown(reason="sysctl printed no iogpu.wired_limit_mb or hw.memsize")
    if have == want:
        return []
    why = "macOS's default (it resets at every reboot)" if have == 0 else f"{have} MB"
    return [HealthFinding(node=node, check="wired-limit", severity="error",
                          message=f"{node}'s GPU wired memory limit is {why}, not the {want} MB planned: "
                                  "large models may not fit",
                          fix="`macfleet doctor --fix` sets it again (playbooks/power.yml)",
                          evidence=f"sysctl iogpu.wired_limit_mb: {have}")]


def check_filevault(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.fdesetup is None:
        return Unknown(reason=f.why("fdesetup"))
    if not f.fdesetup.filevault_on:
        return []
    return [HealthFinding(node=node, check="filevault", severity="warning",
                          message=f"FileVault is on on {node}: after a plain reboot it waits at the unlock screen, "
                                  "so an unattended mesh reboot would strand it",
                          fix="reboot it only with `fdesetup authrestart` (macfleet reboot does, with a stored "
                              "credential), or turn FileVault off at the Mac (docs/runbooks/doctor.md)",
                          evidence=f"fdesetup status: {f.fdesetup.status_line}")]


# ------------------------------------------------------------------------------------------------ clock, disk


def check_clock_skew(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.clock is None:
        return Unknown(reason=f.why("date"))
    limit = ctx.mesh_of(node).settings.probes.clock_skew_max_s
    offset = f.clock.offset_s
    if abs(offset) - f.clock.slack_s <= limit:
        return []
    way = "ahead of" if offset > 0 else "behind"
    return [HealthFinding(
        node=node, check="clock-skew", severity="warning",
        message=f"{node}'s clock is {abs(offset):.0f} s {way} the controller's (more than the "
                f"{limit:g} s allowed by probes.clock_skew_max_s): logs across the mesh disagree, and TLS "
                "downloads fail once it is far off",
        fix="turn network time on at the node (`sudo systemsetup -setusingnetworktime on`, or System Settings > "
            "General > Date & Time) and let it reach its time server (`sntp time.apple.com` shows the offset); "
            "check the controller's own clock too",
        evidence=f"date -u +%s on {node}: {f.clock.node_epoch_s}; controller: {f.clock.controller_at_s:.1f} "
                 f"after a {f.clock.round_trip_s * 1000:.0f} ms round trip")]


GB = 1_000_000_000


def check_disk(ctx: HealthContext, node: str) -> Verdict:
    f = ctx.facts[node]
    if f.df is None:
        return Unknown(reason=f.why("df"))
    mesh = ctx.mesh_of(node)
    want = mesh.settings.probes.min_free_disk_gb * GB
    free = f.df.available_bytes
    if free >= want:
        return []
    return [HealthFinding(
        node=node, check="disk", severity="error" if free < GB else "warning",
        message=f"only {free / GB:.1f} GB free on {node}'s models volume ({f.df.device}), less than the "
                f"{want / GB:g} GB set (probes.min_free_disk_gb): a model download or staging fails there",
        fix=f"delete the models no longer used from {mesh.settings.exo.models_dir} on {node} (and anything else "
            "filling the volume), or move the models to a larger volume (exo.models_dir)",
        evidence=f"df -k {mesh.settings.exo.models_dir}: {f.df.available_kb} KiB available of {f.df.total_kb}")]


# ------------------------------------------------------------------------------------------- declarations


def _read_clock(answers: Answers) -> dict[str, object]:
    """`date -u +%s`, with when its answer came to the controller and after how long a round trip."""
    epoch = parsed(answers, "date", parse_epoch)
    if epoch is None:
        return {}
    raw = answers.raw("date")
    if raw is None or raw.ended_at is None:
        answers.unread("date", "the controller did not note when the answer came")
        return {}
    return {"clock": ClockReading(node_epoch_s=epoch.epoch_s, controller_at_s=raw.ended_at,
                                  round_trip_s=raw.took_s)}


PROBES = (
    kind_probe("sw_vers", "sw-vers"),
    kind_probe("sysctl", "sysctl"),
    kind_probe("pmset", "pmset"),
    kind_probe("fdesetup", "fdesetup"),
    Probe(key="date", command=lambda s: pick(probe_specs(), "date"), read=_read_clock, fills=("clock",)),
    # `df -k` of the models directory
    Probe(key="df", command=lambda s: pick(probe_specs(s.mesh.settings.exo.models_dir), "df"), fact="df",
          parse=parse_df),
)
_R = ("reachable",)
CHECKS = (
    Check(code="reachable", title="SSH reaches the node and its host key matches known_hosts", order=10,
          judge=check_reachable),
    Check(code="macos-build", title="macOS 26.2 or later, the same build on every node of the mesh", order=20,
          judge=check_macos_build, reads=("sw-vers",), depends=_R, mesh_wide=True),
    Check(code="power", title="pmset as the inventory says (no sleep, restart after power loss)", order=70,
          judge=check_power, reads=("pmset",), depends=_R, fix="power"),
    Check(code="wired-limit", title="iogpu.wired_limit_mb as planned", order=80, judge=check_wired_limit,
          reads=("sysctl",), depends=_R, fix="power"),
    Check(code="filevault", title="FileVault will not strand an unattended reboot", order=90,
          judge=check_filevault, reads=("fdesetup",), depends=_R),
    Check(code="clock-skew", title="the node's clock within probes.clock_skew_max_s of the controller's",
          order=160, judge=check_clock_skew, reads=("date",), depends=_R),
    Check(code="disk", title="at least probes.min_free_disk_gb free on the models volume", order=170,
          judge=check_disk, reads=("df",), depends=_R),
)
