"""`-l/--limit PATTERN`: which nodes a command acts on, in the host-pattern syntax Ansible users already type.

Pure: names in, names out. The syntax, as Ansible documents it ("Patterns: targeting hosts and groups",
docs.ansible.com/ansible/latest/inventory_guide/intro_patterns.html) and as ansible-core's InventoryManager
applies it (lib/ansible/inventory/manager.py, `order_patterns` and `_evaluate_patterns`):
- terms separated by `,` or `:` (`studio-1,studio-2`, `mesh1:mesh2`);
- a term is a node name or a group name (`all`, `macfleet`, a mesh), matched exactly, or a shell-style glob
  (`studio-*`, `studio-[12]`), or a regular expression after `~` (`~studio-[0-9]+`);
- `!term` removes what it matches, `&term` keeps only what it also matches;
- the plain terms are joined first, then every `&`, then every `!`, whatever order they were written in; with
  only `&`/`!` terms the start is `all`.
A term that matches nothing is refused, naming the nodes and groups (Ansible only warns; a typo in a limit
must not quietly act on fewer or other Macs than meant).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence

from macfleet.errors import UsageError

MAX_PATTERN_CHARS = 1000


def _split(pattern: str) -> list[str]:
    return [t.strip() for t in re.split(r"[,:]", pattern) if t.strip()]


def _term_hosts(term: str, hosts: Sequence[str], groups: Mapping[str, Sequence[str]]) -> list[str]:
    """The hosts one term (without its `!`/`&`) names, in inventory order."""
    if term.startswith("~"):
        try:
            rx = re.compile(term[1:])
        except re.error as e:
            raise UsageError(f"--limit {term!r}: not a regular expression ({e})") from None
        names = {h for h in hosts if rx.match(h)} | {
            h for g, members in groups.items() if rx.match(g) for h in members}
    elif any(c in term for c in "*?["):
        names = {h for h in hosts if fnmatch.fnmatchcase(h, term)} | {
            h for g, members in groups.items() if fnmatch.fnmatchcase(g, term) for h in members}
    elif term in groups:
        names = set(groups[term])
    else:
        names = {term} & set(hosts)
    return [h for h in hosts if h in names]


def match(pattern: str, hosts: Sequence[str], groups: Mapping[str, Sequence[str]]) -> list[str]:
    """The hosts `pattern` selects, in inventory order. `groups` maps each group name (including `all`) to its
    hosts. Raises UsageError for an empty pattern, a term that matches nothing, or an empty result."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise UsageError(f"--limit is {len(pattern)} characters long: at most {MAX_PATTERN_CHARS}")
    terms = _split(pattern)
    if not terms:
        raise UsageError("--limit is empty", hint="give node or group names, e.g. --limit 'studio-1,studio-2'")
    groups = {"all": list(hosts), **groups}
    plain = [t for t in terms if t[0] not in "!&"]
    both = [t[1:] for t in terms if t[0] == "&"]
    minus = [t[1:] for t in terms if t[0] == "!"]
    known = "nodes: " + ", ".join(hosts) + "; groups: " + ", ".join(groups)
    chosen: set[str] = set()
    for term in plain or ["all"]:
        chosen |= set(_each(term, hosts, groups, known))
    for term in both:
        chosen &= set(_each(term, hosts, groups, known))
    for term in minus:
        chosen -= set(_each(term, hosts, groups, known))
    out = [h for h in hosts if h in chosen]
    if not out:
        raise UsageError(f"--limit {pattern!r} leaves no node", hint=known)
    return out


def _each(term: str, hosts: Sequence[str], groups: Mapping[str, Sequence[str]], known: str) -> list[str]:
    if not term:
        raise UsageError("--limit: `!` or `&` without a name after it", hint=known)
    found = _term_hosts(term, hosts, groups)
    if not found:
        raise UsageError(f"--limit: {term!r} matches no node or group", hint=known)
    return found
