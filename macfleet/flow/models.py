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

import contextlib
import json
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from macfleet.act import transfer
from macfleet.act.fanout import each_node
from macfleet.act.lock import ClusterLock, lock_path
from macfleet.errors import FactsParseError, Refused, RemoteCommandError, RolloutFailed, UnreachableError, UsageError
from macfleet.facts.disk import parse_df
from macfleet.inventory.model import Fleet, Mesh
from macfleet.judge.rollout import (
    TAIL_CHUNKS,
    CableCopy,
    Manifest,
    ModelNodeReport,
    ModelPushReport,
    ModelVerifyReport,
    missing_files,
    model_dir_name,
    plan_chunks,
)
from macfleet.paths import model_cache_dir

from .meshes import one_mesh
from .rollout import Say, _quiet, link_addresses

DISK_MARGIN_BYTES = 256 * 1024 * 1024  # room left for exo's logs and the OS after the push
PROGRESS_EVERY_S = 2.0
Progress = Callable[[str, int, int], None]  # (node, bytes received so far, bytes it needs)


def _preflight(fleet: Fleet, nodes: list[str], models_dir: str, name: str, manifest: Manifest) -> dict[str, dict]:
    """One SSH command per node (for `--verify`, which opens no sessions)."""
    cmd = shlex.join([transfer.REMOTE_PYTHON, "-c", transfer.PREFLIGHT_PROGRAM, models_dir, name])

    def one(a: transfer.SshTarget) -> dict:
        out = transfer.run_remote(a, cmd, stdin=manifest.model_dump_json(), timeout_s=1800)
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RemoteCommandError(a.node, "preflight", 0, f"unexpected answer {out[-200:]!r}") from None

    return transfer.on_nodes(fleet, nodes, one)  # type: ignore[return-value]


def _on_sessions(sessions: dict[str, transfer.NodeSession], nodes: list[str], fn: Callable) -> dict[str, Any]:
    """fn(session) on every node's session at once (act/fanout)."""
    return each_node(nodes, lambda n: fn(sessions[n]), parallel=max(1, len(nodes)))


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


def _refuse_on_sizes(pre: dict[str, dict], listing: Manifest) -> None:
    """Refuse the push when even the files a node lacks by their size alone (absent, or of another size: the
    least it needs, before any digest says more) do not fit its free space."""
    need = {}
    for node, p in pre.items():
        have, staged = p["have"], p["staged"]
        need[node] = sum(f.size - min(int(staged.get(f.path, 0)), f.size) for f in listing.files
                         if f.path not in have or int(have[f.path][0]) != f.size)
    refusals = _free_space_refusals(pre, need)
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


def _run_hops(fleet: Fleet, hops: list[CableCopy], where: Callable[[str, str], str], dst_dirs: dict[str, str],
              sessions: dict[str, transfer.NodeSession]) -> dict[tuple[str, str], str]:
    """Every hop at once (each on its own cable), each file from the directory `where(src, path)` names;
    failures by (src, dst), each naming its cable."""
    failed: dict[tuple[str, str], str] = {}
    lock = threading.Lock()

    def one(h: CableCopy) -> None:
        by_dir: dict[str, list[str]] = {}
        for f in h.files:
            by_dir.setdefault(where(h.src, f), []).append(f)
        try:
            for src_dir, files in sorted(by_dir.items()):
                sessions[h.src].rsync_to(src_dir, fleet.node(h.dst).user, h.dst_address, dst_dirs[h.dst], files)
        except (RemoteCommandError, UnreachableError) as exc:
            with lock:
                failed[(h.src, h.dst)] = (f"cable {h.src}–{h.dst} ({h.dst_address}): "
                                          f"{exc.message.splitlines()[0][-200:]}")

    with ThreadPoolExecutor(max_workers=max(1, len(hops))) as pool:
        list(pool.map(one, hops))
    return failed


def _land_all(sessions: dict[str, transfer.NodeSession], manifest: Manifest, pre: dict[str, dict],
              only: dict[str, set[str]]) -> dict[str, transfer.LandResult]:
    """Verify and put in place what each node received (`only[node]`: the files it was sent)."""
    nodes = [n for n in only if only[n]]
    return _on_sessions(sessions, nodes, lambda s: s.land(
        Manifest(files=tuple(f for f in manifest.files if f.path in only[s.node])),
        pre[s.node]["staging"], pre[s.node]["final"]))


@contextlib.contextmanager
def _watch(sessions: dict[str, transfer.NodeSession], pre: dict[str, dict], base: dict[str, int],
           need: dict[str, int], progress: Progress | None) -> Iterator[None]:
    """While the transfer runs, report each receiving node's bytes every few seconds (a request on its
    session)."""
    if progress is None:
        yield
        return
    stop = threading.Event()
    nodes = [n for n in need if need[n]]

    def loop() -> None:
        while not stop.wait(PROGRESS_EVERY_S):
            with contextlib.suppress(Exception):  # progress is best effort; the transfer reports its own errors
                got = _on_sessions(sessions, nodes, lambda s: s.size_under([pre[s.node]["final"],
                                                                             pre[s.node]["staging"]]))
                for n, size in got.items():
                    progress(n, max(0, min(size - base[n], need[n])), need[n])

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


@dataclass
class _Links:
    """What the push talks over, opened before the preflight so that their SSH start-ups overlap the digests
    of the source and each other: one session per node, and the controller's stream to the node that will be
    the seed if it needs anything (the first target; it carries nothing until the preflight passed)."""

    sessions: dict[str, transfer.NodeSession]
    feed: transfer.Feed


@contextlib.contextmanager
def _links(fleet: Fleet, targets: list[str]) -> Iterator[_Links]:
    with (transfer.transfer_agent(fleet, fleet.node(targets[0])) if len(targets) > 1
          else contextlib.nullcontext({})) as agent, transfer.node_sessions(fleet, targets, agent) as sessions:
        feed = transfer.Feed(transfer.ssh_target(fleet, targets[0]))
        try:
            yield _Links(sessions=sessions, feed=feed)
        finally:
            feed.close()


def push_model(fleet: Fleet, model: str, source: Path | None, *, hf: bool = False, mesh: str | None = None,
               nodes: list[str] | None = None, say: Say = _quiet, progress: Progress | None = None,
               force: bool = False) -> ModelPushReport:
    """`force`: take the cluster lock even from a command that died in a critical step (its record is lost)."""
    name = _checked_name(model)
    m = one_mesh(fleet, mesh)
    targets = _targets(m, nodes)
    if hf:
        source = fetch_hf(model, transfer_cache(fleet) / name)
    if source is None or not source.is_dir():
        raise UsageError(f"--from {source}: not a directory")
    listing = transfer.local_manifest(source, digests=False)  # paths and sizes: all the preflight reads
    lock = ClusterLock(lock_path(fleet.root))
    lock.check("rollout model", force=force)  # a held lock, or one a dead switch left, refuses before any SSH
    models_dir = m.settings.exo.models_dir
    stop = threading.Event()  # the source's digests stop early when the push is refused meanwhile
    with _links(fleet, targets) as links:
        # sizes first: a model that cannot fit is refused before a byte is hashed and before the lock
        t0 = time.monotonic()
        _refuse_on_sizes(_on_sessions(links.sessions, targets,
                                      lambda s: s.preflight(models_dir, name, listing, digests=False)), listing)
        say(f"sizes fit on {len(targets)} nodes (read in {time.monotonic() - t0:.1f} s)")
        with ThreadPoolExecutor(max_workers=1) as side, \
                lock.hold("rollout model", f"push {model} to {m.name}", force=force) as held:
            if held.taken_over is not None:
                say(held.explain() or "")
            # the source's digests while the nodes answer the preflight
            t0 = time.monotonic()
            digests = side.submit(transfer.local_manifest, source, stop=stop)
            try:
                pre = _on_sessions(links.sessions, targets, lambda s: s.preflight(models_dir, name, listing))
                say(f"preflight of {len(targets)} nodes in {time.monotonic() - t0:.1f} s")
                _refuse_on_sizes(pre, listing)  # again, under the lock: another push may have filled a disk
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


def _what_each_lacks(manifest: Manifest, pre: dict[str, dict], targets: list[str]) -> tuple[dict, dict[str, int]]:
    """Per node: the files it lacks (by digest), and the bytes still to send (less what is already staged)."""
    lacking = {n: missing_files(manifest, {k: (v[0], v[1]) for k, v in pre[n]["have"].items()}) for n in targets}
    need = {n: sum(f.size - min(pre[n]["staged"].get(f.path, 0), f.size) for f in lacking[n]) for n in targets}
    return lacking, need


def _push(fleet: Fleet, m: Mesh, targets: list[str], model: str, name: str, source: Path, manifest: Manifest,
          pre: dict[str, dict], say: Say, progress: Progress | None, links: _Links, t0: float) -> ModelPushReport:
    lacking, need = _what_each_lacks(manifest, pre, targets)
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
    # the seed: a node that has the whole model, else the first target (the one the controller's stream goes to)
    seed = holders[0] if holders else needing[0]
    base = {n: sum(v[0] for v in pre[n]["have"].values()) + sum(pre[n]["staged"].values()) for n in targets}
    with _watch(links.sessions, pre, base, need, progress):
        rerouted = _transfer(fleet, m, manifest, source, seed, needing, lacking, pre, say, links)
    say(f"pushed in {time.monotonic() - t0:.1f} s after the lock")
    return ModelPushReport(model=model, directory=name, files=len(manifest.files), bytes=manifest.total_bytes,
                           result="pushed", took_s=round(time.monotonic() - t0, 2), seed=seed, nodes=report_nodes,
                           rerouted=[f"{n}: {how}" for n, how in rerouted])


def _transfer(fleet: Fleet, m: Mesh, manifest: Manifest, source: Path, seed: str, needing: list[str],
              lacking: dict[str, list], pre: dict[str, dict], say: Say, links: _Links) -> list[tuple[str, str]]:
    peers = [n for n in needing if n != seed]
    lack = {n: {f.path for f in lacking[n]} for n in needing}
    fan = _pipeline(fleet, m, manifest, source, seed, peers, lack, pre, say, links)
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
        transfer.rsync_from_controller(transfer.ssh_target(fleet, node), source,
                                       pre[node]["staging"], files)
        _raise_bad({n: r.bad for n, r in _land_all(links.sessions, manifest, pre, {node: set(files)}).items()})
        rerouted.append((node, why))
    return rerouted


class _Fanout:
    """The spread of chunks over the mesh, and what it has done so far: the hops that failed (each naming its
    cable), the files landed on each node, the nodes a peer's failed cable made the seed serve itself.

    A node passes a chunk on as soon as it has it, from staging, and verifies (lands) it only afterwards, in
    parallel with what follows: every receiver verifies its own copy, so a bad one is caught wherever it went."""

    def __init__(self, fleet: Fleet, manifest: Manifest, seed: str, peers: list[str], lack: dict[str, set[str]],
                 pre: dict[str, dict], addresses: dict[tuple[str, str], str],
                 sessions: dict[str, transfer.NodeSession]) -> None:
        self.fleet, self.manifest, self.seed, self.peers = fleet, manifest, seed, peers
        self.lack, self.pre, self.addresses, self.sessions = lack, pre, addresses, sessions
        self.failed: dict[tuple[str, str], str] = {}
        self.landed: dict[str, set[str]] = {n: set() for n in [seed, *peers]}
        self.via_seed: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def where(self, node: str, path: str) -> str:
        """The directory `node` holds `path` in: staging until it landed there, else its final directory."""
        with self.lock:
            staged = path in self.lack.get(node, ()) and path not in self.landed[node]
        return self.pre[node]["staging" if staged else "final"]

    def send(self, src: str, files: dict[str, tuple[str, ...]]) -> dict[str, set[str]]:
        """`src` sends each destination its files, every cable at once; what arrived, by destination."""
        hops = [CableCopy(src=src, dst=d, dst_address=self.addresses[(src, d)], files=fs) for d, fs in files.items()]
        bad = _run_hops(self.fleet, hops, self.where, {n: self.pre[n]["staging"] for n in files}, self.sessions)
        with self.lock:
            self.failed.update(bad)
        return {h.dst: set(h.files) for h in hops if (h.src, h.dst) not in bad}

    def land(self, got: dict[str, set[str]]) -> None:
        got = {n: fs for n, fs in got.items() if fs}

        def one(node: str) -> transfer.LandResult:
            part = Manifest(files=tuple(f for f in self.manifest.files if f.path in got[node]))
            return self.sessions[node].land(part, self.pre[node]["staging"], self.pre[node]["final"])

        with ThreadPoolExecutor(max_workers=max(1, len(got))) as pool:
            res = dict(zip(got, pool.map(one, got), strict=True))
        with self.lock:
            for n, r in res.items():
                self.landed[n].update(r.ok)
        _raise_bad({n: r.bad for n, r in res.items()})

    def spread(self, chunk: tuple[str, ...], peer: str, mine: list[str], *, direct: bool) -> str:
        """One chunk from the seed to every peer: straight from the seed over each of its cables (`direct`: the
        chunks at the end, one hop), or to `peer`, which passes it on to every other peer over theirs."""
        t = time.monotonic()
        need = {q: tuple(f for f in chunk if f in self.lack[q]) for q in self.peers}
        others = {q: fs for q, fs in need.items() if q != peer}
        first = {} if direct else self.send(self.seed, {peer: need[peer]})
        if direct or peer not in first:  # the seed serves everyone itself (its cable to `peer` failed: the rest)
            got = self.send(self.seed, need if direct else others)
            self.land({**got, self.seed: set(mine)})
            return f"seed → every peer in {time.monotonic() - t:.1f} s"
        t_first = time.monotonic() - t
        with ThreadPoolExecutor(max_workers=1) as side:
            seed_landed = side.submit(self.land, {self.seed: set(mine)})
            got = self.send(peer, others)
            t_others = time.monotonic() - t
            self.land({**got, peer: first[peer]})
            seed_landed.result()
        missed = {q: fs for q, fs in others.items() if q not in got and fs}
        if missed:  # a cable between two peers failed: the seed, which has the chunk landed, sends it instead
            for q in missed:
                why = self.failed.get((peer, q), "")
                with self.lock:
                    self.via_seed.append((q, f"{why}; {self.seed} sent it instead"))
            self.land(self.send(self.seed, missed))
        return (f"via {peer}: {peer} +{t_first:.1f} s, the others +{t_others:.1f} s, "
                f"verified everywhere +{time.monotonic() - t:.1f} s")


class _SeedCopy:
    """The controller's copy to the seed, chunk by chunk in order over the one stream (`transfer.Feed`):
    `arrived[k]` is done once every file of chunk k the seed lacked is there intact (or failed with the
    stream's error)."""

    def __init__(self, chunks: list[tuple[str, tuple[str, ...]]], lack: set[str], say: Say, t0: float,
                 sizes: dict[str, int]) -> None:
        self.mine = [sorted(f for f in files if f in lack) for _, files in chunks]
        self.left = [set(m) for m in self.mine]
        self.arrived: list[Future] = [Future() for _ in chunks]
        self.file_arrived: dict[str, Future] = {f: Future() for m in self.mine for f in m}
        self.chunk_of = {f: k for k, m in enumerate(self.mine) for f in m}
        self.lock = threading.Lock()
        self.say, self.t0, self.sizes, self.count = say, t0, sizes, len(chunks)
        for k, m in enumerate(self.mine):
            if not m:
                self.arrived[k].set_result([])

    def got(self, path: str) -> None:
        self.file_arrived[path].set_result([path])
        k = self.chunk_of[path]
        with self.lock:
            self.left[k].discard(path)
            done = not self.left[k]
        if done:
            self.say(f"chunk {k + 1}/{self.count} ({sum(self.sizes[f] for f in self.mine[k]) / 1e6:.1f} MB) "
                     f"from the controller (t+{time.monotonic() - self.t0:.1f} s)")
            self.arrived[k].set_result(self.mine[k])

    def run(self, feed: transfer.Feed, manifest: Manifest, source: Path, staging: str, staged: dict[str, int],
            ) -> None:
        by_path = {f.path: f for f in manifest.files}
        order = [(by_path[f], staged.get(f, 0)) for m in self.mine for f in m]
        try:
            if order:
                feed.send(source, staging, order, self.got)
        except BaseException as exc:
            for fut in [*self.arrived, *self.file_arrived.values()]:
                if not fut.done():
                    fut.set_exception(exc)
            raise


def _pipeline(fleet: Fleet, m: Mesh, manifest: Manifest, source: Path, seed: str, peers: list[str],
              lack: dict[str, set[str]], pre: dict[str, dict], say: Say, links: _Links) -> _Fanout:
    """The model in chunks (`plan_chunks`). The controller sends them to the seed in order over its one
    stream; as soon as one has arrived it spreads over the mesh (`_Fanout.spread`) while the next ones
    arrive. The mesh's known hosts are installed meanwhile (a request on each session)."""
    addresses = link_addresses(fleet, m)
    everyone = [seed, *peers]
    chunks = plan_chunks(manifest, peers) if peers else [(seed, tuple(sorted(lack[seed])))]
    sizes = {f.path: f.size for f in manifest.files}
    t0 = time.monotonic()
    copy = _SeedCopy(chunks, lack.get(seed, set()), say, t0, sizes)
    fan = _Fanout(fleet, manifest, seed, peers, lack, pre, addresses, links.sessions)

    def spread(ready: Future, k: int) -> None:
        mine = copy.arrived[k].result()
        ready.result()
        if not peers:
            fan.land({seed: set(mine)})
            return
        peer, files = chunks[k]
        how = fan.spread(files, peer, mine, direct=False)
        say(f"chunk {k + 1}/{len(chunks)} ({sum(sizes[f] for f in files) / 1e6:.1f} MB) spread {how} "
            f"(t+{time.monotonic() - t0:.1f} s)")

    def spread_file(ready: Future, k: int, path: str) -> None:
        """A file of the last chunks, from the seed to every peer as soon as it is there (so that after the
        management link's last byte only the last file's hop remains)."""
        mine = copy.file_arrived[path].result() if path in copy.file_arrived else []
        ready.result()
        how = fan.spread((path,), chunks[k][0], mine, direct=True)
        if path == chunks[k][1][-1]:
            say(f"chunk {k + 1}/{len(chunks)}: its last file spread {how} (t+{time.monotonic() - t0:.1f} s)")

    if lack.get(seed) and links.feed.node != seed:  # the first target lacks nothing, so it would be the seed
        raise RolloutFailed(f"{seed} needs files but the controller's copy goes to {links.feed.node}")
    known = transfer.mesh_known_hosts(fleet, {k: v for k, v in addresses.items()
                                              if k[0] in everyone and k[1] in everyone}) if peers else ""
    tail = range(max(0, len(chunks) - TAIL_CHUNKS) if peers else len(chunks), len(chunks))
    with ThreadPoolExecutor(max_workers=2 + len(chunks) + sum(len(chunks[k][1]) for k in tail),
                            thread_name_prefix="chunk") as pool:
        ready = pool.submit(_on_sessions, links.sessions, everyone if peers else [],
                            lambda s: s.put_known_hosts(known))
        sending = pool.submit(copy.run, links.feed, manifest, source, pre[seed]["staging"], pre[seed]["staged"])
        spreads = [pool.submit(spread, ready, k) for k in range(len(chunks)) if k not in tail]
        spreads += [pool.submit(spread_file, ready, k, f) for k in tail for f in chunks[k][1]]
        for f in [sending, *spreads]:
            f.result()
    say(f"spread done (t+{time.monotonic() - t0:.1f} s)")
    return fan


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
    return model_cache_dir()


def plan_model_push(fleet: Fleet, model: str, source: Path | None, *, hf: bool = False, mesh: str | None = None,
                    nodes: list[str] | None = None) -> dict[str, Any]:
    """`rollout model --check`: what a push would send where, with sizes, from each node's read-only preflight.
    Nothing is sent, downloaded, staged or locked. The `rollout model --check --json` shape (docs/cli.md)."""
    name = _checked_name(model)
    m = one_mesh(fleet, mesh)
    targets = _targets(m, nodes)
    plan: dict[str, Any] = {"result": "check", "model": model, "directory": name, "mesh": m.name,
                            "download": None, "files": None, "bytes": None, "seed": None,
                            "nodes": {n: None for n in targets}}
    if hf:
        cached = transfer_cache(fleet) / name
        if not cached.is_dir():  # sizes are known only once it is downloaded, which --check does not do
            plan["download"] = {"from": "huggingface", "into": str(cached)}
            return plan
        source = cached
    if source is None or not source.is_dir():
        raise UsageError(f"--from {source}: not a directory")
    manifest = transfer.local_manifest(source)
    pre = _preflight(fleet, targets, m.settings.exo.models_dir, name, manifest)
    lacking, need = _what_each_lacks(manifest, pre, targets)
    refusals = _free_space_refusals(pre, need)
    needing = [n for n in targets if lacking[n]]
    holders = [n for n in targets if not lacking[n]]
    plan.update(files=len(manifest.files), bytes=manifest.total_bytes,
                seed=(holders[0] if holders else needing[0]) if needing else None,
                nodes={n: {"has_files": len(manifest.files) - len(lacking[n]), "would_send_files": len(lacking[n]),
                           "would_send_bytes": need[n], "refused": refusals.get(n)} for n in targets})
    return plan
