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

from macfleet.act.fanout import each_node
from macfleet.collect.ssh import OPENSSH_OPTS, SshTarget
from macfleet.constants import HOMEBREW_BIN
from macfleet.errors import RemoteCommandError, UnreachableError, UsageError
from macfleet.inventory.model import Fleet, Node
from macfleet.judge.rollout import Manifest, ManifestFile, make_manifest, safe_relpath
from macfleet.node import program

REMOTE_PYTHON = "/usr/bin/python3"
AGENT_KEEPER = Path(__file__).with_name("agent_keeper.py")  # run by this Python (private_agent)
CHUNK = 4 * 1024 * 1024
# A node's own ssh to a peer over their cable (rsync's -e there): the controller's options (collect/ssh), and a
# connect timeout of its own (the peer is one cable away).
SSH_OPTS = (*OPENSSH_OPTS, "-o", "ConnectTimeout=10")
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


def ssh_target(fleet: Fleet, name: str) -> SshTarget:
    """How to log in to a node: the one resolution every SSH use shares (collect/ssh.SshTarget: inventory,
    ansible_ssh_*_args, ssh config, ProxyJump, per-host keys, strict known_hosts), its local files checked."""
    target = SshTarget.for_node(fleet, fleet.node(name))
    target.check_local_files()
    return target


def run_remote(args: SshTarget, command: str, *, stdin: str | None = None, timeout_s: float = 120,
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


def on_nodes(fleet: Fleet, nodes: list[str], fn, *, parallel: int = 8) -> dict[str, object]:
    """fn(SshTarget) on every node at once, as `each_node`."""
    return each_node(nodes, lambda name: fn(ssh_target(fleet, name)), parallel=parallel)


# ------------------------------------------------------------------------------------------------------
# The agent and the mesh known_hosts
# ------------------------------------------------------------------------------------------------------




@contextlib.contextmanager
def private_agent(key: Path, *, lifetime_s: int = 7200) -> Iterator[dict[str, str]]:
    """An ssh-agent of our own holding only `key` (for `lifetime_s` at most), which dies with this process:
    yields the environment that points ssh at it."""
    tmp = Path(tempfile.mkdtemp(prefix="macfleet-agent-"))
    sock = tmp / "agent.sock"
    keeper = subprocess.Popen([sys.executable, "-I", str(AGENT_KEEPER), str(sock), str(int(lifetime_s))],
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


def rsync_from_controller(args: SshTarget, src: Path, dest: str, files: list[str] | None, *,
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


def rsync_node_to_node(src_args: SshTarget, src_dir: str, user: str | None, dst_address: str, dst_dir: str,
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

# Each node program is a file in macfleet/node, sent as it is (`program`).
PREFLIGHT_PROGRAM = program("push_preflight")  # the manifest on stdin; argv: MODELS NAME
_NODE_PROGRAM = program("push_land")  # the manifest on stdin; argv: MODE STAGING FINAL


@dataclass
class LandResult:
    ok: list[str]
    bad: dict[str, str]


def land(args: SshTarget, manifest: Manifest, staging: str, final: str, *, check_only: bool = False,
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

_SESSION_PROGRAM = program("push_session")  # argv: RSYNC_ARGV (JSON) KNOWN_HOSTS PATH_PREFIX; requests on stdin


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

    def __init__(self, args: SshTarget, agent_env: Mapping[str, str]) -> None:
        self.node = args.node
        shell = shlex.join(["ssh", *SSH_OPTS, "-o", f"UserKnownHostsFile=~/{MESH_KNOWN_HOSTS}"])
        rsync = ["rsync", *RSYNC_FLAGS, "--mkpath", "-e", shell, "--files-from=-", "--from0"]
        cmd = shlex.join([REMOTE_PYTHON, "-c", _SESSION_PROGRAM, json.dumps(rsync), f"~/{MESH_KNOWN_HOSTS}",
                           HOMEBREW_BIN])
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
            ended = self._ended or ended  # closed by us: that is the reason, however ssh then ended
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
        """What the node has of the model, what is staged, and free space (node/preflight.py). It reads only
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
        with self._lock:  # a later request says so, whatever ssh's exit (it may be 255 on a loaded machine)
            self._ended = self._ended or RemoteCommandError(self.node, "push session", 0, "the session was closed")
        _end(self._proc)
        self._reader.join(timeout=5)


@contextlib.contextmanager
def node_sessions(fleet: Fleet, nodes: list[str], agent_env: Mapping[str, str]) -> Iterator[dict[str, NodeSession]]:
    sessions: dict[str, NodeSession] = {}
    try:
        for n in nodes:
            sessions[n] = NodeSession(ssh_target(fleet, n), agent_env)
        yield sessions
    finally:
        with ThreadPoolExecutor(max_workers=max(1, len(sessions))) as pool:
            list(pool.map(NodeSession.close, sessions.values()))


# ------------------------------------------------------------------------------------------------------
# The controller's copy to the seed: one stream for the whole push
# ------------------------------------------------------------------------------------------------------

_FEED_PROGRAM = program("push_feed")  # frames on stdin, one answer a file on stdout
FEED_BLOCK = 1 << 20


class Feed:
    """The controller → seed copy over the management network as one long-lived SSH stream (`_FEED_PROGRAM`
    on the seed): files are written back to back, so no copy pays for an rsync or SSH start-up and the link
    never idles between them. Opened before the preflight answers; no byte of the model is written until
    `send` is called. A file whose digest does not match after continuing a staged part is sent again whole.
    """

    def __init__(self, args: SshTarget) -> None:
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
