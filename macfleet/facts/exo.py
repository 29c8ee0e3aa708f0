"""exo's HTTP API and log, as read on a node: `/node_id`, `/state` and `~/.exo/exo_log/exo.log`; and exo's
version, which its API does not say, from the release installed under the install root (`parse_exo_release`).

Shapes follow exo's own source (HEAD schema: `/state` is the State model in camelCase, tagged unions as
`{"ClassName": {...}}`, `/node_id` a bare JSON string). No full capture of `/state` from a real cluster is
public yet, so the state parser keeps to the few fields doctor judges and treats anything else as absent.
The log signatures are proven on exo log excerpts published in exo's and MLX's issues.
"""

from __future__ import annotations

import json
import re

from pydantic import Field

from macfleet.errors import FactsParseError
from macfleet.facts._common import Facts

MAX_JSON_BYTES = 8 * 1024 * 1024


class ExoHttp(Facts):
    """One `curl -s -i` answer: status, headers (lower-case names) and the body text. exo's API says nothing of
    its version: no header, no field (exo b5375f8 src/exo/api/main.py); the version is read from the release
    on disk instead (`parse_exo_release`)."""

    status: int
    headers: dict[str, str] = Field(default_factory=dict)
    body: str = ""


# A release directory's name as rollout makes it: `<version>-<12 hex of its content>` (judge/rollout.py).
_RELEASE_HASH = re.compile(r"-[0-9a-f]{12}$")
NO_CURRENT = "no-current"


class ExoRelease(Facts):
    """What the `exo-release` read found under the install root: the release `current` points at, and the
    `Version:` of package `exo` in that release's Python environment(s) (its dist-info METADATA).

    The package version is exo's own: exo's `__version__` is `importlib.metadata.version("exo")`, and its
    default discovery namespace ("nodes with different namespaces will not connect") is that version (exo
    b5375f8cee43 src/exo/__init__.py, src/exo/main.py `--namespace`; since 09f9ea313). It is pyproject's
    [project] version, not the git tag: exo's tag v1.0.71 (fd707de30b42) carries version 0.3.70."""

    root: str
    current: str | None = None  # the link's target (`releases/<name>`), None: no `current` there
    packages: list[str] = Field(default_factory=list)  # each exo dist-info's Version, as found

    @property
    def name(self) -> str | None:
        return self.current.rstrip("/").rsplit("/", 1)[-1] if self.current else None

    @property
    def version(self) -> str | None:
        """The package's version when one is there, else the version in the release's name; None: unknown."""
        found = sorted(set(self.packages))
        if len(found) > 1 or self.name is None:
            return None
        return found[0] if found else _RELEASE_HASH.sub("", self.name) or None

    def why_unknown(self) -> str:
        if self.name is None:
            return (f"no exo release installed by macfleet on this node ({self.root}/current is not there): "
                    "an exo installed another way does not say its version")
        return f"{self.root}/current ({self.name}) holds more than one exo package: {', '.join(self.packages)}"


def parse_exo_release(text: str) -> ExoRelease:
    """The output of collect's `exo-release` read: `root ROOT`, `current TARGET` (or `no-current`), then one
    `package VERSION` per exo dist-info in the release."""
    root = current = None
    packages: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        word, _, value = line.strip().partition(" ")
        if word == NO_CURRENT and not value:
            continue
        if word == "root" and value.strip() and root is None:
            root = value.strip()[:200]
        elif word == "current" and value.strip() and current is None:
            current = value.strip()
        elif word == "package" and value.strip():
            packages.append(value.strip()[:80])
        elif line.strip():
            raise FactsParseError("exo-release", "`root ROOT`, `current TARGET` or `no-current`, then `package "
                                  "VERSION` lines", line=n, found=line[:120])
    if root is None or (current is None and NO_CURRENT not in text.split()):
        raise FactsParseError("exo-release", "`root ROOT`, then `current TARGET` or `no-current`", line=1,
                              found=text[:120])
    return ExoRelease(root=root, current=current, packages=packages)


def parse_http_response(text: str) -> ExoHttp:
    """The output of `curl -s -i URL`: a status line, headers, a blank line, the body."""
    text = text.replace("\r\n", "\n")
    head, sep, body = text.partition("\n\n")
    lines = head.split("\n")
    m = re.match(r"^HTTP/\d(?:\.\d)?\s+(\d{3})\b", lines[0].strip()) if lines else None
    if not m or not sep:
        raise FactsParseError("curl -s -i", "an HTTP status line, headers and a blank line", line=1,
                              found=(lines[0] if lines else "")[:120])
    headers = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    return ExoHttp(status=int(m.group(1)), headers=headers, body=body)


def parse_node_id(body: str) -> str:
    """`/node_id` is a JSON string (exo's docs show an object; the code returns the bare string)."""
    try:
        value = json.loads(body)
    except ValueError:
        raise FactsParseError("GET /node_id", "a JSON string", line=1, found=body[:80]) from None
    if isinstance(value, dict):  # the documented (but not served) shape, accepted for older builds
        value = value.get("node_id") or value.get("nodeId")
    if not isinstance(value, str) or not value.strip():
        raise FactsParseError("GET /node_id", "a non-empty JSON string", line=1, found=body[:80])
    return value.strip()


HEALTHY_RUNNERS = ("RunnerReady", "RunnerRunning")  # a runner that has loaded its shard (or serves)


class ExoRunner(Facts):
    runner_id: str
    status: str  # "RunnerReady", "RunnerFailed"...
    error_message: str | None = None
    node_id: str | None = None  # the node it runs on, from the instances' nodeToRunner


class ExoStateFacts(Facts):
    nodes: list[str]  # node ids in the topology
    names: dict[str, str] = Field(default_factory=dict)  # node id -> friendlyName
    builds: dict[str, str] = Field(default_factory=dict)  # node id -> osBuildVersion
    rdma_edges: list[tuple[str, str]] = Field(default_factory=list)  # (source, sink) node ids
    socket_edges: list[tuple[str, str]] = Field(default_factory=list)
    runners: list[ExoRunner] = Field(default_factory=list)
    bridge_enabled: dict[str, bool] = Field(default_factory=dict)
    rdma_enabled: dict[str, bool] = Field(default_factory=dict)

    def name_of(self, node_id: str) -> str:
        return self.names.get(node_id, node_id[:8])


def as_object(value: object) -> dict:
    """A JSON object read from exo, or {} when it has another shape (what exo sends is data)."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list:
    """A JSON list read from exo, or [] when it has another shape."""
    return value if isinstance(value, list) else []


def _tagged(value: object) -> tuple[str, dict]:
    """exo's tagged unions: {"ClassName": {...}} -> ("ClassName", {...})."""
    if isinstance(value, dict) and len(value) == 1:
        (tag, inner), = value.items()
        return str(tag), as_object(inner)
    return "?", {}


def _runner_nodes(instances: object) -> dict[str, str]:
    out: dict[str, str] = {}
    for inst in as_object(instances).values():
        _tag, body = _tagged(inst)
        for node_id, runner_id in as_object(as_object(body.get("shardAssignments")).get("nodeToRunner")).items():
            out[str(runner_id)] = str(node_id)
    return out


def _edges(connections: object) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    rdma: set[tuple[str, str]] = set()
    sock: set[tuple[str, str]] = set()
    for src, sinks in as_object(connections).items():
        for sink, conns in as_object(sinks).items():
            for c in as_list(conns):
                if isinstance(c, dict) and "sourceRdmaIface" in c:
                    rdma.add((str(src), str(sink)))
                elif isinstance(c, dict) and "sinkMultiaddr" in c:
                    sock.add((str(src), str(sink)))
    return sorted(rdma), sorted(sock)


def load_state(body: str) -> dict:
    """exo's `GET /state` (HEAD schema), read once: a JSON object with a `topology`, at most MAX_JSON_BYTES.
    What is judged of it is reduced from this one object: `exo_state_facts` (the health checks), `cluster_of`
    (facts/exoapi.py: nodes, models, instances) and `coordinators_of` (facts/discovery.py)."""
    if len(body) > MAX_JSON_BYTES:
        raise FactsParseError("GET /state", f"at most {MAX_JSON_BYTES} bytes", found=f"{len(body)} bytes")
    try:
        state = json.loads(body)
    except ValueError:
        raise FactsParseError("GET /state", "a JSON object", line=1, found=body[:80]) from None
    if not isinstance(state, dict) or not isinstance(state.get("topology"), dict):
        raise FactsParseError("GET /state", "a JSON object with a 'topology'", line=1, found=body[:80])
    return state


def parse_exo_state(body: str) -> ExoStateFacts:
    return exo_state_facts(load_state(body))


def exo_state_facts(state: dict) -> ExoStateFacts:
    """`/state` reduced to what a health check judges."""
    topo = as_object(state.get("topology"))
    nodes = [str(n) if not isinstance(n, dict) else str(n.get("nodeId")) for n in as_list(topo.get("nodes"))]
    identities = as_object(state.get("nodeIdentities"))
    names = {k: str(v.get("friendlyName")) for k, v in identities.items() if isinstance(v, dict)
             and v.get("friendlyName")}
    builds = {k: str(v.get("osBuildVersion")) for k, v in identities.items() if isinstance(v, dict)
              and v.get("osBuildVersion")}
    rdma, sock = _edges(topo.get("connections"))
    owners = _runner_nodes(state.get("instances"))
    runners = []
    for rid, value in as_object(state.get("runners")).items():
        tag, body_ = _tagged(value)
        error = body_.get("errorMessage")
        runners.append(ExoRunner(runner_id=str(rid), status=tag, error_message=None if error is None else str(error),
                                 node_id=owners.get(str(rid))))
    bridge = {k: bool(v.get("enabled")) for k, v in as_object(state.get("nodeThunderboltBridge")).items()
              if isinstance(v, dict) and "enabled" in v}
    rdma_ctl = {k: bool(v.get("enabled")) for k, v in as_object(state.get("nodeRdmaCtl")).items()
                if isinstance(v, dict) and "enabled" in v}
    return ExoStateFacts(nodes=nodes, names=names, builds=builds, rdma_edges=rdma, socket_edges=sock,
                         runners=sorted(runners, key=lambda r: r.runner_id), bridge_enabled=bridge,
                         rdma_enabled=rdma_ctl)


# ------------------------------------------------------------------------------------------------- the log

START_LINE = re.compile(r"\bStarting EXO\b")


READY_LINE = re.compile(r"\brunner ready\b", re.IGNORECASE)


def log_since_start(text: str) -> list[str]:
    """The lines of exo's log that tell its current state: since its last start (all of them when no start
    line is in the tail read), and since the last time its runner became ready: errors before that were
    recovered from."""
    lines = text.splitlines()
    marks = [i for i, line in enumerate(lines) if START_LINE.search(line) or READY_LINE.search(line)]
    return lines[marks[-1]:] if marks else lines
