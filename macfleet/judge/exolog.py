"""What a line of exo's log (or a runner's error message) says about JACCL, RDMA and exo's runner.

Each `Signature` is an error form seen in exo's or MLX's issue trackers or printed by MLX's JACCL source, with
where it was seen (`source`), what it means and what to do. The first signature that matches a line names it.
A line that carries JACCL's `[jaccl]` tag, or names ibverbs (`ibv_*`, libibverbs, libjaccl, `jaccl::`) next to
an error word, and matches no signature, is still a finding: `UNRECOGNISED`, with the line itself, escaped.
Unknown is never silence.

The real outputs these are proven on are kept verbatim under tests/fixtures/exo-log (SOURCES.md there).
Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MLX = "https://github.com/ml-explore/mlx"
EXO = "https://github.com/exo-explore/exo"
MLX_SRC = "mlx 846d176 mlx/distributed/jaccl/lib/jaccl"  # MLX's JACCL source read for the message texts


@dataclass(frozen=True)
class Signature:
    """An error string exo or JACCL prints, what it means and what to do, and where it was seen."""

    code: str
    pattern: re.Pattern[str]
    cause: str
    fix: str
    source: str


def _sig(code: str, pattern: str, cause: str, fix: str, source: str) -> Signature:
    return Signature(code, re.compile(pattern), cause, fix, source)


_REBOOT_MESH = "stop exo on every node, reboot the whole mesh together (`macfleet reboot`), then check again"
_QP = r"Changing queue pair to (?:INIT|RTR|RTS) failed with errno"
SIGNATURES: tuple[Signature, ...] = (
    _sig("rtr-errno-22", r"Changing queue pair to RTR failed with errno 22\b",
         "JACCL found no usable GID: no IPv4 on a Thunderbolt port, or the port is in the Thunderbolt Bridge",
         "switch the bridge off and restore the IP plan (`macfleet topology apply`); if the GIDs are fine, "
         + _REBOOT_MESH, f"{EXO}/issues/1390, {MLX}/issues/3467"),
    _sig("rtr-errno-96", r"Changing queue pair to RTR failed with errno 96\b",
         "queue pair setup refused (EPROTOTYPE): a missing GID or bridge0 owning the port; seen after idle nights",
         "restore the IP plan and the bridge; restarting exo alone does not help: " + _REBOOT_MESH,
         f"{EXO}/issues/1973"),
    _sig("rtr-errno-60", r"Changing queue pair to RTR failed with errno 60\b",
         "the peer's IPv4-mapped GID is not reachable over this link (ETIMEDOUT)",
         "check the IP plan on both ends (`macfleet topology ipplan`) and the cable",
         f"{MLX}/pull/4530, {MLX}/pull/3468, {EXO}/issues/1847"),
    _sig("rtr-errno-16", r"Changing queue pair to RTR failed with errno 16\b",
         "queue pair setup refused (EBUSY): stale RDMA resources left by a crash",
         "reboot the node (`macfleet reboot`)", f"{MLX}/issues/3207"),
    _sig("qp-state", _QP + r" \d+",
         "JACCL could not bring a queue pair up on an RDMA port (the errno is in the line)",
         "check `macfleet rdma status` and the IP plan; if they are fine, " + _REBOOT_MESH,
         f"{MLX_SRC}/rdma.cpp:236,266,280"),
    _sig("no-pd", r"Couldn't allocate protection domain",
         "ibv_alloc_pd failed: a port down, a degraded cable, or RDMA state not released",
         "reseat the cable; if it persists, " + _REBOOT_MESH,
         f"{MLX}/pull/4530, {EXO}/issues/2111, {MLX}/issues/3207"),
    _sig("qp-exhausted", r"Creating the queue pair failed with (?:errno 16\b|'[^']*\(16\)')",
         "the device's queue pairs are exhausted (a Thunderbolt RDMA device has about 10): stale RDMA resources",
         "reboot the node (`macfleet reboot`); then run fewer instances over RDMA at once",
         f"{MLX}/pull/4209, {MLX_SRC}/rdma.cpp:178"),
    _sig("qp-create", r"Creating the queue pair failed|Couldn't create queue pair",
         "JACCL could not create a queue pair on an RDMA device",
         "check `macfleet rdma status`; if RDMA is fine, reboot the node (`macfleet reboot`)",
         f"{MLX_SRC}/rdma.cpp:178 (mlx v0.30.1 to v0.31.2: \"Couldn't create queue pair\")"),
    _sig("no-ipv4-gid", r"No IPv4-mapped GID",
         "the RDMA port has no IPv4-mapped GID: no IPv4 address on the Thunderbolt port",
         "restore the IP plan (`macfleet topology apply`)", f"{MLX}/pull/4191"),
    _sig("side-channel", r"\[jaccl\] (?:Recv|Send) failed with errno=\d+",
         "JACCL's TCP side channel closed under this rank: most often another node failed first (the errno is "
         "stale), so that node's error is the cause",
         "read the exo-log findings of the other nodes of the mesh first; then restart exo on the mesh "
         "(`macfleet doctor --fix`)", f"{MLX}/pull/4530, {EXO}/issues/2067, {EXO}/issues/2111"),
    _sig("coordinator", r"\[jaccl\] Couldn't connect \(error: \d+\)",
         "this rank could not reach the JACCL coordinator (rank 0, on its management address) over TCP",
         "check that rank 0's management address answers from this node (LAN, packet filter, macOS Local "
         "Network privacy), then restart exo", f"{MLX}/issues/3755"),
    _sig("rdma-transfer", r"\[jaccl\] (?:Recv|Send) failed with error code \d+",
         "an RDMA transfer failed on a Thunderbolt link (work completion error)",
         "check the cabling (`macfleet topology check`); if it persists, " + _REBOOT_MESH,
         f"{MLX_SRC}/rdma.h:194,212"),
    _sig("no-device", r"\[jaccl\] Could not (?:find|open) device",
         "an RDMA device exo's placement named does not exist on this node: RDMA off, or ports renamed",
         "check `macfleet rdma status` and the cabling (`macfleet topology check`), then restart exo",
         f"{MLX_SRC}/rdma.cpp:304,317, {MLX}/issues/3777"),
    _sig("unplugged", r"tbt_post_recv",
         "a Thunderbolt cable was unplugged during a collective: both ranks crash",
         "check the cabling (`macfleet topology check`) and restart exo", f"{MLX}/issues/4192, {EXO}/issues/1847"),
    _sig("null-pd", r"ibv_reg_mr|register_to_protection_domain",
         "JACCL ran with no RDMA device (null protection domain): RDMA off or not ready",
         "check `macfleet rdma status`; enable RDMA or reboot the mesh",
         f"{EXO}/issues/2186, {EXO}/issues/1843, {MLX}/issues/3777"),
    _sig("segfault", r"signal=11|Segmentation fault",
         "exo's runner crashed (SIGSEGV), often JACCL without a working RDMA device",
         "check RDMA (`macfleet rdma status`), then restart exo (`macfleet doctor --fix`)",
         f"{EXO}/issues/2186, {MLX}/issues/3777, {MLX}/issues/4485"),
    _sig("metal-version", r"Function fence_update is using language version",
         "macOS is older than exo's Metal code needs (macOS 26 or later)",
         "upgrade macOS (docs/runbooks/macos-upgrade.md)", f"{EXO}/issues/1912"),
    _sig("gpu-timeout", r"mlx_item evaluation timed out|GPU Timeout",
         "the GPU stopped making progress (often with MLX fast synch on)",
         "restart exo with EXO_FAST_SYNCH off; a wedged GPU needs a reboot",
         "exo b5375f8 src/exo/worker/runner/diagnostics.py:13"),
    _sig("ring", r"\[ring\] (?:Receiving from socket|Too many send/recv errors)",
         "the MLX ring lost a peer", "check the links (`macfleet topology check`) and restart exo",
         "exo b5375f8 src/exo/worker/runner/diagnostics.py:18-25"),
)

UNRECOGNISED = _sig(
    "unrecognised", r"\[jaccl\]", "unrecognised JACCL error",
    "read the line in exo's log on the node; check `macfleet rdma status` and the cabling, then restart exo "
    "(`macfleet doctor --fix`); if it persists, " + _REBOOT_MESH, "no signature matched")

# last: a crash whose exception is not one of the above (or was cut off)
CRASH = _sig("runner-crash", r"crashed with critical exception|Runner terminated with signal|exceeded 5 retries",
             "exo's runner crashed", "read the exception in exo's log on the node, then restart exo",
             f"{EXO}/issues/1390, {EXO}/issues/1973")

# JACCL's own progress line while a rank waits for its coordinator: not an error (MLX_SRC/rdma.cpp:355).
_BENIGN = re.compile(r"\[jaccl\] Connection attempt \d+ waiting \d+ ms\s*$")
_JACCL_TAG = re.compile(r"\[jaccl\]", re.IGNORECASE)
_IBVERBS = re.compile(r"\blibibverbs\b|\bibv_[a-z0-9_]+|\blibjaccl\b|\bjaccl::")
_ERROR_WORD = re.compile(r"(?i)fail|error|errno|couldn'?t|could not|cannot|can't|unable|invalid|abort|"
                         r"exception|SIGSEGV|SIGABRT|SIGBUS|EXC_BAD")
MAX_SHOWN = 200


def is_jaccl_error(line: str) -> bool:
    """A line that tells of a JACCL or ibverbs error, known or not."""
    if _JACCL_TAG.search(line):
        return not _BENIGN.search(line)
    return bool(_IBVERBS.search(line) and _ERROR_WORD.search(line))


def match_signature(line: str) -> Signature | None:
    """The signature that names `line`: a known one; else `UNRECOGNISED` for a JACCL/ibverbs error no
    signature knows; else a runner crash; else None."""
    known = next((s for s in SIGNATURES if s.pattern.search(line)), None)
    if known is not None:
        return known
    if is_jaccl_error(line):
        return UNRECOGNISED
    return CRASH if CRASH.pattern.search(line) else None


def shown(line: str) -> str:
    """A log line as a finding quotes it: trimmed, control characters escaped, at most MAX_SHOWN characters."""
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in line.strip())
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN - 1] + "…"
