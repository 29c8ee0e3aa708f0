"""`rollout model`: model weights fetched once, sent once over the management network, fanned out over the
Thunderbolt cables, every file landing under exo's layout only after its digest matched.

Order: lock → manifest of the source → preflight on every node (what it has, what is staged, free space;
refuse before a byte moves) → the model cut into one slice per peer, pipelined: the controller sends slice k
to the seed over management while slice k-1 goes seed → its peer → every other peer, each hop over its own
cable → anything a failed cable left missing comes from the controller over management → unlock.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from macfleet.act import transfer
from macfleet.act.lock import ClusterLock, lock_path
from macfleet.errors import FactsParseError, Refused, RemoteCommandError, RolloutFailed, UnreachableError, UsageError
from macfleet.facts.disk import parse_df
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.rollout import (
    Hop,
    Manifest,
    ModelNodeReport,
    ModelPushReport,
    ModelVerifyReport,
    missing_files,
    model_dir_name,
    plan_chunks,
)

from .meshes import one_mesh
from .rollout import Say, _quiet, link_addresses

DISK_MARGIN_BYTES = 256 * 1024 * 1024  # room left for exo's logs and the OS after the push
PROGRESS_EVERY_S = 2.0
Progress = Callable[[str, int, int], None]  # (node, bytes received so far, bytes it needs)

# Runs on the node: bytes under the final and staging directories (for progress).
_SIZE_PROGRAM = r"""
import os, sys
total = 0
for top in sys.argv[1:]:
    for d, _, files in os.walk(top):
        for f in files:
            try:
                total += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
print(total)
"""

# Runs on the node: where the models dir is, free space (df -k), what is final and what is staged.
_PREFLIGHT = r"""
import hashlib, json, os, subprocess, sys
models, name = os.path.expanduser(sys.argv[1]), sys.argv[2]
manifest = json.load(sys.stdin)
final = os.path.join(models, name)
staging = os.path.join(models, ".macfleet-staging", name)
probe = models
while not os.path.exists(probe):
    probe = os.path.dirname(probe)
df = subprocess.run(["df", "-k", probe], capture_output=True, text=True)
""" + transfer.NODE_DIGEST + r"""have, staged = {}, {}
for f in manifest["files"]:
    p = os.path.join(final, f["path"])
    if os.path.isfile(p) and not os.path.islink(p):
        size = os.path.getsize(p)
        have[f["path"]] = [size, digest(p) if size == f["size"] else None]
    s = os.path.join(staging, f["path"])
    if os.path.isfile(s):
        staged[f["path"]] = os.path.getsize(s)
print(json.dumps({"final": final, "staging": staging, "df": df.stdout, "df_rc": df.returncode,
                  "have": have, "staged": staged}))
"""


def _preflight(fleet: Fleet, nodes: list[str], models_dir: str, name: str, manifest: Manifest) -> dict[str, dict]:
    cmd = shlex.join([transfer.REMOTE_PYTHON, "-c", _PREFLIGHT, models_dir, name])

    def one(a: transfer.SshArgs) -> dict:
        out = transfer.run_remote(a, cmd, stdin=manifest.model_dump_json(), timeout_s=1800)
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RemoteCommandError(a.node, "preflight", 0, f"unexpected answer {out[-200:]!r}") from None

    return transfer.on_nodes(fleet, nodes, one)  # type: ignore[return-value]


def _free_space_refusals(pre: dict[str, dict], need: dict[str, int]) -> dict[str, str]:
    out = {}
    for node, p in sorted(pre.items()):
        if need[node] == 0:
            continue
        try:
            free = parse_df(p["df"]).available_bytes
        except FactsParseError as exc:
            out[node] = f"free space unknown ({exc.message})"
            continue
        if free < need[node] + DISK_MARGIN_BYTES:
            out[node] = (f"needs {need[node] / 1e9:.2f} GB + {DISK_MARGIN_BYTES / 1e9:.2f} GB margin, "
                         f"has {free / 1e9:.2f} GB free")
    return out


def fetch_hf(model: str, into: Path) -> Path:
    """Hugging Face, once, onto the controller (huggingface_hub, optional dependency)."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UsageError("--hf needs huggingface_hub on the controller: pip install huggingface_hub") from None
    return Path(snapshot_download(repo_id=model, local_dir=into))


def _run_hops(fleet: Fleet, hops: list[Hop], src_dirs: dict[str, str], dst_dirs: dict[str, str],
              agent: dict[str, str]) -> dict[tuple[str, str], str]:
    """Every hop at once (each on its own cable); failures by (src, dst), each naming its cable."""
    failed: dict[tuple[str, str], str] = {}
    lock = threading.Lock()

    def one(h: Hop) -> None:
        if not h.files:
            return
        try:
            transfer.rsync_node_to_node(transfer.SshArgs.for_node(fleet, fleet.node(h.src)), src_dirs[h.src],
                                        fleet.node(h.dst).user, h.dst_address, dst_dirs[h.dst], list(h.files),
                                        agent)
        except (RemoteCommandError, UnreachableError) as exc:
            with lock:
                failed[(h.src, h.dst)] = (f"cable {h.src}–{h.dst} ({h.dst_address}): "
                                          f"{exc.message.splitlines()[0][-200:]}")

    with ThreadPoolExecutor(max_workers=max(1, len(hops))) as pool:
        list(pool.map(one, hops))
    return failed


def _land_all(fleet: Fleet, manifest: Manifest, nodes: list[str], pre: dict[str, dict],
              only: dict[str, set[str]] | None = None) -> dict[str, dict[str, str]]:
    """Verify and put in place what each node received (`only[node]`: the files it was sent this round)."""
    def part(node: str) -> Manifest:
        if only is None:
            return manifest
        return Manifest(files=tuple(f for f in manifest.files if f.path in only.get(node, set())))

    nodes = [n for n in nodes if only is None or only.get(n)]
    res = transfer.on_nodes(fleet, nodes, lambda a: transfer.land(a, part(a.node), pre[a.node]["staging"],
                                                                   pre[a.node]["final"]))
    return {n: r.bad for n, r in res.items()}  # type: ignore[attr-defined]


@contextlib.contextmanager
def _watch(fleet: Fleet, pre: dict[str, dict], base: dict[str, int], need: dict[str, int],
           progress: Progress | None) -> Iterator[None]:
    """While the transfer runs, report each receiving node's bytes every few seconds (one SSH command each)."""
    if progress is None:
        yield
        return
    stop = threading.Event()
    nodes = [n for n in need if need[n]]

    def size(a: transfer.SshArgs) -> int:
        out = transfer.run_remote(a, shlex.join([transfer.REMOTE_PYTHON, "-c", _SIZE_PROGRAM,
                                                 pre[a.node]["final"], pre[a.node]["staging"]]), timeout_s=20)
        return int(out.strip() or 0)

    def loop() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            with contextlib.suppress(Exception):  # progress is best effort; the transfer reports its own errors
                for n, got in transfer.on_nodes(fleet, nodes, size).items():
                    progress(n, max(0, min(int(got) - base[n], need[n])), need[n])  # type: ignore[call-overload]

    for n in nodes:
        progress(n, 0, need[n])
    t = threading.Thread(target=loop, daemon=True, name="push-progress")
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(timeout=25)
        for n in nodes:
            progress(n, need[n], need[n])


def push_model(fleet: Fleet, model: str, source: Path | None, *, hf: bool = False, mesh: str | None = None,
               nodes: list[str] | None = None, say: Say = _quiet, progress: Progress | None = None,
               ) -> ModelPushReport:
    name = _checked_name(model)
    m = one_mesh(fleet, mesh)
    targets = _targets(m, nodes)
    if hf:
        source = fetch_hf(model, transfer_cache(fleet) / name)
    if source is None or not source.is_dir():
        raise UsageError(f"--from {source}: not a directory")
    t0 = time.monotonic()
    manifest = transfer.local_manifest(source)
    say(f"{model}: {len(manifest.files)} files, {manifest.total_bytes / 1e6:.1f} MB, digests in "
        f"{time.monotonic() - t0:.1f} s")
    lock = ClusterLock(lock_path(fleet.root))
    with lock.hold("rollout model", f"push {model} to {m.name}") as held:
        if held.taken_over is not None:
            say(held.explain() or "")
        return _push(fleet, m, targets, model, name, source, manifest, say, progress)


def _push(fleet: Fleet, m: Mesh, targets: list[str], model: str, name: str, source: Path, manifest: Manifest,
          say: Say, progress: Progress | None) -> ModelPushReport:
    t0 = time.monotonic()
    pre = _preflight(fleet, targets, m.settings.exo.models_dir, name, manifest)
    lacking = {n: missing_files(manifest, {k: (v[0], v[1]) for k, v in pre[n]["have"].items()}) for n in targets}
    need = {n: sum(f.size - min(pre[n]["staged"].get(f.path, 0), f.size) for f in lacking[n]) for n in targets}
    refusals = _free_space_refusals(pre, need)
    if refusals:
        raise Refused("not enough disk space; nothing was sent: " + "; ".join(f"{n}: {w}" for n, w in
                                                                              refusals.items()),
                      details={"nodes": refusals})
    report_nodes = {n: ModelNodeReport(had_files=len(manifest.files) - len(lacking[n]), received_bytes=need[n])
                    for n in targets}
    holders = [n for n in targets if not lacking[n]]
    needing = [n for n in targets if lacking[n]]
    if not needing:
        return ModelPushReport(model=model, directory=name, files=len(manifest.files), bytes=manifest.total_bytes,
                               result="already", took_s=round(time.monotonic() - t0, 2), nodes=report_nodes)
    seed = holders[0] if holders else needing[0]
    base = {n: sum(v[0] for v in pre[n]["have"].values()) + sum(pre[n]["staged"].values()) for n in targets}
    with _watch(fleet, pre, base, need, progress):
        rerouted = _transfer(fleet, m, manifest, source, seed, needing, lacking, need, pre, say)
    return ModelPushReport(model=model, directory=name, files=len(manifest.files), bytes=manifest.total_bytes,
                           result="pushed", took_s=round(time.monotonic() - t0, 2), seed=seed, nodes=report_nodes,
                           rerouted=[f"{n}: {how}" for n, how in rerouted])


def _transfer(fleet: Fleet, m: Mesh, manifest: Manifest, source: Path, seed: str, needing: list[str],
              lacking: dict[str, list], need: dict[str, int], pre: dict[str, dict], say: Say,
              ) -> list[tuple[str, str]]:
    peers = [n for n in needing if n != seed]
    lack = {n: {f.path for f in lacking[n]} for n in needing}
    if not peers:
        _from_controller(fleet, manifest, source, seed, sorted(lack[seed]), pre)
        say(f"{seed}: {need[seed] / 1e6:.1f} MB from the controller")
        return []
    failed = _pipeline(fleet, m, manifest, source, seed, peers, lack, pre, say)
    # Whatever a failed cable did not carry (to a node, or to the node that was to pass it on) comes from the
    # controller over the management network; a final check finds it, whichever hop it was.
    short = transfer.on_nodes(fleet, peers, lambda a: transfer.land(a, manifest, pre[a.node]["staging"],
                                                                     pre[a.node]["final"], check_only=True))
    rerouted = []
    for node, res in sorted(short.items()):
        files = sorted(res.bad)  # type: ignore[attr-defined]
        if not files:
            continue
        why = next((w for (src, dst), w in sorted(failed.items()) if dst == node), None) or \
            "; ".join(sorted(set(failed.values()))) or "files missing after the fan-out"
        say(f"{node}: {why}; {len(files)} files come from the controller over the management network")
        _from_controller(fleet, manifest, source, node, files, pre)
        rerouted.append((node, why))
    return rerouted


def _from_controller(fleet: Fleet, manifest: Manifest, source: Path, node: str, files: list[str],
                     pre: dict[str, dict]) -> None:
    if files:
        transfer.rsync_from_controller(transfer.SshArgs.for_node(fleet, fleet.node(node)), source,
                                       pre[node]["staging"], files)
        _raise_bad(_land_all(fleet, manifest, [node], pre, {node: set(files)}))


def _pipeline(fleet: Fleet, m: Mesh, manifest: Manifest, source: Path, seed: str, peers: list[str],
              lack: dict[str, set[str]], pre: dict[str, dict], say: Say) -> dict[tuple[str, str], str]:
    """The model in chunks, each for one peer (`plan_chunks`). Chunk k goes controller → seed over
    management; once it has arrived, the seed verifies it and sends it to its peer over their cable, and that
    peer to every other peer over theirs, while the controller already sends chunk k+1: the management link
    never waits for the mesh, and every cable carries chunks in each direction. Returns the hops that failed,
    each naming its cable."""
    addresses = link_addresses(fleet, m)
    everyone = [seed, *peers]
    transfer.install_mesh_known_hosts(fleet, everyone, transfer.mesh_known_hosts(
        fleet, {k: v for k, v in addresses.items() if k[0] in everyone and k[1] in everyone}))
    first = [Hop(src=seed, dst=p, dst_address=addresses[(seed, p)], files=files)
             for p, files in plan_chunks(manifest, peers)]
    failed: dict[tuple[str, str], str] = {}
    finals = {n: pre[n]["final"] for n in everyone}
    stagings = {n: pre[n]["staging"] for n in everyone}

    def spread(hop: Hop, agent: dict[str, str], from_controller: list[str]) -> None:
        t = time.monotonic()
        # the seed verifies its copy here, while the controller already sends it the next chunk
        _raise_bad(_land_all(fleet, manifest, [seed], pre, {seed: set(from_controller)}))
        to_peer = [hop.model_copy(update={"files": tuple(f for f in hop.files if f in lack[hop.dst])})]
        failed.update(_run_hops(fleet, to_peer, finals, stagings, agent))
        if (seed, hop.dst) in failed:
            return
        _raise_bad(_land_all(fleet, manifest, [hop.dst], pre, {hop.dst: set(to_peer[0].files)}))
        onward = [Hop(src=hop.dst, dst=q, dst_address=addresses[(hop.dst, q)],
                      files=tuple(f for f in hop.files if f in lack[q])) for q in peers if q != hop.dst]
        bad = _run_hops(fleet, onward, finals, stagings, agent)
        failed.update(bad)
        got = {h.dst: set(h.files) for h in onward if (h.src, h.dst) not in bad}
        _raise_bad(_land_all(fleet, manifest, list(got), pre, got))
        size = sum(f.size for f in manifest.files if f.path in hop.files)
        say(f"chunk for {hop.dst} ({size / 1e6:.1f} MB) spread over the mesh in {time.monotonic() - t:.1f} s")

    with transfer.transfer_agent(fleet, fleet.node(seed)) as agent, \
            ThreadPoolExecutor(max_workers=max(1, len(peers)), thread_name_prefix="chunk") as pool:
        futures = []
        for hop in first:
            t = time.monotonic()
            files = sorted(f for f in hop.files if f in lack.get(seed, set()))
            if files:
                transfer.rsync_from_controller(transfer.SshArgs.for_node(fleet, fleet.node(seed)), source,
                                               pre[seed]["staging"], files)
                size = sum(f.size for f in manifest.files if f.path in files)
                say(f"{seed}: chunk for {hop.dst} ({size / 1e6:.1f} MB) from the controller in "
                    f"{time.monotonic() - t:.1f} s")
            futures.append(pool.submit(spread, hop, agent, files))
        for f in futures:
            f.result()
    return failed


def _raise_bad(bad: dict[str, dict[str, str]]) -> None:
    bad = {n: b for n, b in bad.items() if b}
    if bad:
        node, files = next(iter(sorted(bad.items())))
        path, why = next(iter(sorted(files.items())))
        raise RolloutFailed(f"{node}: {path} did not arrive intact ({why}); it was not put in place",
                            hint="run the same command again: complete files are kept, partial ones continue",
                            details={"bad": bad})


def verify_model(fleet: Fleet, model: str, source: Path, *, mesh: str | None = None,
                 nodes: list[str] | None = None) -> ModelVerifyReport:
    name = _checked_name(model)
    m = one_mesh(fleet, mesh)
    targets = _targets(m, nodes)
    manifest = transfer.local_manifest(source)
    pre = _preflight(fleet, targets, m.settings.exo.models_dir, name, manifest)
    res = transfer.on_nodes(fleet, targets, lambda a: transfer.land(a, manifest, pre[a.node]["staging"],
                                                                     pre[a.node]["final"], check_only=True))
    return ModelVerifyReport(model=model, files=len(manifest.files),
                             differ={n: r.bad for n, r in sorted(res.items()) if r.bad})  # type: ignore[attr-defined]


def _checked_name(model: str) -> str:
    try:
        return model_dir_name(model)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _targets(m: Mesh, nodes: list[str] | None) -> list[str]:
    if not nodes:
        return list(m.node_names)
    unknown = [n for n in nodes if n not in m.node_names]
    if unknown:
        raise UsageError(f"--nodes: {', '.join(unknown)} not in mesh {m.name}",
                         hint="nodes: " + ", ".join(m.node_names))
    return [n for n in m.node_names if n in nodes]


def transfer_cache(fleet: Fleet) -> Path:
    return lock_path(fleet.root).parent.parent / "models"
