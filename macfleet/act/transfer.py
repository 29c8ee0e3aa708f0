"""Moving files to the nodes: once from the controller to a seed over the management network, then from node
to node over the Thunderbolt cables, with rsync over SSH.

Security: every hop checks host keys strictly. The controller uses the inventory's key and known_hosts. A node
reaching a peer on its Thunderbolt address uses the controller's key through SSH agent forwarding from a
private, short-lived agent that holds only that key (no private key is ever copied to a Mac), and a
known_hosts file we derive from the inventory's: each peer's own host keys, listed under its Thunderbolt
addresses (sshd answers with the same key on every interface).

Integrity: files are sent into a staging directory beside their destination; a small Python program on the
node (the interpreter Ansible uses, /usr/bin/python3) checks each file's blake2b digest against the manifest
and renames it into place (os.replace, atomic within one filesystem). Nothing reaches its final name
unverified; a partial file stays in staging and rsync continues it (--partial --append-verify).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from macfleet.constants import HOMEBREW_BIN
from macfleet.errors import RemoteCommandError, UnreachableError, UsageError
from macfleet.inventory.model import Fleet, Node
from macfleet.judge.rollout import Manifest, ManifestFile, make_manifest, safe_relpath

REMOTE_PYTHON = "/usr/bin/python3"
CHUNK = 4 * 1024 * 1024
# AES-GCM first: hardware AES on Apple silicon (and x86 controllers) makes it the cheapest cipher per byte
# (OpenSSH's default prefers ChaCha20-Poly1305); "^" puts it first without dropping the defaults.
SSH_OPTS = ("-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=10",
            "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3", "-o", "Ciphers=^aes128-gcm@openssh.com")
MESH_KNOWN_HOSTS = ".macfleet/known_hosts_mesh"  # relative to the admin user's home on each node


class DigestsStopped(Exception):
    """local_manifest was told to stop (`stop` set): its caller refused the push meanwhile."""


def file_digest(path: Path, stop: threading.Event | None = None) -> str:
    h = hashlib.blake2b(digest_size=32)
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            if stop is not None and stop.is_set():
                raise DigestsStopped(str(path))
            h.update(chunk)
    return h.hexdigest()


def local_manifest(root: Path, *, sha256: Mapping[str, str] | None = None, digests: bool = True,
                   stop: threading.Event | None = None) -> Manifest:
    """Every regular file under `root` (symlinks and special files refused: a build is plain files).
    `digests=False`: paths and sizes only (digest ""), at the cost of a directory walk. The digests are
    computed several files at once (hashlib releases the GIL), one per core; `stop` set ends them early
    (DigestsStopped)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if Path(dirpath, d).is_symlink()]:
            p = Path(dirpath) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink() or not p.is_file():
                raise UsageError(f"{p}: not a regular file", hint="a release or model holds plain files only")
            try:
                safe_relpath(rel)
            except ValueError:
                raise UsageError(f"{root}: refused the file name {rel[:200]!r}",
                                 hint="names of one line, without control characters (a newline, a tab…)"
                                 ) from None
            found.append((p, rel, p.stat()))
    if digests and len(found) > 1:
        with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
            sums = list(pool.map(lambda p: file_digest(p, stop), [p for p, _, _ in found]))
    else:
        sums = [file_digest(p, stop) if digests else "" for p, _, _ in found]
    return make_manifest([ManifestFile(path=rel, size=st.st_size, digest=d, executable=bool(st.st_mode & 0o111),
                                       sha256=(sha256 or {}).get(rel)) for (_, rel, st), d in zip(found, sums,
                                                                                                  strict=True)])


# ------------------------------------------------------------------------------------------------------
# SSH from the controller
# ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SshArgs:
    """OpenSSH arguments for one node, strict host keys against the inventory's known_hosts."""

    node: str
    destination: str  # user@host
    options: tuple[str, ...]

    @classmethod
    def for_node(cls, fleet: Fleet, node: Node) -> SshArgs:
        ssh = next(m.settings.ssh for m in fleet.meshes if m.name == node.mesh)
        known = fleet.path(ssh.known_hosts_file)
        if known is None or not known.is_file():
            raise UsageError(f"known_hosts file {known} does not exist",
                             hint="host keys are checked strictly: add each Mac's key first")
        opts = [*SSH_OPTS, "-o", "IdentitiesOnly=yes", "-o", f"UserKnownHostsFile={known}"]
        if node.port is not None:  # None: what ssh would use (~/.ssh/config, else 22)
            opts += ["-p", str(node.port)]
        key = fleet.path(ssh.private_key_file)
        if key is not None:
            opts += ["-i", str(key)]
        user = f"{node.user}@" if node.user else ""
        return cls(node=node.name, destination=f"{user}{node.address}", options=tuple(opts))

    def argv(self, command: str, *, forward_agent: bool = False) -> list[str]:
        return ["ssh", *self.options, *(["-A"] if forward_agent else ["-a"]), self.destination, command]

    @property
    def rsync_shell(self) -> str:
        return shlex.join(["ssh", *self.options])


def run_remote(args: SshArgs, command: str, *, stdin: str | None = None, timeout_s: float = 120,
               env: Mapping[str, str] | None = None, forward_agent: bool = False) -> str:
    """Run one shell command line on a node; its stdout, or RemoteCommandError / UnreachableError."""
    try:
        p = subprocess.run(args.argv(command, forward_agent=forward_agent), input=stdin, capture_output=True,
                           text=True, timeout=timeout_s, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired:
        raise RemoteCommandError(args.node, command[:200], -1, f"no answer within {timeout_s:g} s") from None
    if p.returncode == 255:
        raise UnreachableError({args.node: p.stderr.strip()[-300:] or "ssh failed"})
    if p.returncode != 0:
        raise RemoteCommandError(args.node, command[:200], p.returncode, p.stderr)
    return p.stdout


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
    unreachable = {n: str(e.nodes.get(n, e)) for n, e in errors.items() if isinstance(e, UnreachableError)}
    if unreachable:
        raise UnreachableError(unreachable)
    if errors:
        raise next(iter(errors.values()))
    return results


def on_nodes(fleet: Fleet, nodes: list[str], fn, *, parallel: int = 8) -> dict[str, object]:
    """fn(SshArgs) on every node at once, as `each_node`."""
    return each_node(nodes, lambda name: fn(SshArgs.for_node(fleet, fleet.node(name))), parallel=parallel)


# ------------------------------------------------------------------------------------------------------
# The agent and the mesh known_hosts
# ------------------------------------------------------------------------------------------------------


# The private agent's keeper, run by this Python (`sys.executable -I -c`): it starts `ssh-agent -D` as its child and
# ends it, and removes the agent's directory, as soon as its stdin reaches EOF. Its stdin is a pipe whose only
# writer is the push's process, so EOF comes when the push ends and also when it is killed in any way (kill -9
# included: the kernel closes the dead process's descriptors). PR_SET_PDEATHSIG would do on Linux only (and fires
# when the forking *thread* ends); `ssh-agent -t` alone leaves the agent running. The keeper runs in a session of its
# own, so a Ctrl-C at the terminal reaches the push, which then ends it in order.
_AGENT_KEEPER = r"""
import os, shutil, subprocess, sys
sock, lifetime = sys.argv[1], sys.argv[2]
agent = subprocess.Popen(["ssh-agent", "-D", "-t", lifetime, "-a", sock], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    print(agent.pid, flush=True)
    sys.stdin.buffer.read()
finally:
    agent.terminate()
    try:
        agent.wait(5)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()
    shutil.rmtree(os.path.dirname(sock), ignore_errors=True)
"""


@contextlib.contextmanager
def private_agent(key: Path, *, lifetime_s: int = 7200) -> Iterator[dict[str, str]]:
    """An ssh-agent of our own holding only `key` (for `lifetime_s` at most), which dies with this process:
    yields the environment that points ssh at it."""
    tmp = Path(tempfile.mkdtemp(prefix="macfleet-agent-"))
    sock = tmp / "agent.sock"
    keeper = subprocess.Popen([sys.executable, "-I", "-c", _AGENT_KEEPER, str(sock), str(int(lifetime_s))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        assert keeper.stdout is not None
        if not keeper.stdout.readline().strip():
            raise UsageError("ssh-agent did not start (is OpenSSH's ssh-agent on the PATH?)")
        deadline = time.monotonic() + 5
        while not sock.exists():
            if keeper.poll() is not None or time.monotonic() > deadline:
                raise UsageError("ssh-agent did not start")
            time.sleep(0.02)
        env = {"SSH_AUTH_SOCK": str(sock)}
        add = subprocess.run(["ssh-add", "-q", "-t", str(int(lifetime_s)), str(key)], env={**os.environ, **env},
                             capture_output=True, text=True, timeout=30)
        if add.returncode != 0:
            raise UsageError(f"ssh-add {key} failed: {add.stderr.strip()[-300:]}")
        yield env
    finally:
        with contextlib.suppress(OSError):
            assert keeper.stdin is not None
            keeper.stdin.close()
        try:
            keeper.wait(10)
        except subprocess.TimeoutExpired:
            keeper.kill()
            keeper.wait()
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def transfer_agent(fleet: Fleet, node: Node, *, lifetime_s: int = 7200) -> Iterator[dict[str, str]]:
    """A private ssh-agent holding only the inventory's key, for node-to-node hops; ended afterwards, and with
    the push if it is killed (`private_agent`)."""
    ssh = next(m.settings.ssh for m in fleet.meshes if m.name == node.mesh)
    key = fleet.path(ssh.private_key_file)
    if key is None:
        raise UsageError("node-to-node transfers need macfleet_ssh.private_key_file in the inventory")
    with private_agent(key, lifetime_s=lifetime_s) as env:
        yield env


def host_keys(known_hosts: Path, address: str) -> list[str]:
    """The `type key` pairs known_hosts holds for `address` (hashed entries included, via ssh-keygen -F)."""
    p = subprocess.run(["ssh-keygen", "-F", address, "-f", str(known_hosts)], capture_output=True, text=True)
    keys = []
    for line in p.stdout.splitlines():
        parts = line.split()
        if line.startswith("#") or len(parts) < 3:
            continue
        keys.append(f"{parts[1]} {parts[2]}")
    return keys


def mesh_known_hosts(fleet: Fleet, addresses: Mapping[tuple[str, str], str]) -> str:
    """known_hosts lines for every peer's Thunderbolt addresses, from the keys the inventory trusts."""
    lines = []
    for (_, peer), addr in sorted(addresses.items()):
        node = fleet.node(peer)
        ssh = next(m.settings.ssh for m in fleet.meshes if m.name == node.mesh)
        known = fleet.path(ssh.known_hosts_file)
        keys = host_keys(known, node.address if node.port in (None, 22) else f"[{node.address}]:{node.port}")
        if not keys:
            raise UsageError(f"no host key for {peer} ({node.address}) in {known}")
        lines += [f"{addr} {k}" for k in keys]
    return "".join(sorted(set(f"{line}\n" for line in lines)))


def install_mesh_known_hosts(fleet: Fleet, nodes: list[str], text: str) -> None:
    cmd = (f"mkdir -p ~/.macfleet && chmod 700 ~/.macfleet && umask 077 && cat > ~/{MESH_KNOWN_HOSTS}.tmp "
           f"&& mv ~/{MESH_KNOWN_HOSTS}.tmp ~/{MESH_KNOWN_HOSTS}")
    on_nodes(fleet, nodes, lambda a: run_remote(a, cmd, stdin=text, timeout_s=30))


# ------------------------------------------------------------------------------------------------------
# rsync hops
# ------------------------------------------------------------------------------------------------------

# Homebrew's rsync (3.x) on the Macs: macOS ships openrsync, which lacks --append-verify and --mkpath.
RSYNC_FLAGS = ("-rlt", "--partial", "--append-verify", "--chmod=u+rwX,go+rX", "--executability",
               "--timeout=60", f"--rsync-path=PATH={HOMEBREW_BIN}:$PATH rsync")


def rsync_from_controller(args: SshArgs, src: Path, dest: str, files: list[str] | None, *,
                          timeout_s: float = 3600) -> None:
    """Controller → node over the management network: `src/` into `dest/` (created)."""
    argv = ["rsync", *RSYNC_FLAGS, "--mkpath", "-e", args.rsync_shell]
    if files is not None:
        argv += ["--files-from=-", "--from0"]
    argv += [f"{src}/", f"{args.destination}:{dest}/"]
    stdin = "\0".join(files) if files is not None else None
    try:
        p = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RemoteCommandError(args.node, "rsync", -1, f"no end within {timeout_s:g} s") from None
    if p.returncode != 0:
        raise RemoteCommandError(args.node, f"rsync {src} → {dest}", p.returncode, p.stderr)


def rsync_node_to_node(src_args: SshArgs, src_dir: str, user: str | None, dst_address: str, dst_dir: str,
                       files: list[str] | None, agent_env: Mapping[str, str], *, timeout_s: float = 3600) -> None:
    """Node → peer over their cable: runs rsync on the source node, which reaches the peer's Thunderbolt
    address with the forwarded agent and the mesh known_hosts (strict)."""
    shell = shlex.join(["ssh", *SSH_OPTS, "-o", f"UserKnownHostsFile=~/{MESH_KNOWN_HOSTS}"])
    dest = f"{user}@{dst_address}" if user else dst_address
    argv = ["rsync", *RSYNC_FLAGS, "--mkpath", "-e", shell]
    if files is not None:
        argv += ["--files-from=-", "--from0"]
    argv += [f"{src_dir}/", f"{dest}:{dst_dir}/"]
    # ssh expands the ~ of UserKnownHostsFile itself, so every word can be quoted.
    # rsync's own 255 (its ssh to the peer failed) must not read as "the source node is unreachable".
    command = f"PATH={HOMEBREW_BIN}:$PATH " + shlex.join(argv) + "; r=$?; [ $r -eq 255 ] && r=254; exit $r"
    try:
        run_remote(src_args, command, stdin="\0".join(files) if files is not None else None, timeout_s=timeout_s,
                   env=agent_env, forward_agent=True)
    except RemoteCommandError as exc:
        raise RemoteCommandError(src_args.node, f"rsync to {dst_address} over the Thunderbolt cable", exc.rc,
                                 exc.stderr_tail) from None


# ------------------------------------------------------------------------------------------------------
# Verify and land, on the node
# ------------------------------------------------------------------------------------------------------

# The digest every node program computes: the manifest's (blake2b-256), read in 4 MiB chunks.
NODE_DIGEST = r"""
def digest(p):
    h = hashlib.blake2b(digest_size=32)
    with open(p, "rb") as f:
        for c in iter(lambda: f.read(4 << 20), b""):
            h.update(c)
    return h.hexdigest()
"""


# preflight(MODELS, NAME, manifest) on the node: where the models dir is, free space (df -k on the nearest
# existing directory), which files are final (size, digest when the size matches and `digests`) and what is staged
# (size). Without `digests` it only stats: the sizes a push compares before it hashes anything or takes the lock.
NODE_PREFLIGHT = r"""
def preflight(models, name, manifest, digests=True):
    models = os.path.expanduser(models)
    final = os.path.join(models, name)
    staging = os.path.join(models, ".macfleet-staging", name)
    probe = models
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    try:  # df failing to start is that read's failure (free space unknown), never the whole preflight's
        df = subprocess.run(["df", "-k", probe], capture_output=True, text=True)
    except Exception as exc:
        df = subprocess.CompletedProcess(["df"], 126, "", "%s: %s" % (type(exc).__name__, exc))
    have, staged = {}, {}
    for f in manifest["files"]:
        p = os.path.join(final, f["path"])
        if os.path.isfile(p) and not os.path.islink(p):
            size = os.path.getsize(p)
            have[f["path"]] = [size, digest(p) if digests and size == f["size"] else None]
        s = os.path.join(staging, f["path"])
        if os.path.isfile(s):
            staged[f["path"]] = os.path.getsize(s)
    return {"final": final, "staging": staging, "df": df.stdout, "df_rc": df.returncode,
            "have": have, "staged": staged}
"""

# Runs on the node with the manifest on stdin. argv: MODELS NAME. Prints preflight()'s answer as JSON.
PREFLIGHT_PROGRAM = r"""
import hashlib, json, os, subprocess, sys
""" + NODE_DIGEST + NODE_PREFLIGHT + r"""
print(json.dumps(preflight(sys.argv[1], sys.argv[2], json.load(sys.stdin))))
"""


# land_files(MODE, STAGING, FINAL, manifest) on the node → (ok, bad {path: why}).
# MODE "land": every staged file whose digest matches moves to FINAL/<path> (os.replace); a final file
#              already matching stays; a staged file of full size whose digest differs is removed.
# MODE "check": only reports.
NODE_LAND = r"""
def matches(p, f):
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return "absent"
    if not os.path.isfile(p) or os.path.islink(p):
        return "not a regular file"
    if st.st_size != f["size"]:
        return "size %d, expected %d" % (st.st_size, f["size"])
    return None if digest(p) == f["digest"] else "digest differs"
def land_files(mode, staging, final, manifest):
    ok, bad = [], {}
    for f in manifest["files"]:
        rel = f["path"]
        dst = os.path.join(final, rel)
        if matches(dst, f) is None:
            ok.append(rel)
            continue
        if mode == "check":
            bad[rel] = matches(dst, f)
            continue
        src = os.path.join(staging, rel)
        why = matches(src, f)
        if why is not None:
            if why == "digest differs":
                os.remove(src)  # complete but wrong: rsync would take it as done; sent afresh next time
            bad[rel] = why
            continue
        os.chmod(src, 0o755 if f.get("executable") else 0o644)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(src, dst)
        ok.append(rel)
    return ok, bad
"""

# Runs on the node under /usr/bin/python3 with the manifest on stdin. argv: MODE STAGING FINAL.
# Prints {"ok": [...], "bad": {path: why}}.
_NODE_PROGRAM = r"""
import hashlib, json, os, sys
""" + NODE_DIGEST + NODE_LAND + r"""
ok, bad = land_files(sys.argv[1], sys.argv[2], sys.argv[3], json.load(sys.stdin))
print(json.dumps({"ok": ok, "bad": bad}))
"""


@dataclass
class LandResult:
    ok: list[str]
    bad: dict[str, str]


def land(args: SshArgs, manifest: Manifest, staging: str, final: str, *, check_only: bool = False,
         timeout_s: float = 3600) -> LandResult:
    cmd = shlex.join([REMOTE_PYTHON, "-c", _NODE_PROGRAM, "check" if check_only else "land", staging, final])
    out = run_remote(args, cmd, stdin=manifest.model_dump_json(), timeout_s=timeout_s)
    try:
        data = json.loads(out.strip().splitlines()[-1])
        return LandResult(ok=[str(x) for x in data["ok"]], bad={str(k): str(v) for k, v in data["bad"].items()})
    except (ValueError, KeyError, IndexError):
        raise RemoteCommandError(args.node, "verify", 0, f"unexpected answer: {out[-300:]!r}") from None


# ------------------------------------------------------------------------------------------------------
# One session per node for a whole push
# ------------------------------------------------------------------------------------------------------

# Runs on the node (/usr/bin/python3) for the whole push: one JSON request a line on stdin, each handled in its
# own thread, one JSON answer a line on stdout carrying the request's id. It only lands files and runs rsync to
# a peer with fixed flags (RSYNC_ARGV, filled in below); it ends when stdin closes (the push ended or the
# controller died).
#   {"op": "land", "mode", "staging", "final", "manifest"} → {"ok": [...], "bad": {path: why}}
#   {"op": "rsync", "src_dir", "dest", "dst_dir", "files"} → {"rc": int, "stderr": str}
#   {"op": "preflight", "models", "name", "manifest"} → preflight()'s answer
#   {"op": "known_hosts", "text"} → {} (the mesh known_hosts, written whole and renamed into place)
#   {"op": "size", "dirs"} → {"bytes": int} (under those directories, for progress)
_SESSION_PROGRAM = r"""
import hashlib, json, os, subprocess, sys, threading
RSYNC_ARGV = json.loads(sys.argv[1])
KNOWN_HOSTS = os.path.expanduser(sys.argv[2])
""" + NODE_DIGEST + NODE_LAND + NODE_PREFLIGHT + r"""
def put_known_hosts(text):
    os.makedirs(os.path.dirname(KNOWN_HOSTS), mode=0o700, exist_ok=True)
    os.chmod(os.path.dirname(KNOWN_HOSTS), 0o700)
    tmp = KNOWN_HOSTS + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, KNOWN_HOSTS)
def size_under(dirs):
    total = 0
    for top in dirs:
        for d, _, files in os.walk(top):
            for f in files:
                try:
                    total += os.lstat(os.path.join(d, f)).st_size
                except OSError:
                    pass
    return total
out = threading.Lock()
env = dict(os.environ, PATH="/opt/homebrew/bin:" + os.environ.get("PATH", ""))
def handle(req):
    try:
        if req["op"] == "land":
            ok, bad = land_files(req["mode"], req["staging"], req["final"], req["manifest"])
            ans = {"ok": ok, "bad": bad}
        elif req["op"] == "rsync":
            argv = RSYNC_ARGV + [req["src_dir"] + "/", req["dest"] + ":" + req["dst_dir"] + "/"]
            p = subprocess.run(argv, input="\0".join(req["files"]).encode(), capture_output=True, env=env)
            ans = {"rc": p.returncode, "stderr": p.stderr.decode(errors="replace")[-2000:]}
        elif req["op"] == "preflight":
            ans = preflight(req["models"], req["name"], req["manifest"], bool(req.get("digests", True)))
        elif req["op"] == "known_hosts":
            put_known_hosts(req["text"])
            ans = {}
        elif req["op"] == "size":
            ans = {"bytes": size_under(req["dirs"])}
        else:
            ans = {"error": "unknown op"}
    except Exception as exc:
        ans = {"error": repr(exc)[-500:]}
    ans["id"] = req["id"]
    with out:
        sys.stdout.write(json.dumps(ans) + "\n")
        sys.stdout.flush()
for line in sys.stdin:
    threading.Thread(target=handle, args=(json.loads(line),), daemon=True).start()
"""


def _end(proc: subprocess.Popen) -> None:
    """Close a node program's stdin (its signal to finish) and wait for it; kill it if it does not end."""
    with contextlib.suppress(OSError):
        assert proc.stdin is not None
        proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class NodeSession:
    """One SSH session to a node for a whole push, running `_SESSION_PROGRAM` there: verifying and landing
    files and rsync to a peer over its cable are requests on it, several at once, so none of them pays for
    an SSH connection, a shell or a Python start-up of its own. The session forwards the push's private
    agent (for the node's own ssh to its peers, strict against the mesh known_hosts)."""

    def __init__(self, args: SshArgs, agent_env: Mapping[str, str]) -> None:
        self.node = args.node
        shell = shlex.join(["ssh", *SSH_OPTS, "-o", f"UserKnownHostsFile=~/{MESH_KNOWN_HOSTS}"])
        rsync = ["rsync", *RSYNC_FLAGS, "--mkpath", "-e", shell, "--files-from=-", "--from0"]
        cmd = shlex.join([REMOTE_PYTHON, "-c", _SESSION_PROGRAM, json.dumps(rsync), f"~/{MESH_KNOWN_HOSTS}"])
        # the agent only when given one (never the controller user's own)
        self._proc = subprocess.Popen(args.argv(cmd, forward_agent=bool(agent_env)), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, **agent_env})
        self._lock = threading.Lock()
        self._write = threading.Lock()
        self._waiting: dict[int, Future] = {}
        self._next = 0
        self._ended: BaseException | None = None
        self._reader = threading.Thread(target=self._read, daemon=True, name=f"session-{self.node}")
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None and self._proc.stderr is not None
        for line in self._proc.stdout:
            with contextlib.suppress(ValueError, AttributeError):
                answer = json.loads(line)
                with self._lock:
                    fut = self._waiting.pop(answer.get("id"), None)
                if fut is not None:
                    fut.set_result(answer)
        err = self._proc.stderr.read().strip()[-300:]
        rc = self._proc.wait()
        ended: BaseException = UnreachableError({self.node: err or "ssh failed"}) if rc == 255 else \
            RemoteCommandError(self.node, "push session", rc, err or "the session ended")
        with self._lock:
            self._ended, waiting, self._waiting = ended, self._waiting, {}
        for fut in waiting.values():
            fut.set_exception(ended)

    def _call(self, request: dict, timeout_s: float) -> dict:
        fut: Future = Future()
        with self._lock:
            if self._ended is not None:
                raise self._ended
            request["id"] = self._next
            self._next += 1
            self._waiting[request["id"]] = fut
        with self._write, contextlib.suppress(OSError):  # a broken pipe: the reader fails the request
            assert self._proc.stdin is not None
            self._proc.stdin.write(json.dumps(request) + "\n")
            self._proc.stdin.flush()
        try:
            answer = fut.result(timeout=timeout_s)
        except TimeoutError:
            raise RemoteCommandError(self.node, request["op"], -1, f"no answer within {timeout_s:g} s") from None
        if "error" in answer:
            raise RemoteCommandError(self.node, request["op"], 1, str(answer["error"]))
        return answer

    def land(self, manifest: Manifest, staging: str, final: str, *, timeout_s: float = 3600) -> LandResult:
        a = self._call({"op": "land", "mode": "land", "staging": staging, "final": final,
                        "manifest": json.loads(manifest.model_dump_json())}, timeout_s)
        return LandResult(ok=[str(x) for x in a["ok"]], bad={str(k): str(v) for k, v in a["bad"].items()})

    def rsync_to(self, src_dir: str, user: str | None, dst_address: str, dst_dir: str, files: list[str], *,
                 timeout_s: float = 3600) -> None:
        """This node → a peer over their cable (Homebrew rsync over ssh to the peer's Thunderbolt address)."""
        dest = f"{user}@{dst_address}" if user else dst_address
        a = self._call({"op": "rsync", "src_dir": src_dir, "dest": dest, "dst_dir": dst_dir, "files": files},
                       timeout_s)
        if a["rc"] != 0:
            raise RemoteCommandError(self.node, f"rsync to {dst_address} over the Thunderbolt cable", int(a["rc"]),
                                     str(a["stderr"]))

    def preflight(self, models_dir: str, name: str, manifest: Manifest, *, digests: bool = True,
                  timeout_s: float = 1800) -> dict:
        """What the node has of the model, what is staged, and free space (see NODE_PREFLIGHT). It reads only
        the manifest's paths and sizes (the digests of what is there are compared by the caller); `digests=False`:
        it hashes nothing (the sizes alone)."""
        files = [{"path": f.path, "size": f.size} for f in manifest.files]
        a = self._call({"op": "preflight", "models": models_dir, "name": name, "manifest": {"files": files},
                        "digests": digests}, timeout_s)
        a.pop("id", None)
        return a

    def put_known_hosts(self, text: str, *, timeout_s: float = 30) -> None:
        self._call({"op": "known_hosts", "text": text}, timeout_s)

    def size_under(self, dirs: list[str], *, timeout_s: float = 20) -> int:
        return int(self._call({"op": "size", "dirs": dirs}, timeout_s)["bytes"])

    def close(self) -> None:
        _end(self._proc)
        self._reader.join(timeout=5)  # it marks the session ended: a later request says so


@contextlib.contextmanager
def node_sessions(fleet: Fleet, nodes: list[str], agent_env: Mapping[str, str]) -> Iterator[dict[str, NodeSession]]:
    sessions: dict[str, NodeSession] = {}
    try:
        for n in nodes:
            sessions[n] = NodeSession(SshArgs.for_node(fleet, fleet.node(n)), agent_env)
        yield sessions
    finally:
        with ThreadPoolExecutor(max_workers=max(1, len(sessions))) as pool:
            list(pool.map(NodeSession.close, sessions.values()))


# ------------------------------------------------------------------------------------------------------
# The controller's copy to the seed: one stream for the whole push
# ------------------------------------------------------------------------------------------------------

# Runs on the seed (/usr/bin/python3) for the whole push, reading binary frames on stdin: a JSON header line
# {"dir", "path", "offset", "size"}, then the file's bytes from `offset` to `size`. The bytes go into
# DIR/PATH from `offset` (what is staged there is kept: a partial file continues); then it answers one JSON
# line {"path", "digest"}: the blake2b of the whole file as it now is on disk (the bytes kept, then those
# received), so the controller knows at once whether it arrived intact. A stream cut mid-file leaves a
# partial file in staging, never anything under a final name.
_FEED_PROGRAM = r"""
import hashlib, json, os, sys
inp = sys.stdin.buffer
while True:
    line = inp.readline()
    if not line:
        break
    h = json.loads(line)
    rel, off, size = h["path"], int(h["offset"]), int(h["size"])
    if os.path.isabs(rel) or ".." in rel.split("/") or not 0 <= off <= size:
        sys.exit("bad frame " + repr(line[:200]))
    p = os.path.join(h["dir"], rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    d = hashlib.blake2b(digest_size=32)
    with os.fdopen(os.open(p, os.O_RDWR | os.O_CREAT, 0o644), "r+b") as f:
        f.truncate(off)
        for c in iter(lambda: f.read(min(4 << 20, off - f.tell())), b""):
            d.update(c)
        f.seek(off)
        left = size - off
        while left:
            c = inp.read(min(left, 1 << 20))
            if not c:
                sys.exit(0)
            f.write(c)
            d.update(c)
            left -= len(c)
    sys.stdout.write(json.dumps({"path": rel, "digest": d.hexdigest()}) + "\n")
    sys.stdout.flush()
"""
FEED_BLOCK = 1 << 20


class Feed:
    """The controller → seed copy over the management network as one long-lived SSH stream (`_FEED_PROGRAM`
    on the seed): files are written back to back, so no copy pays for an rsync or SSH start-up and the link
    never idles between them. Opened before the preflight answers; no byte of the model is written until
    `send` is called. A file whose digest does not match after continuing a staged part is sent again whole.
    """

    def __init__(self, args: SshArgs) -> None:
        self.node = args.node
        cmd = shlex.join([REMOTE_PYTHON, "-c", _FEED_PROGRAM])
        self._proc = subprocess.Popen(args.argv(cmd), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE)

    def _failed(self, what: str) -> BaseException:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=15)
        assert self._proc.stderr is not None
        err = self._proc.stderr.read().decode(errors="replace").strip()[-300:] if self._proc.poll() is not None \
            else ""
        if self._proc.returncode == 255:
            return UnreachableError({self.node: err or "ssh failed"})
        return RemoteCommandError(self.node, "copy from the controller", self._proc.returncode or -1,
                                  err or what)

    def send(self, src: Path, dest_dir: str, files: list[tuple[ManifestFile, int]],
             arrived: Callable[[str], None]) -> None:
        """Each (file, bytes already staged) in order into `dest_dir`; `arrived(path)` as each one's digest
        matched on the node (called from another thread). Raises on a file that does not arrive intact."""
        by_path = {f.path: f for f, _ in files}
        todo: queue.Queue[tuple[ManifestFile, int] | None] = queue.Queue()
        for item in files:
            todo.put(item)
        failure: list[BaseException] = []
        sent_whole: set[str] = set()
        left = len(files)

        def read() -> None:
            nonlocal left
            assert self._proc.stdout is not None
            try:
                while left:
                    line = self._proc.stdout.readline()
                    if not line:
                        failure.append(self._failed("the stream ended"))
                        return
                    answer = json.loads(line)
                    f = by_path[answer["path"]]
                    if answer["digest"] == f.digest:
                        left -= 1
                        arrived(f.path)
                    elif f.path not in sent_whole:  # the staged part was not this file's: send it whole
                        todo.put((f, 0))
                    else:
                        failure.append(RemoteCommandError(self.node, "copy from the controller", 1,
                                                          f"{f.path}: digest differs after a whole copy"))
                        return
            except Exception as exc:  # an answer we cannot read, or `arrived` failed: the send fails with it
                failure.append(exc)
            finally:
                todo.put(None)

        reader = threading.Thread(target=read, daemon=True, name=f"feed-{self.node}")
        reader.start()
        assert self._proc.stdin is not None
        try:
            while (item := todo.get()) is not None:
                f, offset = item
                offset = min(max(0, offset), f.size)
                if offset == 0:
                    sent_whole.add(f.path)
                header = {"dir": dest_dir, "path": f.path, "offset": offset, "size": f.size}
                self._proc.stdin.write(json.dumps(header).encode() + b"\n")
                with (src / f.path).open("rb") as fh:
                    fh.seek(offset)
                    while block := fh.read(FEED_BLOCK):
                        self._proc.stdin.write(block)
                self._proc.stdin.flush()
        except BrokenPipeError:  # the stream ended: the reader says why
            reader.join(timeout=30)
            raise (failure[0] if failure else self._failed("the stream broke")) from None
        reader.join()
        if failure:
            raise failure[0]

    def close(self) -> None:
        _end(self._proc)
