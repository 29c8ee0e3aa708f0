"""The doctor flow: one bounded pass of every probe on every node, judged by judge/health; `--fix` applies
the safe fixes through their playbooks and judges again. Also what `watch` runs as its probe."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from macfleet.collect.commands import (
    DOCTOR_SPECS,
    CommandSpec,
    exo_daemons_spec,
    exo_specs,
    ping_spec,
    probe_specs,
    spec_for,
)
from macfleet.collect.gather import Gathered, start_gather
from macfleet.errors import (
    EXIT_PROBLEMS,
    EXIT_UNREACHABLE,
    FactsParseError,
    MacfleetError,
    UsageError,
    most_severe_exit,
)
from macfleet.facts.kinds import AUTO_UPDATE_DOMAINS
from macfleet.inventory.model import ExoSettings, Fleet, Mesh, Node, ProbeSettings

# The parsers and judges are imported where they are used, not here: a doctor run dials every node first and
# imports them while the nodes answer (`run_doctor`), which hides most of the CLI's start-up behind the pass.
if TYPE_CHECKING:
    from macfleet.act.probecache import CachedAnswer
    from macfleet.collect.ssh import Raw
    from macfleet.judge.health import HealthReport, NodeFacts

# NodeFacts field -> (gather key, KIND)
FACT_KEYS: dict[str, tuple[str, str]] = {
    "thunderbolt": ("thunderbolt", "thunderbolt"),
    "hardware_ports": ("hardware-ports", "hardware-ports"),
    "service_order": ("service-order", "service-order"),
    "ifconfig": ("ifconfig", "ifconfig"),
    "netstat_routes": ("netstat-routes", "netstat-routes"),
    "ibv_devices": ("ibv-devices", "ibv-devices"),
    "ibv_devinfo": ("ibv-devinfo:verbose", "ibv-devinfo"),
    "rdma_ctl": ("rdma-ctl", "rdma-ctl"),
    "sw_vers": ("sw-vers", "sw-vers"),
    "sysctl": ("sysctl", "sysctl"),
    "pmset": ("pmset", "pmset"),
    "fdesetup": ("fdesetup", "fdesetup"),
    "tcp_sockets": ("netstat-listen", "netstat-listen"),  # read only where llama-rpc is enabled
}
CURL_REFUSED = 7  # curl: "Failed to connect": nothing listens on the port



def _probe_parsers() -> dict[str, tuple[str, Callable]]:
    """NodeFacts field -> (gather key, parser) for doctor's small probes (facts/probes.py, facts/disk.py)."""
    from macfleet.facts.daemons import parse_exo_daemons
    from macfleet.facts.disk import parse_df
    from macfleet.facts.probes import parse_pf_info, parse_pf_rules

    return {"df": ("df", parse_df), "pf_info": ("pf-info", parse_pf_info), "pf_rules": ("pf-rules", parse_pf_rules),
            "exo_daemons": ("exo-daemons", parse_exo_daemons)}


# check -> the probes only it (or another check of this table) reads ("tb-ping": each node's pings to its peers)
PROBE_OF_CHECK: dict[str, tuple[str, ...]] = {
    "clock-skew": ("date",), "disk": ("df",), "updates": ("softwareupdate",),
    "macos-target": ("softwareupdate",),
    "auto-updates": tuple(f"auto-updates:{d}" for d in AUTO_UPDATE_DOMAINS),
    "exo-api-exposure": ("pf-info", "pf-rules"), "tb-ping": ("tb-ping",),
    "llama-rpc": ("netstat-listen", "pf-info", "pf-rules"),
    "exo-version": ("exo-release",),
}


def unread_probes(checks: list[str] | None) -> set[str]:
    """The probes no check of `checks` reads (None: every check; nothing is left unread)."""
    if not checks:
        return set()
    wanted = {k for c in checks for k in PROBE_OF_CHECK.get(c, ())}
    return {k for keys in PROBE_OF_CHECK.values() for k in keys} - wanted


def doctor_specs(meshes: list[Mesh]) -> tuple[CommandSpec, ...]:
    exo = meshes[0].settings.exo if meshes else ExoSettings()
    port, models_dir = exo.port, exo.models_dir
    llama = (spec_for("netstat-listen"),) if any(m.settings.llama.enabled for m in meshes) else ()
    specs = (DOCTOR_SPECS + exo_specs(port, exo_install_root(meshes)) + probe_specs(models_dir)
             + (exo_daemons_spec(),) + llama)
    # probes.command_timeout_s bounds each command of a pass, doctor's as watch's (watch/probe.py); a cached probe
    # (CACHED_PROBES: asked at most every few hours, never by watch) keeps its own, longer timeout
    cap = min(m.settings.probes.command_timeout_s for m in meshes) if meshes else ProbeSettings().command_timeout_s
    return tuple(s if s.key in CACHED_PROBES else replace(s, timeout_s=min(s.timeout_s, cap)) for s in specs)


def exo_install_root(meshes: list[Mesh]) -> str:
    """Where exo's releases are (`macfleet_exo.install_root`): the `exo-release` read looks there."""
    return meshes[0].settings.exo.install_root if meshes else ExoSettings().install_root


def ping_specs(fleet: Fleet, meshes: list[Mesh]) -> dict[str, tuple[CommandSpec, ...]]:
    """Each node's one short ping to every peer of the IP plan, at the peer's address on their link."""
    from macfleet.judge.health import ping_targets

    return {n: tuple(ping_spec(a) for a in ping_targets(fleet, m.name, n)) for m in meshes for n in m.node_names}


def _read(gathered: Gathered, node: str, key: str, problems: dict[str, str], timed_out: list[str]) -> str | None:
    """A command's stdout, or None with the reason recorded: could not read is never nothing there."""
    failed = gathered.failed.get(node, {})
    if key in failed:
        problems[key] = failed[key]
        timed_out.append(key)
        return None
    raw = gathered.outputs.get(node, {}).get(key)
    if raw is None:
        problems[key] = "no answer (the command could not be started)"
        return None
    if raw.rc != 0 and not raw.stdout.strip():
        problems[key] = f"exit {raw.rc}: {raw.stderr.strip()[-200:] or 'no output'}"
        return None
    return raw.stdout


def _exo_facts(gathered: Gathered, node: str, problems: dict[str, str], timed_out: list[str]) -> dict:
    from macfleet.facts.exo import (
        log_since_start,
        parse_exo_release,
        parse_exo_state,
        parse_http_response,
        parse_node_id,
    )

    out: dict = {}
    raw = gathered.outputs.get(node, {}).get("exo-node-id")
    if raw is not None and raw.rc == CURL_REFUSED:
        out["exo_api"] = "refused"
        problems["exo"] = f"connection refused: {raw.stderr.strip()[-200:] or 'curl exit 7'}"
    elif (text := _read(gathered, node, "exo-node-id", problems, timed_out)) is not None:
        try:
            http = parse_http_response(text)
            out.update(exo_api="up" if http.status == 200 else None,
                       exo_node_id=parse_node_id(http.body) if http.status == 200 else None)
            if http.status != 200:
                problems["exo"] = f"GET /node_id answered {http.status}"
        except FactsParseError as e:
            problems["exo"] = e.message
    else:
        problems["exo"] = problems.get("exo-node-id", "no answer")
    if (text := _read(gathered, node, "exo-state", problems, timed_out)) is not None:
        try:
            out["exo_state"] = parse_exo_state(text)
        except FactsParseError as e:
            problems["exo-state"] = e.message
    if (text := _read(gathered, node, "exo-log", problems, timed_out)) is not None:
        out["exo_log"] = log_since_start(text)
    if (text := _read(gathered, node, "exo-release", problems, timed_out)) is not None:
        try:
            release = parse_exo_release(text)
        except FactsParseError as e:
            problems["exo-release"] = e.message
        else:
            out["exo_version"] = release.version
            if release.version is None:
                problems["exo-release"] = release.why_unknown()
    return out


def node_facts(gathered: Gathered, node: str) -> NodeFacts:
    """One node's outputs of the pass, parsed; each fact that could not be read says why."""
    from macfleet.facts.registry import parse
    from macfleet.judge.health import NodeFacts

    if node in gathered.unreachable:
        return NodeFacts(reachable=False, unreachable_reason=gathered.unreachable[node])
    problems: dict[str, str] = {}
    timed_out: list[str] = []
    values: dict = {}
    asked = {*gathered.outputs.get(node, {}), *gathered.failed.get(node, {})}
    for name, (key, kind) in FACT_KEYS.items():
        if name == "tcp_sockets" and key not in asked:
            continue  # asked only where llama-rpc is enabled
        text = _read(gathered, node, key, problems, timed_out)
        if text is None:
            continue
        try:
            values[name] = parse(kind, text)
        except FactsParseError as e:
            problems[key] = e.message
    values.update(_exo_facts(gathered, node, problems, timed_out))
    values.update(_probe_facts(gathered, node, problems, timed_out))
    return NodeFacts(**values, timed_out=timed_out, problems=problems)


def _parsed(text: str | None, parser: Callable, key: str, problems: dict[str, str]) -> object | None:
    if text is None:
        return None
    try:
        return parser(text)
    except FactsParseError as e:
        problems[key] = e.message
        return None


def _probe_facts(gathered: Gathered, node: str, problems: dict[str, str], timed_out: list[str]) -> dict:
    """The clock, disk, updates, packet filter and ping probes, parsed; what could not be read says why."""
    from macfleet.facts.probes import parse_epoch, parse_ping, parse_softwareupdate_list
    from macfleet.judge.health import ClockReading

    out: dict = {}
    for name, (key, parser) in _probe_parsers().items():
        if (value := _parsed(_read(gathered, node, key, problems, timed_out), parser, key, problems)) is not None:
            out[name] = value
    raw = gathered.outputs.get(node, {}).get("date")
    epoch = _parsed(_read(gathered, node, "date", problems, timed_out), parse_epoch, "date", problems)
    if epoch is not None and raw is not None and raw.ended_at is not None:
        out["clock"] = ClockReading(node_epoch_s=epoch.epoch_s, controller_at_s=raw.ended_at,
                                    round_trip_s=raw.took_s)
    elif epoch is not None:
        problems["date"] = "the controller did not note when the answer came"
    # softwareupdate prints its progress, and on some releases its verdict, on stderr
    text = _read(gathered, node, "softwareupdate", problems, timed_out)
    raw = gathered.outputs.get(node, {}).get("softwareupdate")
    if text is not None and raw is not None:
        updates = _parsed(f"{raw.stdout}\n{raw.stderr}", parse_softwareupdate_list, "softwareupdate", problems)
        if updates is not None:
            out["updates"] = updates
    out["update_prefs"] = _update_prefs(gathered, node, problems, timed_out)
    pings = {}
    for key in [k for k in (*gathered.outputs.get(node, {}), *gathered.failed.get(node, {})) if
                k.startswith("tb-ping:")]:
        ping = _parsed(_read(gathered, node, key, problems, timed_out), parse_ping, key, problems)
        if ping is not None:
            pings[key.split(":", 1)[1]] = ping
    out["pings"] = pings
    return out


def _update_prefs(gathered: Gathered, node: str, problems: dict[str, str], timed_out: list[str]) -> dict | None:
    """Each Software Update preferences domain's `defaults read` (a domain that does not exist is exit 1 and a
    fact: no key set), or None with the reason under "auto-updates" when one could not be read."""
    from macfleet.facts.defaults import AUTO_UPDATE_DOMAINS, parse_defaults_read

    out = {}
    for domain in AUTO_UPDATE_DOMAINS:
        key = f"auto-updates:{domain}"
        raw = gathered.outputs.get(node, {}).get(key)
        if key in gathered.failed.get(node, {}) or raw is None:
            _read(gathered, node, key, problems, timed_out)
            problems["auto-updates"] = problems.get(key, "no answer")
            return None
        try:
            out[domain] = parse_defaults_read(raw.stdout, raw.stderr, raw.rc)
        except FactsParseError as e:
            problems["auto-updates"] = e.message
            return None
    return out


@dataclass
class DoctorRun:
    report: HealthReport
    gathered: Gathered
    facts: dict[str, NodeFacts] = field(default_factory=dict)
    cached: dict[str, dict[str, float]] = field(default_factory=dict)  # node -> probe key -> age (s) of its answer


# ------------------------------------------------------------------------------------ the slow probe's cache

# Probes whose answer is kept between passes (act/probecache.py): key -> the probe setting of its maximum age.
CACHED_PROBES: dict[str, str] = {"softwareupdate": "updates_max_age_s"}


def _cache_key(fleet: Fleet, node: Node) -> str:
    from macfleet.act import probecache

    return probecache.node_key(str(fleet.root), node.name, node.address, node.port)


def _cache_plan(fleet: Fleet, nodes: list[Node], keys: set[str], fresh: bool, now: float
                ) -> dict[str, dict[str, CachedAnswer]]:
    """probe key -> node -> the cached answer this pass uses instead of asking (young enough, not --fresh)."""
    from macfleet.act import probecache

    plan: dict[str, dict[str, CachedAnswer]] = {}
    for key in keys & set(CACHED_PROBES):
        if fresh:
            plan[key] = {}
            continue
        found = probecache.load(key, [_cache_key(fleet, n) for n in nodes])
        plan[key] = {}
        for n in nodes:
            a = found.get(_cache_key(fleet, n))
            max_age = getattr(fleet.mesh(n.mesh).settings.probes, CACHED_PROBES[key])
            if a is not None and a.age_s(now) < max_age:
                plan[key][n.name] = a
    return plan


def _use_and_keep(fleet: Fleet, nodes: list[Node], gathered: Gathered,
                  plan: dict[str, dict[str, CachedAnswer]], now: float) -> dict[str, dict[str, float]]:
    """Put the cached answers into the pass as if just read (their age noted), and keep this pass's fresh ones.
    A probe that failed or timed out now is not cached: the next pass asks again."""
    from macfleet.act import probecache
    from macfleet.collect.ssh import Raw

    ages: dict[str, dict[str, float]] = {}
    for key, used in plan.items():
        fresh_answers = {}
        for n in nodes:
            if n.name in gathered.unreachable:
                continue  # an unreachable node is judged unreachable, not from an old answer
            if n.name in used:
                a = used[n.name]
                gathered.outputs.setdefault(n.name, {})[key] = Raw(stdout=a.stdout, stderr=a.stderr, rc=a.rc,
                                                                   took_s=0.0, ended_at=a.read_at)
                ages.setdefault(n.name, {})[key] = a.age_s(now)
            elif (raw := gathered.outputs.get(n.name, {}).get(key)) is not None and _answers(key, raw):
                fresh_answers[_cache_key(fleet, n)] = probecache.CachedAnswer(
                    stdout=raw.stdout, stderr=raw.stderr, rc=raw.rc, read_at=raw.ended_at or now)
        with contextlib.suppress(OSError):  # a cache that cannot be written only means the next pass asks again
            probecache.store(key, fresh_answers)
    return ages


def _answers(key: str, raw: Raw) -> bool:
    """Whether a slow probe's output is an answer worth keeping: it exited 0 and its parser reads it."""
    from macfleet.facts.probes import parse_softwareupdate_list

    parsers = {"softwareupdate": lambda r: parse_softwareupdate_list(f"{r.stdout}\n{r.stderr}")}
    if raw.rc != 0:
        return False
    try:
        parsers[key](raw)
    except FactsParseError:
        return False
    return True


def _pings_once(fleet: Fleet, meshes: list[Mesh]) -> Callable[[str], tuple[CommandSpec, ...]]:
    """`ping_specs` as a function of the node, worked out once, on the first node thread that asks for it (the
    IP plan behind it imports the judges: that happens while the other nodes shake hands)."""
    lock = threading.Lock()
    table: list[dict[str, tuple[CommandSpec, ...]]] = []

    def of(node: str) -> tuple[CommandSpec, ...]:
        with lock:
            if not table:
                table.append(ping_specs(fleet, meshes))
        return table[0].get(node, ())

    return of


def _judging_modules() -> None:
    """Import what parses and judges the pass (the parsers, the judges, the saved links bench), so it is done
    while the nodes answer, not after."""
    import macfleet.facts.registry
    import macfleet.flow.bench_links
    import macfleet.judge.health  # noqa: F401


def run_doctor(fleet: Fleet, meshes: list[Mesh], *, only: list[str] | None = None, now: datetime | None = None,
               cancel: threading.Event | None = None, deadline_s: float | None = None,
               dialled: Callable[[], None] | None = None, fresh: bool = False) -> DoctorRun:
    """One bounded pass over every node of `meshes`, judged. Never raises for a node's sake. `dialled` is
    called once every node is being dialled (the CLI says so then, and pays for its console meanwhile). A slow
    probe (CACHED_PROBES) is asked only of the nodes whose cached answer is older than its setting, or of all
    with `fresh`; the others' cached answers are judged, their ages in `DoctorRun.cached`."""
    import time

    nodes = [n for m in meshes for n in m.nodes]
    # a probe only one check reads is not run when that check is not selected (`softwareupdate --list` asks
    # Apple's catalogue: `watch` should not pay for it at every tick)
    skip = unread_probes(only)
    specs = tuple(s for s in doctor_specs(meshes) if s.key not in skip)
    # the slow probes go per node: the cache is read on the first node thread whose login is done (its file
    # and imports are not paid before the first handshake), and asks each node only what it has no young answer to
    slow = {s.key: s for s in specs if s.key in CACHED_PROBES}
    specs = tuple(s for s in specs if s.key not in slow)
    pings = None if "tb-ping" in skip else _pings_once(fleet, meshes)
    lock = threading.Lock()
    plans: list[dict[str, dict[str, CachedAnswer]]] = []

    def the_plan() -> dict[str, dict[str, CachedAnswer]]:
        with lock:
            if not plans:
                plans.append(_cache_plan(fleet, nodes, set(slow), fresh, time.time()))
        return plans[0]

    def per_node(node: str) -> tuple[CommandSpec, ...]:
        plan = the_plan() if slow else {}
        asked = tuple(s for key, s in slow.items() if node not in plan[key])
        return asked + (pings(node) if pings is not None else ())

    pending = start_gather(fleet, nodes, specs, cancel=cancel, deadline_s=deadline_s, per_node=per_node)
    try:
        if dialled is not None:
            dialled()
        _judging_modules()
    except BaseException:  # Ctrl-C (or a broken install) while the nodes answer: stop the pass too
        pending.abandon()
        raise
    gathered = pending.result()
    from macfleet.flow.bench_links import links_bench_inputs
    from macfleet.judge.health import judge_health

    ages = _use_and_keep(fleet, nodes, gathered, the_plan() if slow else {}, time.time())
    facts = {n.name: node_facts(gathered, n.name).model_copy(update={"ages": ages.get(n.name, {})})
             for n in nodes}
    report = judge_health(fleet, meshes, facts, now or datetime.now(UTC), only=only,
                          links_bench=links_bench_inputs(fleet, meshes))
    return DoctorRun(report=report, gathered=gathered, facts=facts, cached=ages)


# ------------------------------------------------------------------------------------------------- --fix

# check -> the playbook that fixes it (playbooks/<name>.yml); what is not here is not fixed automatically.
FIX_PLAYBOOKS: dict[str, str] = {
    "bridge": "network",
    "ip-plan": "network",
    "power": "power",
    "wired-limit": "power",
    "exo-running": "exo-service",
}


@dataclass
class FixStep:
    playbook: str
    nodes: list[str]
    checks: list[str]
    extravars: dict = field(default_factory=dict)
    status: str = "pending"  # "applied", "would apply" (--check), "failed: ...", "skipped: ..."
    changes: dict[str, list[str]] = field(default_factory=dict)  # node -> tasks that changed (or would)


@dataclass
class FixRun:
    before: HealthReport
    after: HealthReport | None
    steps: list[FixStep]
    not_fixed: list[tuple[str, str, str]]  # (node, check, why it is not fixed automatically)


def plan_fixes(report: HealthReport) -> tuple[list[FixStep], list[tuple[str, str, str]]]:
    """Which playbooks to run on which nodes, and which findings are left to a human (and why)."""
    steps: dict[str, FixStep] = {}
    left: list[tuple[str, str, str]] = []
    for f in report.findings:
        book = FIX_PLAYBOOKS.get(f.check)
        if book is None:
            left.append((f.node, f.check, f.fix))
            continue
        step = steps.setdefault(book, FixStep(playbook=book, nodes=[], checks=[]))
        if f.node not in step.nodes:
            step.nodes.append(f.node)
        if f.check not in step.checks:
            step.checks.append(f.check)
    return list(steps.values()), left


def fix_vars(step: FixStep, meshes: list[Mesh], facts: dict[str, NodeFacts]) -> dict:
    """The judge's values a fix playbook applies (the inventory's pmset, each node's planned wired limit)."""
    if step.playbook != "power":
        return {}
    from macfleet.judge.health import wired_limit_target

    mesh_of = {n: m for m in meshes for n in m.node_names}
    wired = {}
    for n in step.nodes:
        sysctl = facts[n].sysctl
        target = wired_limit_target(mesh_of[n], sysctl.int_value("hw.memsize") if sysctl else None)
        if target is not None:
            wired[n] = target
    return {"power_pmset": dict(mesh_of[step.nodes[0]].settings.power.pmset), "power_wired_limit_by_host": wired}


def fix_doctor(fleet: Fleet, meshes: list[Mesh], apply: Callable[[FixStep, Fleet, list[Mesh]], None], *,
               only: list[str] | None = None, fresh: bool = False) -> FixRun:
    """Judge, apply the safe fixes (never a reboot) through `apply` (one playbook run per step), judge again."""
    first = run_doctor(fleet, meshes, only=only, fresh=fresh)
    before = first.report
    steps, left = plan_fixes(before)
    for step in steps:
        step.extravars = fix_vars(step, meshes, first.facts)
    if not steps:
        return FixRun(before=before, after=None, steps=[], not_fixed=left)
    for step in steps:
        try:
            apply(step, fleet, meshes)
            step.status = "applied"
        except Exception as exc:  # a failed fix is reported with the rest; the second look says what is left
            step.status = f"failed: {getattr(exc, 'message', exc)}"
    after = run_doctor(fleet, meshes, only=only).report
    return FixRun(before=before, after=after, steps=steps, not_fixed=left)


def apply_fix_step(step: FixStep, fleet: Fleet, meshes: list[Mesh], *, check: bool = False,
                   diff: bool = False, on_diff: Callable[[str, str, str], None] | None = None) -> None:
    """Run one fix's playbook on its nodes. The IP plan is written as generated host_vars first (the same
    `prepare_apply` as `topology apply`), so the playbook applies exactly the plan doctor judged against.
    `check`: Ansible's check mode, against a private copy of the inventory (as `topology apply --check`), so
    nothing changes on a node or on disk; `diff`: Ansible's --diff. What changed (or would) is in `step.changes`."""
    # imported here: a plain doctor run (and `watch` at every tick) does not pay for Ansible's side
    from macfleet.act.ansible import PLAYBOOKS_DIR, PlaybookRun, run_playbook
    from macfleet.flow.topology import inventory_for_run, prepare_apply

    if not (PLAYBOOKS_DIR / f"{step.playbook}.yml").is_file():
        raise MacfleetError(f"playbooks/{step.playbook}.yml is not built yet", hint="; ".join(step.checks))
    with contextlib.ExitStack() as stack:
        inventory = fleet.root
        if step.playbook == "network":
            prepared = prepare_apply(fleet, [m for m in meshes if set(step.nodes) & set(m.node_names)])
            if check:
                inventory = stack.enter_context(inventory_for_run(fleet, prepared, check=True))
        result = run_playbook(PlaybookRun(playbook=step.playbook, inventory=inventory, limit=tuple(step.nodes),
                                          extravars=step.extravars, check=check, diff=diff),
                              on_event=lambda e: on_diff(e.host, e.task, e.diff) if e.diff and on_diff else None)
    step.changes = result.changes


def preview_fixes(fleet: Fleet, meshes: list[Mesh], *, only: list[str] | None = None, fresh: bool = False,
                  diff: bool = False, on_diff: Callable[[str, str, str], None] | None = None) -> FixRun:
    """`doctor --fix --check`: judge once, then run each fix's playbook in check mode on its nodes: which
    playbooks would run where, and the tasks that would change. Nothing changes; no second look."""
    first = run_doctor(fleet, meshes, only=only, fresh=fresh)
    steps, left = plan_fixes(first.report)
    for step in steps:
        step.extravars = fix_vars(step, meshes, first.facts)
        try:
            apply_fix_step(step, fleet, meshes, check=True, diff=diff, on_diff=on_diff)
            step.status = "would apply"
        except Exception as exc:  # reported with the rest, as a real run reports a failed fix
            step.status = f"failed: {getattr(exc, 'message', exc)}"
    return FixRun(before=first.report, after=None, steps=steps, not_fixed=left)


def check_catalogue() -> list:
    """`doctor --list`: every check with its stable code."""
    from macfleet.judge.health import CHECKS

    return list(CHECKS)


# Checks judged across a whole mesh (its cables and the RDMA ports on them, its IP plan keyed by pair, versions
# alike on every node, exo's view of its peers): not judged when `doctor --limit` leaves only part of a mesh.
MESH_WIDE_CHECKS = ("macos-build", "cabling", "rdma", "ip-plan", "exo-version", "exo-peers", "exo-rdma", "tb-ping",
                    "exo-api-exposure", "llama-rpc", "links-bench")


def limited_checks(only: list[str] | None) -> list[str]:
    """`--only` (or every check) without the mesh-wide ones, for a pass over part of a mesh."""
    from macfleet.judge.health import CHECK_CODES

    return [c for c in (only or CHECK_CODES) if c not in MESH_WIDE_CHECKS]


def parse_only(value: str | None) -> list[str] | None:
    """`--only a,b`: known check codes, or UsageError naming the unknown ones."""
    if not value:
        return None
    from macfleet.judge.health import CHECK_CODES

    codes = [c.strip() for c in value.split(",") if c.strip()]
    bad = [c for c in codes if c not in CHECK_CODES]
    if bad:
        raise UsageError(f"--only: unknown check(s) {', '.join(bad)}", hint="checks: " + ", ".join(CHECK_CODES))
    return codes


def doctor_exit_code(report: HealthReport) -> int:
    """3 when a node is unreachable, 1 for findings or a check that could not tell, else 0."""
    codes = [EXIT_UNREACHABLE] if report.summary.unreachable else []
    if report.findings or report.summary.unknown:
        codes.append(EXIT_PROBLEMS)
    return most_severe_exit(codes)


def fix_payload(run: FixRun) -> dict:
    """`doctor --fix --json`: the report before and after, the playbooks run and what was left."""
    return {"before": run.before.json_payload(), "after": run.after.json_payload() if run.after else None,
            "fixes": [{"playbook": s.playbook, "nodes": s.nodes, "checks": s.checks, "status": s.status,
                       "changes": s.changes} for s in run.steps],
            "not_fixed": [{"node": n, "check": c, "fix": w} for n, c, w in run.not_fixed]}
