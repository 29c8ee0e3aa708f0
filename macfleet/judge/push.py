"""`rollout model`'s judgement before a byte moves: what each node holds of the model (its preflight, typed),
what it still needs, whether that fits its free space, and which node seeds the fan-out. Pure."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from macfleet.errors import FactsParseError
from macfleet.facts.disk import parse_df
from macfleet.judge.rollout import Manifest, missing_files

DISK_MARGIN_BYTES = 256 * 1024 * 1024  # room left for exo's logs and the OS after the push


class NodeHolding(BaseModel):
    """One node's answer to the preflight (node/preflight.py): the model's final and staging directories, `df -k`
    of the models volume, the files it has (path -> size, digest or None when not read) and what is staged."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    final: str
    staging: str
    df: str
    have: dict[str, tuple[int, str | None]]
    staged: dict[str, int]

    def held_bytes(self) -> int:
        """What is already there, final and staged: the start of its progress."""
        return sum(size for size, _ in self.have.values()) + sum(self.staged.values())


class PushPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    lacking: dict[str, tuple[str, ...]]  # node -> the paths it still needs (absent, another size or digest)
    need: dict[str, int]  # node -> the bytes it still has to receive (what is staged already counts)
    seed: str | None  # the node the fan-out starts from; None when nobody needs anything
    refusals: dict[str, str]  # node -> why the model does not fit there (nothing is sent when any)

    @property
    def needing(self) -> list[str]:
        return [n for n, paths in self.lacking.items() if paths]


def _to_receive(h: NodeHolding, files: list) -> int:
    return sum(f.size - min(int(h.staged.get(f.path, 0)), f.size) for f in files)


def space_refusals(pre: Mapping[str, NodeHolding], need: Mapping[str, int]) -> dict[str, str]:
    """The nodes where `need` bytes, and the margin, do not fit the free space its `df -k` says (or where that
    could not be read: never taken as room)."""
    out = {}
    for node, h in sorted(pre.items()):
        if need[node] == 0:
            continue
        try:
            free = parse_df(h.df).available_bytes
        except FactsParseError as exc:
            out[node] = f"free space unknown ({exc.message})"
            continue
        if free < need[node] + DISK_MARGIN_BYTES:
            out[node] = (f"needs {need[node] / 1e9:.2f} GB + {DISK_MARGIN_BYTES / 1e9:.2f} GB margin, "
                         f"has {free / 1e9:.2f} GB free")
    return out


def size_refusals(pre: Mapping[str, NodeHolding], listing: Manifest) -> dict[str, str]:
    """Before any digest: the files a node lacks by their size alone (absent, or of another size: the least it
    needs) against its free space."""
    need = {n: _to_receive(h, [f for f in listing.files if f.path not in h.have or h.have[f.path][0] != f.size])
            for n, h in pre.items()}
    return space_refusals(pre, need)


def plan_push(targets: list[str], pre: Mapping[str, NodeHolding], manifest: Manifest) -> PushPlan:
    """What each target lacks by digest and has to receive, whether it fits, and the seed: a node that has the
    whole model, else the first that needs it (the one the controller's stream goes to)."""
    lacking = {n: missing_files(manifest, pre[n].have) for n in targets}
    need = {n: _to_receive(pre[n], lacking[n]) for n in targets}
    holders = [n for n in targets if not lacking[n]]
    needing = [n for n in targets if lacking[n]]
    seed = (holders[0] if holders else needing[0]) if needing else None
    return PushPlan(lacking={n: tuple(f.path for f in lacking[n]) for n in targets}, need=need, seed=seed,
                    refusals=space_refusals({n: pre[n] for n in targets}, need))
