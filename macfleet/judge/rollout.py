"""Rollout decisions, pure: manifests and release names, what each node still needs, the fan-out over the
mesh's Thunderbolt links, and the health gate's verdict from exo's `/node_id` and `/state`.

exo's API shapes: `GET /node_id` is a JSON string; `GET /state` is camelCase, with `topology.nodes` (ids),
`topology.connections[src][sink]` a list of `{"sinkMultiaddr": …}` (socket) or `{"sourceRdmaIface",
"sinkRdmaIface"}` (RDMA) edges, `nodeRdmaCtl[id].enabled`, and `runners[id]` a tagged union such as
`{"RunnerReady": {}}` or `{"RunnerFailed": {"errorMessage": …}}` (exo-explore/exo src/exo/shared/types/).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from macfleet.inventory.model import is_model_id

if TYPE_CHECKING:  # the gate's report: read here, judged by judge/health (not imported with the manifests)
    from macfleet.judge.health import HealthReport

DIGEST = "blake2b-256"
VERSION_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$")
RELEASE_RE = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}-[0-9a-f]{12}$")
_PART_RE = re.compile(r"^[^\x00-\x1f\x7f/]{1,255}$")
MAX_FILES = 100_000


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ManifestFile(_Model):
    path: str  # relative, "/"-separated, checked by safe_relpath
    size: int = Field(ge=0)
    digest: str  # blake2b-256 hex
    executable: bool = False
    sha256: str | None = None  # the source's own sha256 where it gives one (Hugging Face LFS files)


class ManifestLink(_Model):
    """A symbolic link of a release built on a node (a virtual environment's `bin/python`, a uv-managed Python's
    `python3 -> python3.13`): its path and the target it must read."""

    path: str  # relative, checked by safe_relpath
    target: str  # as os.readlink gives it, checked by safe_link_target


class Manifest(_Model):
    """Every file of a release or model, sorted by path (and, for a release built on a node, its links)."""

    algorithm: str = DIGEST
    files: tuple[ManifestFile, ...]
    links: tuple[ManifestLink, ...] = ()

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def digest(self) -> str:
        """One digest over the whole content (paths, sizes, digests, modes; links when there are any)."""
        content: list = [[f.path, f.size, f.digest, f.executable] for f in self.files]
        if self.links:
            content.append([[x.path, x.target] for x in self.links])
        canon = json.dumps(content, separators=(",", ":"))
        return hashlib.blake2b(canon.encode(), digest_size=32).hexdigest()


def safe_relpath(path: str) -> str:
    """A path read from a build, a tarball or a node is data: refuse anything that could leave its directory."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") or not _PART_RE.match(p) for p in parts):
        raise ValueError(f"unsafe path in manifest: {path!r}")
    return path


def safe_link_target(target: str) -> str:
    """A link target read from a node is data: one bounded line, no control characters."""
    if not target or len(target) > 4096 or any(ord(c) < 32 or c == "\x7f" for c in target):
        raise ValueError(f"unsafe link target in manifest: {target[:200]!r}")
    return target


def make_manifest(files: list[ManifestFile], links: list[ManifestLink] | None = None) -> Manifest:
    if len(files) + len(links or []) > MAX_FILES:
        raise ValueError(f"{len(files) + len(links or [])} files: more than {MAX_FILES}")
    seen: set[str] = set()
    for f in [*files, *(links or [])]:
        safe_relpath(f.path)
        if f.path in seen:
            raise ValueError(f"file listed twice: {f.path}")
        seen.add(f.path)
    for x in links or []:
        safe_link_target(x.target)
    return Manifest(files=tuple(sorted(files, key=lambda f: f.path)),
                    links=tuple(sorted(links or [], key=lambda x: x.path)))


def release_name(version: str, manifest: Manifest) -> str:
    """`<version>-<hash>`: the version people read, and 12 hex of the content so two builds of one version
    never share a name."""
    if not VERSION_RE.match(version):
        raise ValueError(f"bad exo version {version!r}: expected letters, digits and . _ + - (e.g. 1.0.71)")
    return f"{version}-{manifest.digest()[:12]}"


def check_release_name(name: str) -> str:
    """A release directory name read from a node or a flag: one path component, no leading dot."""
    if not VERSION_RE.match(name) or len(name) > 80:
        raise ValueError(f"bad release name {name!r}: expected VERSION-HASH")
    return name


def model_dir_name(model: str) -> str:
    """exo's layout: `org/name` lives in `<models dir>/org--name` (ModelId.normalize)."""
    if not is_model_id(model):
        raise ValueError(f"bad model {model[:120]!r}: expected ORG/NAME (letters, digits, . _ -)")
    return model.replace("/", "--")


# ------------------------------------------------------------------------------------------------------
# What each node needs
# ------------------------------------------------------------------------------------------------------


def missing_files(manifest: Manifest, have: Mapping[str, tuple[int, str | None]]) -> list[ManifestFile]:
    """The files a node still needs: absent, or present with another size or digest. `have` maps a path
    to (size, digest or None when not yet read); a file whose size matches but digest is unknown is needed."""
    out = []
    for f in manifest.files:
        got = have.get(f.path)
        if got is None or got[0] != f.size or got[1] != f.digest:
            out.append(f)
    return out


# A chunk is what one peer receives from the seed and passes on; each node verifies a chunk as soon as it has
# it, so the last chunk's spread is what the push waits for after the management link is done. Big models are
# cut finer, so that tail stays short (1 GiB verifies in about a second on Apple silicon); small ones go in one
# chunk per peer (each chunk costs every peer an rsync over SSH), the smallest last. The controller sends the
# chunks in order, so only the last one arrives when the management link is done: its files go from the seed to
# every peer itself, each as soon as it is there (one hop instead of two).
CHUNK_BYTES = 1 << 30
TAIL_CHUNKS = 1


def plan_chunks(manifest: Manifest, peers: list[str], *, chunk_bytes: int = CHUNK_BYTES, extra: int = 0,
                ) -> list[tuple[str, tuple[str, ...]]]:
    """The files cut into chunks of about the same bytes: at least one per peer (plus `extra`), none much
    over `chunk_bytes` unless one file is bigger, never more than the files. Largest files first, each to the
    lightest chunk; the chunks largest first (the smallest last: the tail is short); chunk i goes to peer
    i mod len(peers)."""
    if not peers or not manifest.files:
        return []
    total = manifest.total_bytes
    count = max(len(peers) + extra, -(-total // max(1, chunk_bytes)))
    count = min(count, len(manifest.files))
    chunks: list[list[str]] = [[] for _ in range(count)]
    load = [0] * count
    for f in sorted(manifest.files, key=lambda f: (-f.size, f.path)):
        i = min(range(count), key=lambda i: (load[i], i))
        chunks[i].append(f.path)
        load[i] += f.size
    order = sorted(range(count), key=lambda i: (-load[i], i))
    return [(peers[k % len(peers)], tuple(sorted(chunks[i]))) for k, i in enumerate(order)]


class CableCopy(_Model):
    """One transfer: `src` sends `files` to `dst` over the cable between them, at `dst_address`."""

    src: str
    dst: str
    dst_address: str
    files: tuple[str, ...]


def fanout_direct(seed: str, peers: list[str], addresses: Mapping[tuple[str, str], str]) -> list[CableCopy]:
    """The seed sends the whole thing to every peer at once, each over its own cable (small payloads: builds)."""
    return [CableCopy(src=seed, dst=p, dst_address=addresses[(seed, p)], files=()) for p in peers]


# ------------------------------------------------------------------------------------------------------
# Releases kept
# ------------------------------------------------------------------------------------------------------


def releases_to_prune(releases: list[str], keep: set[str], limit: int) -> list[str]:
    """`releases` oldest first; keep the newest `limit` and everything in `keep` (current, previous)."""
    kept_newest = set(releases[-limit:]) if limit > 0 else set()
    return [r for r in releases if r not in keep and r not in kept_newest]


# ------------------------------------------------------------------------------------------------------
# Health gate
# ------------------------------------------------------------------------------------------------------


# The checks a switch must pass before it is kept (the catalogue's, judged as doctor judges them: an RDMA
# connection each way between every pair whose cable, ports and RDMA are good).
HEALTH_GATE = ("exo-running", "exo-peers", "exo-rdma", "exo-runners")


class HealthVerdict(_Model):
    healthy: bool
    reasons: tuple[str, ...]  # why not (empty when healthy)


def gate_verdict(report: HealthReport) -> HealthVerdict:
    """Healthy when the gate's checks found nothing and could tell everywhere; else each problem, one line."""
    reasons = tuple(report.problems())
    return HealthVerdict(healthy=not reasons, reasons=reasons)


# ------------------------------------------------------------------------------------------------------
# Reports (the --json contracts)
# ------------------------------------------------------------------------------------------------------


class NodeStatus(_Model):
    version: str | None  # the release `current` points at; None: could not tell (no `current`)
    running: bool


class RolloutStatus(_Model):
    current: str | None  # the release every node is on; None when they differ
    nodes: dict[str, NodeStatus]


class RolloutReport(_Model):
    result: str  # "switched", "already", "repaired"
    release: str | None
    previous: str | None
    took_s: float
    staged: list[str] = Field(default_factory=list)
    built_on: str | None = None  # the node that built the release in this run (None: nothing was built)
    status: RolloutStatus


class ModelNodeReport(_Model):
    had_files: int  # complete, verified files it already held
    received_bytes: int  # what it still needed (less what was already staged)


class ModelPushReport(_Model):
    model: str
    directory: str  # under the models dir: org--name
    files: int
    bytes: int
    result: str  # "pushed", "already"
    took_s: float
    seed: str | None = None
    nodes: dict[str, ModelNodeReport]
    rerouted: list[str] = Field(default_factory=list)  # cables that failed, and what was done instead


class ModelVerifyReport(_Model):
    model: str
    files: int
    differ: dict[str, dict[str, str]]  # node -> path -> why (absent, size, digest)
