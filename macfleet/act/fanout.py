"""The one fan-out: a function on every node at once, its results by node, the unreachable nodes gathered into one
error. Used over fresh logins (transfer.on_nodes), kept paramiko sessions (reboot) and push sessions (models)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from macfleet.collect.ssh import Unreachable
from macfleet.errors import UnreachableError


def each_node(nodes: list[str], fn: Callable[[str], object], *, parallel: int = 8) -> dict[str, object]:
    """fn(node) for every node at once; the results by node. The first error is raised after all finish;
    unreachable nodes are gathered into one UnreachableError."""
    results: dict[str, object] = {}
    errors: dict[str, BaseException] = {}

    def one(name: str) -> None:
        try:
            results[name] = fn(name)
        except Exception as exc:  # collected, re-raised below
            errors[name] = exc

    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(nodes)))) as pool:
        list(pool.map(one, nodes))
    unreachable = {n: str(e.nodes.get(n, e)) if isinstance(e, UnreachableError) else str(e)
                   for n, e in errors.items() if isinstance(e, UnreachableError | Unreachable)}
    if unreachable:
        raise UnreachableError(unreachable)
    if errors:
        raise next(iter(errors.values()))
    return results
