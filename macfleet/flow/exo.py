"""`macfleet exo ...`: models placed on the mesh and prompts answered, through exo's own API (act/exoapi.py,
curl on a node over its SSH login): status, place, chat, stop, and a tunnel to exo's dashboard.

exo's state is the cluster's: any node's API places, answers and shows every instance. These flows talk to the
first node of the mesh that logs in (the others only for `status`, which asks each node about itself).
"""

from __future__ import annotations

import contextlib
import time
import urllib.parse
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from macfleet.errors import ExoApiError, Refused, UsageError
from macfleet.flow import Say, model_dir, quiet
from macfleet.flow.meshes import one_mesh
from macfleet.judge.placement import ChatReport, ExoStatus, NodeExo, PlaceReport, StopReport, view

if TYPE_CHECKING:
    from macfleet.act.exoapi import ExoApi
    from macfleet.facts.exoapi import ExoCluster, ExoInstance
    from macfleet.inventory.model import Fleet, Mesh
    from macfleet.judge.placement import Choice, Refusal

STOP_TIMEOUT_S = 60.0
CHAT_TIMEOUT_S = 600.0
POLL_S = 0.5
DOWNLOADS_SETTLE_S = 10.0  # exo's /state shows a model's files on a node within its scan interval
ANSWER_S = 5.0  # a node's exo answering /node_id, before it is asked for anything


@contextlib.contextmanager
def api_on(fleet: Fleet, m: Mesh, node: str | None = None) -> Iterator[ExoApi]:
    """exo's API on `node`; without one, on the first node of the mesh that logs in and whose exo answers (a
    node rebooting or with exo stopped is passed over: any node's exo speaks for the cluster)."""
    from macfleet.act.exoapi import ExoApi
    from macfleet.collect.ssh import SshSession, SshTarget, Unreachable
    from macfleet.errors import UnreachableError

    why: dict[str, str] = {}
    for name in [node] if node else list(m.node_names):
        session = SshSession(SshTarget.for_node(fleet, fleet.node(name)))
        try:
            session.connect()
            api = ExoApi(session, port=m.settings.exo.port, node=name)
            if node is None:
                api.json("GET", "/node_id", timeout_s=ANSWER_S)
        except (Unreachable, UnreachableError, ExoApiError) as exc:
            why[name] = getattr(exc, "message", None) or str(exc)
            session.close()
            continue
        try:
            yield api
        finally:
            session.close()
        return
    if why and all(isinstance(w, str) and "not answering" in w for w in why.values()):
        raise ExoApiError(f"no exo answers on mesh {m.name}: " + "; ".join(why.values()), node=m.name,
                          hint="`macfleet exo status` and `macfleet doctor` say why")
    raise UnreachableError(why)


def cluster(api: ExoApi) -> ExoCluster:
    from macfleet.facts.exoapi import parse_cluster

    return parse_cluster(api.json("GET", "/state"))


# ------------------------------------------------------------------------------------------------ status


def _release(api: ExoApi, m: Mesh) -> tuple[str | None, str | None]:
    """exo's release installed on the node (its API does not say it), or None and why it could not be read."""
    from macfleet.collect.commands import exo_specs
    from macfleet.collect.ssh import CommandTimeout, Unreachable
    from macfleet.errors import FactsParseError
    from macfleet.facts.exo import parse_exo_release

    spec = next(s for s in exo_specs(m.settings.exo.port, m.settings.exo.install_root) if s.key == "exo-release")
    try:
        return parse_exo_release(api.session.run(spec).stdout).version, None
    except FactsParseError as exc:
        return None, f"its exo release could not be read: {exc.message}"
    except (CommandTimeout, Unreachable) as exc:
        return None, f"its exo release could not be read: {exc}"


def _node_exo(fleet: Fleet, m: Mesh, name: str) -> tuple[NodeExo, ExoCluster | None]:
    from macfleet.errors import FactsParseError, UnreachableError
    from macfleet.facts.exo import parse_node_id

    out = NodeExo(node=name)
    state = None
    try:
        with api_on(fleet, m, name) as api:
            out.release, unread = _release(api, m)
            try:
                out.node_id = parse_node_id(api.json("GET", "/node_id"))
                state = cluster(api)
                out.running = True
            except (ExoApiError, FactsParseError) as exc:
                out.problem = getattr(exc, "message", str(exc))
            out.problem = "; ".join(p for p in (out.problem, unread) if p) or None
    except UnreachableError as exc:
        out.reachable, out.problem = False, "; ".join(exc.nodes.values())
    return out, state


def status(fleet: Fleet, mesh: str | None = None) -> ExoStatus:
    """Each node's exo (release, running, the peers its /state shows) and the instances with their shards."""
    from macfleet.act.fanout import each_node

    m = one_mesh(fleet, mesh)
    found = each_node(list(m.node_names), lambda n: _node_exo(fleet, m, n))
    nodes = [found[n][0] for n in m.node_names]  # type: ignore[index]
    names = {n.node_id: n.node for n in nodes if n.node_id}
    states = [found[n][1] for n in m.node_names if found[n][1] is not None]  # type: ignore[index]
    for n in nodes:
        st = found[n.node][1]  # type: ignore[index]
        if st is not None:
            n.peers = sorted(names.get(p, st.name_of(p)) for p in st.nodes if p != n.node_id)
    names.update({k: v for st in states for k, v in st.names.items() if k not in names})
    instances = [view(i, names) for i in states[0].instances] if states else []
    return ExoStatus(mesh=m.name, nodes=nodes, instances=instances)


# ------------------------------------------------------------------------------------------------ place


def place(fleet: Fleet, model: str, *, mesh: str | None = None, sharding: str = "pipeline", transport: str = "rdma",
          min_nodes: int = 1, wait: bool = False, check: bool = False, timeout_s: float | None = None,
          say: Say = quiet) -> PlaceReport:
    """exo's preview for the model; refused with exo's reason (or when the model is not on a node it needs);
    placed unless --check; with `wait`, until every runner of it is ready, for `timeout_s` (default: the
    inventory's exo.place_timeout_s)."""
    from macfleet.facts.exoapi import parse_previews
    from macfleet.judge.placement import TRANSPORTS, Refusal, choose, no_card

    model_dir(model)  # exo's ids: ORG/NAME, as `rollout model` takes them
    m = one_mesh(fleet, mesh)
    if min_nodes > len(m.nodes):
        raise UsageError(f"--min-nodes {min_nodes}: mesh {m.name} has {len(m.nodes)} nodes")
    with api_on(fleet, m) as api:
        state = cluster(api)
        names = _names(m, state)
        report = PlaceReport(mesh=m.name, model=model, sharding=sharding, transport=transport, nodes=[], check=check)
        existing = [i for i in state.instances if i.model == model]
        if existing:
            report.already, report.instance = True, view(existing[0], names)
            report.nodes = [s.node for s in report.instance.shards]
            say(f"{model} is placed already (instance {existing[0].instance_id}): nothing to do")
            return report
        if len(state.nodes) < min_nodes:
            seen = ", ".join(sorted(names.get(n, n[:8]) for n in state.nodes)) or "none"
            raise Refused(f"exo on {api.node} sees {len(state.nodes)} of mesh {m.name}'s {len(m.nodes)} nodes "
                          f"({seen}): fewer than --min-nodes {min_nodes}",
                          hint="`macfleet exo status` shows which exo sees whom; `macfleet doctor` says why")
        try:
            previews = parse_previews(api.json("GET", "/instance/previews", query={"model_id": model}))
        except ExoApiError as exc:
            if exc.status != 400:
                raise
            refusal = no_card(state, model, exc.exo_says or exc.message)
            raise Refused(refusal.reason, hint=refusal.hint) from None
        got = choose(previews, model, sharding=sharding, transport=transport, min_nodes=min_nodes)
        refusal = got if isinstance(got, Refusal) else _missing_on(api, got, state, model)
        if refusal is not None:
            raise Refused(refusal.reason, hint=refusal.hint)
        assert not isinstance(got, Refusal)
        report.nodes = [names.get(n, n[:8]) for n in got.preview.nodes]
        report.memory_bytes = {names.get(n, n[:8]): b for n, b in got.preview.memory.items()}
        if check:
            return report
        say(f"placing {model} on {', '.join(report.nodes)} ({sharding} over {transport})")
        api.json("POST", "/place_instance", body={"model_id": model, "sharding": got.preview.sharding,
                                                  "instance_meta": TRANSPORTS[transport], "min_nodes": min_nodes})
        report.placed = True
        if wait:
            started = time.monotonic()
            waits = timeout_s if timeout_s is not None else m.settings.exo.place_timeout_s
            inst = _await_ready(api, model, waits, say)
            report.instance, report.waited_s = view(inst, names), round(time.monotonic() - started, 1)
    return report


def _missing_on(api: ExoApi, choice: Choice, state: ExoCluster, model: str) -> Refusal | None:
    """The refusal for a model missing on a node of the placement, once exo's /state, which follows the disks
    at its own pace, has had DOWNLOADS_SETTLE_S to show a model just pushed."""
    from macfleet.judge.placement import missing_on

    deadline = time.monotonic() + DOWNLOADS_SETTLE_S
    while (refusal := missing_on(choice, state, model)) is not None and time.monotonic() < deadline:
        time.sleep(POLL_S * 2)
        state = cluster(api)
    return refusal


def _names(m: Mesh, state: ExoCluster) -> dict[str, str]:
    from macfleet.judge.placement import node_names

    return node_names(state, {n.name: n.address for n in m.nodes})


def _await_ready(api: ExoApi, model: str, timeout_s: float, say: Say) -> ExoInstance:
    """exo's /instance/await (an instance exists), then /state until all its runners are ready; a failed runner
    or the deadline is an error naming it."""
    from macfleet.facts.exoapi import parse_await

    deadline = time.monotonic() + timeout_s
    for event in api.events("GET", "/instance/await", query={"model_id": model,
                                                             "timeout_seconds": min(300, round(timeout_s))},
                            timeout_s=timeout_s):
        if event.data is not None:
            kind, what = parse_await(event.data)
            if kind != "ready":
                raise ExoApiError(f"{api.node}: {what}", node=api.node)
            break
    say("placed: waiting until every runner has loaded its shard")
    while True:
        inst = next((i for i in cluster(api).instances if i.model == model), None)
        if inst is not None and inst.ready:
            return inst
        if inst is not None and inst.failed:
            s = inst.failed[0]
            raise ExoApiError(f"{model}: a runner failed: {s.error or s.status}", node=api.node,
                              hint="`macfleet doctor` names the node and the fix")
        if time.monotonic() > deadline:
            states = ", ".join(sorted({s.status for s in inst.shards})) if inst else "no instance"
            raise ExoApiError(f"{model} was not ready within {timeout_s:g} s ({states})", node=api.node)
        time.sleep(POLL_S)


# ------------------------------------------------------------------------------------------------ chat


def chat(fleet: Fleet, model: str, prompt: str, *, mesh: str | None = None, max_tokens: int | None = None,
         on_text: Callable[[str], None] = quiet, timeout_s: float = CHAT_TIMEOUT_S) -> ChatReport:
    """Stream a completion of `prompt` from the model's instance, each piece to `on_text` as it comes."""
    from macfleet.facts.exoapi import parse_chat_chunk, parse_stats
    from macfleet.judge.placement import speeds

    model_dir(model)  # exo's ids: ORG/NAME, as `rollout model` takes them
    m = one_mesh(fleet, mesh)
    body: dict = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    with api_on(fleet, m) as api:
        started = time.monotonic()
        text, stats, last, first_s, last_s = [], None, None, None, None
        try:
            for event in api.events("POST", "/v1/chat/completions", body=body, timeout_s=timeout_s):
                if event.comment is not None:
                    stats = parse_stats(event.comment) or stats
                    continue
                if event.data is None:
                    continue
                piece = parse_chat_chunk(event.data)
                if piece.error:
                    raise ExoApiError(f"{model}: exo failed mid-answer: {piece.error}", node=api.node,
                                      hint="`macfleet exo status` shows the instance's runners; `macfleet doctor`")
                if piece.text:
                    first_s = first_s or time.monotonic() - started
                    last_s = time.monotonic() - started
                    text.append(piece.text)
                    on_text(piece.text)
                last = piece if piece.finish_reason else last
        except ExoApiError as exc:
            if exc.status == 404:
                raise Refused(f"{model} is not placed on mesh {m.name} (exo: {exc.exo_says or exc.message})",
                              hint=f"place it first: `macfleet exo place {model} --wait`") from None
            raise
        got = speeds(stats, prompt_tokens=last.prompt_tokens if last else None,
                     generation_tokens=last.completion_tokens if last else len(text), first_token_s=first_s,
                     last_token_s=last_s)
        return ChatReport(mesh=m.name, model=model, node=api.node, answer="".join(text),
                          finish_reason=last.finish_reason if last else None, prompt_tokens=got.prompt_tokens,
                          generation_tokens=got.generation_tokens, prompt_tps=_r(got.prompt_tps),
                          generation_tps=_r(got.generation_tps), speeds_from=got.source,
                          seconds=round(time.monotonic() - started, 2))


def _r(value: float | None) -> float | None:
    return round(value, 1) if value is not None else None


# ------------------------------------------------------------------------------------------------ stop


def stop(fleet: Fleet, target: str, *, mesh: str | None = None, check: bool = False,
         timeout_s: float = STOP_TIMEOUT_S, say: Say = quiet) -> StopReport:
    """Delete the instance TARGET, or every instance of model TARGET; wait until /state no longer shows them.
    Nothing placed by that name: nothing to do (exit 0)."""
    if not target.strip() or len(target) > 300 or not target.isprintable():
        raise UsageError(f"{target[:80]!r}: expected an instance id or a model (ORG/NAME)")
    from macfleet.judge.placement import targets

    m = one_mesh(fleet, mesh)
    with api_on(fleet, m) as api:
        state = cluster(api)
        names = _names(m, state)
        doomed = targets(state.instances, target)
        report = StopReport(mesh=m.name, target=target, instances=[view(i, names) for i in doomed], check=check)
        if check or not doomed:
            if not doomed:
                say(f"no instance {target!r} on mesh {m.name}: nothing to stop")
            return report
        for inst in doomed:
            say(f"stopping {inst.model} (instance {inst.instance_id})")
            api.json("DELETE", f"/instance/{urllib.parse.quote(inst.instance_id, safe='')}")  # exo's data
        ids = {i.instance_id for i in doomed}
        deadline = time.monotonic() + timeout_s
        while ids & {i.instance_id for i in cluster(api).instances}:
            if time.monotonic() > deadline:
                raise ExoApiError(f"exo still shows {', '.join(sorted(ids))} {timeout_s:g} s after the delete",
                                  node=api.node)
            time.sleep(POLL_S)
        report.stopped = True
    return report


# ------------------------------------------------------------------------------------------------ tunnel


def tunnel_argv(fleet: Fleet, node: str | None, *, mesh: str | None = None, local_port: int) -> tuple[str, list[str]]:
    """(the URL, the OpenSSH argv) of a local port forwarded to exo on `node` (default: the mesh's first), over
    the node's own login (SshTarget: its keys, strict host keys, its jump hosts)."""
    from macfleet.collect.ssh import SshTarget

    m = one_mesh(fleet, mesh)
    name = node or m.node_names[0]
    if name not in m.node_names:
        raise UsageError(f"no node {name!r} in mesh {m.name}", hint="nodes: " + ", ".join(m.node_names))
    target = SshTarget.for_node(fleet, fleet.node(name))
    target.check_local_files()
    forward = f"127.0.0.1:{local_port}:127.0.0.1:{m.settings.exo.port}"
    argv = ["ssh", *target.openssh_options(), "-a", "-N", "-o", "ExitOnForwardFailure=yes", "-L", forward,
            target.destination]
    return f"http://127.0.0.1:{local_port}/", argv
