"""`rollout model`: model weights fetched once, sent once over the management network, fanned out over the
Thunderbolt cables, every file landing under exo's layout only after its digest matched.

Order: the cluster lock is looked at (held, or left by a dead switch: refuse before any SSH) → one SSH session
per node and the controller's stream to the first node are opened → the sizes alone on every node (a model
that cannot fit is refused before a byte is hashed and before the lock) → lock → the source's digests while
every node answers its preflight, as requests on those sessions (what it has, what is staged, free space; refuse
before a byte moves) → the model cut into chunks, pipelined: the
controller sends the chunks to the seed in order over its one stream while the ones already there go seed → a
peer → every other peer, each hop over its own cable; the last chunk's files go seed → every peer at once, each
as soon as it is there → anything a failed cable left missing comes from the controller over management →
unlock.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import ValidationError

from macfleet.act import push, transfer
from macfleet.act.lock import ClusterLock, lock_path
from macfleet.errors import Refused, RemoteCommandError, UsageError
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.push import NodeHolding, PushPlan, plan_push, size_refusals
from macfleet.judge.rollout import (
    Manifest,
    ModelNodeReport,
    ModelPushReport,
    ModelVerifyReport,
)
from macfleet.paths import model_cache_dir

from . import Say, model_dir, quiet
from .meshes import one_mesh
from .rollout import link_addresses

Progress = push.Progress


def _preflight(fleet: Fleet, nodes: list[str], models_dir: str, name: str, manifest: Manifest
               ) -> dict[str, NodeHolding]:
    """One SSH command per node (for `--verify`, which opens no sessions)."""
    cmd = shlex.join([transfer.REMOTE_PYTHON, "-c", transfer.PREFLIGHT_PROGRAM, models_dir, name])

    def one(a: transfer.SshTarget) -> NodeHolding:
        out = transfer.run_remote(a, cmd, stdin=manifest.model_dump_json(), timeout_s=1800)
        try:
            return _holding(a.node, json.loads(out.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            raise RemoteCommandError(a.node, "preflight", 0, f"unexpected answer {out[-200:]!r}") from None

    return transfer.on_nodes(fleet, nodes, one)  # type: ignore[return-value]


def _holding(node: str, answer: object) -> NodeHolding:
    """A node's preflight answer as data, or the node's error naming what came."""
    try:
        return NodeHolding.model_validate(answer)
    except ValidationError:
        raise RemoteCommandError(node, "preflight", 0, f"unexpected answer {str(answer)[:200]!r}") from None


def _ask_preflight(links: push.Links, targets: list[str], models_dir: str, name: str, listing: Manifest, *,
                   digests: bool = True) -> dict[str, NodeHolding]:
    """Every target's preflight, a request on its push session."""
    got = push.on_sessions(links.sessions, targets, lambda s: s.preflight(models_dir, name, listing, digests=digests))
    return {n: _holding(n, a) for n, a in got.items()}


def _refuse(refusals: dict[str, str]) -> None:
    if refusals:
        raise Refused("not enough disk space; nothing was sent: " + "; ".join(f"{n}: {w}" for n, w in
                                                                              refusals.items()),
                      details={"nodes": refusals})


def fetch_hf(model: str, into: Path) -> Path:
    """Hugging Face, once, onto the controller (huggingface_hub, optional dependency)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UsageError("--hf needs huggingface_hub on the controller: pip install huggingface_hub") from None
    return Path(snapshot_download(repo_id=model, local_dir=into))


def push_model(fleet: Fleet, model: str, source: Path | None, *, hf: bool = False, mesh: str | None = None,
               nodes: list[str] | None = None, say: Say = quiet, progress: Progress | None = None,
               force: bool = False) -> ModelPushReport:
    """`force`: take the cluster lock even from a command that died in a critical step (its record is lost)."""
    name = model_dir(model)
    m = one_mesh(fleet, mesh)
    targets = _targets(m, nodes)
    if hf:
        source = fetch_hf(model, transfer_cache(fleet) / name)
    source = _source_dir(source)
    listing = transfer.local_manifest(source, digests=False)  # paths and sizes: all the preflight reads
    lock = ClusterLock(lock_path(fleet.root))
    lock.check("rollout model", force=force)  # a held lock, or one a dead switch left, refuses before any SSH
    models_dir = m.settings.exo.models_dir
    stop = threading.Event()  # the source's digests stop early when the push is refused meanwhile
    with push.links(fleet, targets) as links:
        # sizes first: a model that cannot fit is refused before a byte is hashed and before the lock
        t0 = time.monotonic()
        _refuse(size_refusals(_ask_preflight(links, targets, models_dir, name, listing, digests=False), listing))
        say(f"sizes fit on {len(targets)} nodes (read in {time.monotonic() - t0:.1f} s)")
        with ThreadPoolExecutor(max_workers=1) as side, \
                lock.hold("rollout model", f"push {model} to {m.name}", force=force) as held:
            if held.taken_over is not None:
                say(held.explain() or "")
            # the source's digests while the nodes answer the preflight
            t0 = time.monotonic()
            digests = side.submit(transfer.local_manifest, source, stop=stop)
            try:
                pre = _ask_preflight(links, targets, models_dir, name, listing)
                say(f"preflight of {len(targets)} nodes in {time.monotonic() - t0:.1f} s")
                _refuse(size_refusals(pre, listing))  # again, under the lock: another push may have filled a disk
                manifest = digests.result()
            except BaseException:
                stop.set()
                raise
            say(f"{model}: {len(manifest.files)} files, {manifest.total_bytes / 1e6:.1f} MB, digests in "
                f"{time.monotonic() - t0:.1f} s")
            if [(f.path, f.size) for f in manifest.files] != [(f.path, f.size) for f in listing.files]:
                raise UsageError(f"--from {source}: files changed while they were read",
                                 hint="run it again once the model's directory is complete")
            return _push(fleet, m, targets, model, name, source, manifest, pre, say, progress, links, t0)


def _push(fleet: Fleet, m: Mesh, targets: list[str], model: str, name: str, source: Path, manifest: Manifest,
          pre: dict[str, NodeHolding], say: Say, progress: Progress | None, links: push.Links, t0: float
          ) -> ModelPushReport:
    plan = plan_push(targets, pre, manifest)
    _refuse(plan.refusals)
    report_nodes = {n: ModelNodeReport(had_files=len(manifest.files) - len(plan.lacking[n]),
                                       received_bytes=plan.need[n]) for n in targets}
    if plan.seed is None:
        return ModelPushReport(model=model, directory=name, files=len(manifest.files), bytes=manifest.total_bytes,
                               result="already", took_s=round(time.monotonic() - t0, 2), nodes=report_nodes)
    seed = plan.seed
    base = {n: pre[n].held_bytes() for n in targets}
    with push.watch_progress(links.sessions, pre, base, plan.need, progress):
        rerouted = _transfer(fleet, m, manifest, source, seed, plan, pre, say, links)
    say(f"pushed in {time.monotonic() - t0:.1f} s after the lock")
    return ModelPushReport(model=model, directory=name, files=len(manifest.files), bytes=manifest.total_bytes,
                           result="pushed", took_s=round(time.monotonic() - t0, 2), seed=seed, nodes=report_nodes,
                           rerouted=[f"{n}: {how}" for n, how in rerouted])


def _transfer(fleet: Fleet, m: Mesh, manifest: Manifest, source: Path, seed: str, plan: PushPlan,
              pre: dict[str, NodeHolding], say: Say, links: push.Links) -> list[tuple[str, str]]:
    peers = [n for n in plan.needing if n != seed]
    lack = {n: set(plan.lacking[n]) for n in plan.needing}
    fan = push.pipeline(fleet, link_addresses(fleet, m), manifest, source, seed, peers, lack, pre, say, links)
    # Whatever a failed cable did not carry (to a node, or to the node that was to pass it on) comes from the
    # controller over the management network: what every node landed is known, whichever hop failed.
    rerouted = list(fan.via_seed)
    for node in [seed, *peers]:
        files = sorted(lack.get(node, set()) - fan.landed[node])
        if not files:
            continue
        why = next((w for (src, dst), w in sorted(fan.failed.items()) if dst == node), None) or \
            "; ".join(sorted(set(fan.failed.values()))) or "files missing after the fan-out"
        say(f"{node}: {why}; {len(files)} files come from the controller over the management network")
        transfer.rsync_from_controller(transfer.ssh_target(fleet, node), source, pre[node].staging, files)
        push.raise_bad({n: r.bad for n, r in push.land_all(links.sessions, manifest, pre, {node: set(files)}).items()})
        rerouted.append((node, why))
    return rerouted


def verify_model(fleet: Fleet, model: str, source: Path, *, mesh: str | None = None,
                 nodes: list[str] | None = None) -> ModelVerifyReport:
    name = model_dir(model)
    m = one_mesh(fleet, mesh)
    targets = _targets(m, nodes)
    manifest = transfer.local_manifest(_source_dir(source))
    pre = _preflight(fleet, targets, m.settings.exo.models_dir, name, manifest)
    res = transfer.on_nodes(fleet, targets, lambda a: transfer.land(a, manifest, pre[a.node].staging,
                                                                     pre[a.node].final, check_only=True))
    return ModelVerifyReport(model=model, files=len(manifest.files),
                             differ={n: r.bad for n, r in sorted(res.items()) if r.bad})  # type: ignore[attr-defined]


def _source_dir(source: Path | None) -> Path:
    """The model's local directory (--from, or the download): bad input, exit 2, when it is not one."""
    if source is None or not source.is_dir():
        what = "not a directory" if source is not None and source.exists() else "no such directory"
        raise UsageError(f"--from {source}: {what}; expected a local directory holding the model's files "
                         "(config.json, *.safetensors)")
    return source


def _targets(m: Mesh, nodes: list[str] | None) -> list[str]:
    if not nodes:
        return list(m.node_names)
    unknown = [n for n in nodes if n not in m.node_names]
    if unknown:
        raise UsageError(f"--nodes: {', '.join(unknown)} not in mesh {m.name}",
                         hint="nodes: " + ", ".join(m.node_names))
    return [n for n in m.node_names if n in nodes]


def transfer_cache(fleet: Fleet) -> Path:
    return model_cache_dir()


def plan_model_push(fleet: Fleet, model: str, source: Path | None, *, hf: bool = False, mesh: str | None = None,
                    nodes: list[str] | None = None) -> dict:
    """`rollout model --check`: what a push would send where, with sizes, from each node's read-only preflight.
    Nothing is sent, downloaded, staged or locked. The `rollout model --check --json` shape (docs/cli.md)."""
    name = model_dir(model)
    m = one_mesh(fleet, mesh)
    targets = _targets(m, nodes)
    shown: dict = {"result": "check", "model": model, "directory": name, "mesh": m.name, "download": None,
                   "files": None, "bytes": None, "seed": None, "nodes": {n: None for n in targets}}
    if hf:
        cached = transfer_cache(fleet) / name
        if not cached.is_dir():  # sizes are known only once it is downloaded, which --check does not do
            shown["download"] = {"from": "huggingface", "into": str(cached)}
            return shown
        source = cached
    source = _source_dir(source)
    manifest = transfer.local_manifest(source)
    plan = plan_push(targets, _preflight(fleet, targets, m.settings.exo.models_dir, name, manifest), manifest)
    shown.update(files=len(manifest.files), bytes=manifest.total_bytes, seed=plan.seed,
                 nodes={n: {"has_files": len(manifest.files) - len(plan.lacking[n]),
                            "would_send_files": len(plan.lacking[n]), "would_send_bytes": plan.need[n],
                            "refused": plan.refusals.get(n)} for n in targets})
    return shown
