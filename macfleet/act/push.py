"""`rollout model`'s transport: the push sessions and the controller's stream, the chunks sent to the seed in
order while the ones already there spread over the cables, each hop on its own cable, every file landed (verified)
by the node that received it. What to send where is judged before (judge/push.py) and told here."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from macfleet.act import transfer
from macfleet.act.fanout import each_node
from macfleet.errors import RemoteCommandError, RolloutFailed, UnreachableError
from macfleet.inventory.model import Fleet
from macfleet.judge.push import NodeHolding
from macfleet.judge.rollout import TAIL_CHUNKS, CableCopy, Manifest, plan_chunks

Say = Callable[[str], None]
Progress = Callable[[str, int, int], None]  # (node, bytes received so far, bytes it needs)
PROGRESS_EVERY_S = 2.0


@dataclass
class Links:
    """What the push talks over, opened before the preflight so that their SSH start-ups overlap the digests
    of the source and each other: one session per node, and the controller's stream to the node that will be
    the seed if it needs anything (the first target; it carries nothing until the preflight passed)."""

    sessions: dict[str, transfer.NodeSession]
    feed: transfer.Feed


@contextlib.contextmanager
def links(fleet: Fleet, targets: list[str]) -> Iterator[Links]:
    with (transfer.transfer_agent(fleet, fleet.node(targets[0])) if len(targets) > 1
          else contextlib.nullcontext({})) as agent, transfer.node_sessions(fleet, targets, agent) as sessions:
        feed = transfer.Feed(transfer.ssh_target(fleet, targets[0]))
        try:
            yield Links(sessions=sessions, feed=feed)
        finally:
            feed.close()


def on_sessions(sessions: dict[str, transfer.NodeSession], nodes: list[str], fn: Callable) -> dict[str, Any]:
    """fn(session) on every node's session at once (act/fanout)."""
    return each_node(nodes, lambda n: fn(sessions[n]), parallel=max(1, len(nodes)))


def run_hops(fleet: Fleet, hops: list[CableCopy], where: Callable[[str, str], str], dst_dirs: dict[str, str],
             sessions: dict[str, transfer.NodeSession]) -> dict[tuple[str, str], str]:
    """Every hop at once (each on its own cable), each file from the directory `where(src, path)` names;
    failures by (src, dst), each naming its cable."""
    by_key = {f"{h.src}>{h.dst}": h for h in hops}

    def one(key: str) -> str | None:
        h = by_key[key]
        by_dir: dict[str, list[str]] = {}
        for f in h.files:
            by_dir.setdefault(where(h.src, f), []).append(f)
        try:
            for src_dir, files in sorted(by_dir.items()):
                sessions[h.src].rsync_to(src_dir, fleet.node(h.dst).user, h.dst_address, dst_dirs[h.dst], files)
        except (RemoteCommandError, UnreachableError) as exc:
            return f"cable {h.src}–{h.dst} ({h.dst_address}): {exc.message.splitlines()[0][-200:]}"
        return None

    failed = each_node(list(by_key), one, parallel=max(1, len(hops)))
    return {(by_key[k].src, by_key[k].dst): why for k, why in failed.items() if why}


def land_all(sessions: dict[str, transfer.NodeSession], manifest: Manifest, pre: dict[str, NodeHolding],
             only: dict[str, set[str]]) -> dict[str, transfer.LandResult]:
    """Verify and put in place what each node received (`only[node]`: the files it was sent)."""
    nodes = [n for n in only if only[n]]
    return on_sessions(sessions, nodes, lambda s: s.land(
        Manifest(files=tuple(f for f in manifest.files if f.path in only[s.node])),
        pre[s.node].staging, pre[s.node].final))


@contextlib.contextmanager
def watch_progress(sessions: dict[str, transfer.NodeSession], pre: dict[str, NodeHolding], base: dict[str, int],
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
                got = on_sessions(sessions, nodes, lambda s: s.size_under([pre[s.node].final, pre[s.node].staging]))
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


class Fanout:
    """The spread of chunks over the mesh, and what it has done so far: the hops that failed (each naming its
    cable), the files landed on each node, the nodes a peer's failed cable made the seed serve itself.

    A node passes a chunk on as soon as it has it, from staging, and verifies (lands) it only afterwards, in
    parallel with what follows: every receiver verifies its own copy, so a bad one is caught wherever it went."""

    def __init__(self, fleet: Fleet, manifest: Manifest, seed: str, peers: list[str], lack: dict[str, set[str]],
                 pre: dict[str, NodeHolding], addresses: dict[tuple[str, str], str],
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
        return self.pre[node].staging if staged else self.pre[node].final

    def send(self, src: str, files: dict[str, tuple[str, ...]]) -> dict[str, set[str]]:
        """`src` sends each destination its files, every cable at once; what arrived, by destination."""
        hops = [CableCopy(src=src, dst=d, dst_address=self.addresses[(src, d)], files=fs) for d, fs in files.items()]
        bad = run_hops(self.fleet, hops, self.where, {n: self.pre[n].staging for n in files}, self.sessions)
        with self.lock:
            self.failed.update(bad)
        return {h.dst: set(h.files) for h in hops if (h.src, h.dst) not in bad}

    def land(self, got: dict[str, set[str]]) -> None:
        got = {n: fs for n, fs in got.items() if fs}

        def one(node: str) -> transfer.LandResult:
            part = Manifest(files=tuple(f for f in self.manifest.files if f.path in got[node]))
            return self.sessions[node].land(part, self.pre[node].staging, self.pre[node].final)

        res = each_node(list(got), one, parallel=max(1, len(got)))
        with self.lock:
            for n, r in res.items():
                self.landed[n].update(r.ok)
        raise_bad({n: r.bad for n, r in res.items()})

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


def pipeline(fleet: Fleet, addresses: dict[tuple[str, str], str], manifest: Manifest, source: Path, seed: str,
             peers: list[str], lack: dict[str, set[str]], pre: dict[str, NodeHolding], say: Say, links: Links
             ) -> Fanout:
    """The model in chunks (`plan_chunks`). The controller sends them to the seed in order over its one
    stream; as soon as one has arrived it spreads over the mesh (`Fanout.spread`) while the next ones
    arrive. The mesh's known hosts are installed meanwhile (a request on each session)."""
    everyone = [seed, *peers]
    chunks = plan_chunks(manifest, peers) if peers else [(seed, tuple(sorted(lack[seed])))]
    sizes = {f.path: f.size for f in manifest.files}
    t0 = time.monotonic()
    copy = _SeedCopy(chunks, lack.get(seed, set()), say, t0, sizes)
    fan = Fanout(fleet, manifest, seed, peers, lack, pre, addresses, links.sessions)

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
        ready = pool.submit(on_sessions, links.sessions, everyone if peers else [],
                            lambda s: s.put_known_hosts(known))
        sending = pool.submit(copy.run, links.feed, manifest, source, pre[seed].staging, pre[seed].staged)
        spreads = [pool.submit(spread, ready, k) for k in range(len(chunks)) if k not in tail]
        spreads += [pool.submit(spread_file, ready, k, f) for k in tail for f in chunks[k][1]]
        for f in [sending, *spreads]:
            f.result()
    say(f"spread done (t+{time.monotonic() - t0:.1f} s)")
    return fan


def raise_bad(bad: dict[str, dict[str, str]]) -> None:
    bad = {n: b for n, b in bad.items() if b}
    if bad:
        node, files = next(iter(sorted(bad.items())))
        path, why = next(iter(sorted(files.items())))
        raise RolloutFailed(f"{node}: {path} did not arrive intact ({why}); it was not put in place",
                            hint="run the same command again: complete files are kept, partial ones continue",
                            details={"bad": bad})
