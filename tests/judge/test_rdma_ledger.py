"""The RDMA resource ledger: device limits from `ibv_devinfo -v`, the kernel's count in use from `ioclasscount`
(else failed runner starts since boot from exo's log), and the verdict "reboot the mesh before the next start"
while one start is still left."""

from __future__ import annotations

from pathlib import Path

import pytest

from macfleet.collect.ssh import Raw
from macfleet.errors import FactsParseError
from macfleet.facts.ledger import failed_starts_since, parse_boottime, parse_rdma_in_use
from macfleet.facts.rdma import parse_ibv_devinfo
from macfleet.judge.rdma_ledger import Ledger, device_capacity, ledger, undecided, verdict

CAP = Path(__file__).resolve().parent.parent / "fixtures" / "captures" / "ibv-devinfo"
BOOT = "{ sec = 1764662400, usec = 52071 } Wed Dec  2 09:00:00 2026"
# The class names dryvist/nix-ai's runbook reads (docs/runbooks/cluster-link-truths.md at af5aedae5636f2d4)
PD, QP = "AppleThunderboltRDMAProtectionDomain", "AppleThunderboltRDMAQueuePair"
UNREAD = "ioclasscount: exit 71: Error: Can't get registry root."  # the kernel's count not read


def devinfo_v(max_pd: int = 11, max_qp: int = 11) -> str:
    """The layout the lab prints (macfleet/lab/macos/rdma.py): no capture of a Mac's `-v` shows the limits."""
    return (f"hca_id:\trdma_en2\n\ttransport:\t\t\tThunderbolt (100)\n\tphys_port_cnt:\t\t\t1\n"
            f"\tmax_qp:\t\t\t\t{max_qp}\n\tmax_qp_wr:\t\t\t8192\n\tmax_mr:\t\t\t\t100\n\tmax_pd:\t\t\t\t{max_pd}\n"
            "\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tGID[  0]:\t\tfe80::1\n"
            "hca_id:\trdma_en3\n\tmax_qp:\t\t\t\t11\n\tmax_pd:\t\t\t\t11\n\t\tport:\t1\n"
            "\t\t\tstate:\t\t\tPORT_DOWN (1)\n")


def crash(at: str) -> str:
    return (f"[ 2026-12-02 {at}.100 | ERROR    | exo.worker.runner.supervisor:_check_runner:401 ] "
            "Runner terminated with exitcode=1")


def test_limits_are_read_from_verbose_devinfo() -> None:
    d = parse_ibv_devinfo(devinfo_v(max_pd=11, max_qp=11)).devices[0]
    assert (d.max_pd, d.max_qp, d.max_mr) == (11, 11, 100)


def test_real_captures_print_no_limits_so_none_is_kept() -> None:
    for path in sorted(CAP.glob("*.txt")):
        for d in parse_ibv_devinfo(path.read_text(encoding="utf-8")).devices:
            assert (d.max_pd, d.max_qp) == (None, None), path.name
    real = parse_ibv_devinfo((CAP / "mlx__apple-tn3205_ibv_devinfo_-d_rdma_en2_-v.txt").read_text(encoding="utf-8"))
    assert device_capacity(real) is None


def test_capacity_is_the_tightest_active_device_and_the_11th_queue_pair_fails() -> None:
    # mlx#4209: the 11th ibv_create_qp fails (EBUSY) on a device reporting 11: 10 starts; PORT_DOWN rdma_en3 ignored
    assert device_capacity(parse_ibv_devinfo(devinfo_v())) == (10, "rdma_en2")
    assert device_capacity(parse_ibv_devinfo(devinfo_v(max_pd=6))) == (6, "rdma_en2")


def test_boottime_and_failures_since_boot_only() -> None:
    boot = parse_boottime(BOOT)
    assert boot is not None and boot.epoch_s == 1764662400 and boot.local.hour == 9
    log = "\n".join([crash("08:59:59"), "[ 2026-12-02 09:00:30.000 | INFO     | exo.main:main:276 ] Starting EXO",
                     crash("09:01:00"), crash("09:02:00")])
    got = failed_starts_since(log, boot, whole_file=False)
    assert (got.count, got.complete) == (2, True)
    later = failed_starts_since("\n".join([crash("09:01:00")]), boot, whole_file=False)
    assert (later.count, later.complete) == (1, False)  # the tail starts after the boot: "at least"
    with pytest.raises(FactsParseError):  # was `is None`: not a boot time is a parse error, read via parsed()
        parse_boottime("garbage")


def _ledger(failed: int, running: bool = False) -> Ledger:
    boot = parse_boottime(BOOT)
    assert boot is not None
    log = "\n".join(crash(f"10:{i:02d}:00") for i in range(failed))
    got = ledger("s1", parse_ibv_devinfo(devinfo_v()), failed_starts_since(log, boot, whole_file=True), running,
                 UNREAD)
    assert isinstance(got, Ledger)
    return got


def test_flagged_before_the_device_runs_out_not_after() -> None:
    assert verdict(_ledger(8)) is None
    severity, message = verdict(_ledger(9)) or ("", "")
    assert severity == "warning" and "room for 1 more runner start" in message
    severity, message = verdict(_ledger(8, running=True)) or ("", "")
    assert severity == "warning"
    severity, message = verdict(_ledger(10)) or ("", "")
    assert severity == "error" and "errno 16 (EBUSY)" in message
    assert "9 failed since boot" in _ledger(9).evidence() and "estimated, the kernel's count not read" in \
        _ledger(9).evidence()


def test_no_limits_is_a_reason_not_a_guess() -> None:
    boot = parse_boottime(BOOT)
    assert boot is not None
    plain = parse_ibv_devinfo("hca_id:\trdma_en2\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n")
    zero = parse_rdma_in_use(f"{PD} = 0, {QP} = 0\n")
    why = ledger("s1", plain, failed_starts_since("", boot, whole_file=True), False, zero)
    assert isinstance(why, str) and "max_pd" in why


def test_doctor_says_reboot_before_the_next_start_and_could_not_tell_without_the_log() -> None:
    from tests.judge.test_health import NODES, all_nodes, verdict

    boot = parse_boottime(BOOT)
    assert boot is not None
    log = "\n".join(crash(f"10:{i:02d}:00") for i in range(9))
    facts = all_nodes(ibv_devinfo=parse_ibv_devinfo(devinfo_v()),
                      exo_failed_starts=failed_starts_since(log, boot, whole_file=True))
    [f] = verdict("rdma-ledger", facts, "s1")
    assert f.severity == "warning" and "reboot the mesh before the next start" in f.fix
    unread = {n: facts[n].model_copy(update={"exo_failed_starts": None, "problems": {"exo-log": "exit 1"}})
              for n in NODES}
    assert "could not be counted: exo-log: exit 1" in verdict("rdma-ledger", unread, "s1").reason


def _node(boottime: str, log: str):
    from macfleet.collect.gather import Gathered
    from macfleet.collect.ssh import Raw
    from macfleet.facts.commands import BOOTTIME
    from macfleet.flow.checks import node_facts

    def raw(text: str) -> Raw:
        return Raw(stdout=text, stderr="", rc=0, took_s=0.1)

    outputs = {BOOTTIME.key: raw(boottime), "exo-log": raw(log), "ibv-devinfo:verbose": raw(devinfo_v())}
    return node_facts(Gathered(outputs={"s1": outputs}), "s1")


def test_a_boottime_that_is_no_date_is_could_not_tell_not_a_crash() -> None:
    from tests.judge.test_health import NODES, verdict

    f = _node("{ sec = 1764662400, usec = 52071 } Tue Dec 32 09:00:00 2026", crash("09:01:00"))
    assert f.boottime is None and f.exo_failed_starts is None and "Tue Dec 32" in f.why("boottime")
    why = verdict("rdma-ledger", {n: f for n in NODES}, "s1").reason
    assert "could not be counted" in why and "sysctl -n kern.boottime" in why and "Dec 32" in why
    with pytest.raises(FactsParseError):
        parse_boottime("garbage")


def test_a_log_stamp_that_is_no_date_is_skipped_not_a_crash() -> None:
    bad = "[ 2026-13-45 09:30:00.000 | ERROR    | exo.worker.runner.supervisor:_check_runner:401 ] " \
          "Runner terminated with exitcode=1"
    f = _node(BOOT, "\n".join([crash("08:59:00"), bad, crash("09:01:00")]))
    assert f.exo_failed_starts is not None and f.exo_failed_starts.count == 1


EXO_LOG = Path(__file__).resolve().parent.parent / "fixtures" / "exo-log"


def _doctor(log: str):
    from tests.judge.test_health import NODES, verdict

    f = _node(BOOT, log)
    return verdict("rdma-ledger", {n: f for n in NODES}, "s1")


def test_a_log_that_begins_after_the_boot_is_could_not_tell_below_the_warning() -> None:
    # exo rotates its log at each start (exo b5375f8 src/exo/shared/logging.py:75-86): failures before are lost
    got = _doctor("\n".join(crash(f"10:{i:02d}:00") for i in range(3)))
    assert "exo's log starts at 2026-12-02 10:00:00, after the boot at 2026-12-02 09:00:00" in got.reason
    assert "rotates its log at each start" in got.reason and "at least 3 failed" in got.reason
    tail = failed_starts_since(crash("10:00:00"), parse_boottime(BOOT), whole_file=False)
    assert "the end of exo's log read starts at 2026-12-02 10:00:00" in (
        ledger("s1", parse_ibv_devinfo(devinfo_v()), tail, False, UNREAD).short or "")
    assert _doctor("\n".join([crash("08:59:00"), *(crash(f"10:{i:02d}:00") for i in range(3))])) == []


def test_a_log_that_begins_after_the_boot_still_warns_at_least_n() -> None:
    [f] = _doctor("\n".join(crash(f"10:{i:02d}:00") for i in range(9)))
    assert f.severity == "warning" and "at least 9 failed runner starts since boot" in f.message
    assert "room for 1 more runner start at most" in f.message and "at least 9 failed" in f.evidence
    [f] = _doctor("\n".join(crash(f"10:{i:02d}:00") for i in range(12)))
    assert f.severity == "error" and "at least 12 failed" in f.message


def test_a_log_of_another_format_is_could_not_tell_not_zero() -> None:
    other = (EXO_LOG / "exo__exo-issue-1390_exo_log_node2_jaccl_rtr_errno22.txt").read_text(encoding="utf-8")
    with pytest.raises(FactsParseError):
        failed_starts_since(other, parse_boottime(BOOT), whole_file=True)
    got = _doctor(other)
    assert "could not be counted" in got.reason and "exo's log file format" in got.reason


def test_exos_own_log_file_lines_are_read() -> None:
    real = (EXO_LOG / "exo__exo-issue-2067_startup_node_elected_master.txt").read_text(encoding="utf-8")
    got = failed_starts_since(real, parse_boottime("{ sec = 1, usec = 0 } Thu May  7 12:00:00 2026"),
                              whole_file=True)  # booted an hour before exo's log begins: a restart since
    assert got.log_from is not None and got.log_from.isoformat() == "2026-05-07T13:04:45" and not got.complete


def test_a_whole_log_that_begins_just_after_the_boot_is_exos_start_at_boot_and_complete() -> None:
    """exo's LaunchDaemon loads at boot (RunAtLoad): its log of that start begins minutes after the boot, and holds
    every failure since (the ledger is not "could not tell" on every healthy node)."""
    got = failed_starts_since("\n".join(crash(f"09:0{i}:00") for i in range(3, 5)), parse_boottime(BOOT),
                              whole_file=True)
    assert got.complete and got.count == 2
    assert _doctor("\n".join(crash(f"09:0{i}:00") for i in range(3, 5))) == []
    tail = failed_starts_since(crash("09:03:00"), parse_boottime(BOOT), whole_file=False)
    assert not tail.complete  # only the end of a longer log was read: what came before is unknown



# ------------------------------------------------------------------------------------------ the kernel's count
# `ioclasscount CLASS...`'s output, from Apple's source (IOKitTools/ioclasscount.tproj/ioclasscount.c at
# 04b1b654a84a3c15e1420ab7913cbf701fa74cbc, printInstanceCount and main) and ioclasscount(8): no real capture of
# it on an RDMA Mac is known, so these shapes are derived from that source, not captured.


@pytest.mark.parametrize(("text", "domains", "queue_pairs"), [
    (f"{PD} = 3, {QP} = 2\n", 3, 2),  # `A = 3, B = 2\n`: the order asked, `, ` between, a newline after the last
    (f"{PD} = 0, {QP} = 0\n", 0, 0),
    (f"{PD} = 2147483647, {QP} = 1\n", 2147483647, 1),  # the largest SInt32 count
    (f"{PD} = 007, {QP} = 1\n", 7, 1),
])
def test_the_kernels_count_is_read(text: str, domains: int, queue_pairs: int) -> None:
    got = parse_rdma_in_use(text)
    assert (got.domains.count, got.queue_pairs.count) == (domains, queue_pairs)
    assert got.domains.why is None and got.queue_pairs.why is None


@pytest.mark.parametrize(("text", "unknown", "why"), [
    (f"{PD} = <no such class>, {QP} = <no such class>\n", (True, True), "the kernel knows no such class"),
    (f"{PD} = <no such class>, {QP} = 4\n", (True, False), f"{PD} = <no such class>"),
    (f"{PD} = ?? (error reading/converting value), {QP} = 4\n", (True, False), "could not be read"),
    (f"{PD} = 4, {QP} = ?? (error reading/converting value)\n", (False, True), f"{QP} = ?? (error reading"),
])
def test_a_class_the_kernel_does_not_count_is_unknown_with_why_never_zero(text: str, unknown, why: str) -> None:
    got = parse_rdma_in_use(text)
    assert (got.domains.count is None, got.queue_pairs.count is None) == unknown
    assert any(why in (c.why or "") for c in (got.domains, got.queue_pairs))
    assert all(c.count != 0 and (c.count is None) == (c.why is not None) for c in (got.domains, got.queue_pairs))


@pytest.mark.parametrize("text", [
    "",
    "\n",
    f"{PD} = 3, {QP} = 2",  # no newline after the last: the output was cut short
    f"{PD} = 3, {QP} = 2\r\n",
    f"{PD} = 3, {QP} = 2\n\n",
    f"{PD} = 3, {QP} = 2\n{PD} = 3, {QP} = 2\n",
    f"{PD} = 3\n",  # one class of the two asked
    f"{PD} = 3, \n",
    f"{PD} = 3, {QP} = 2, IOPCIDevice = 2\n",  # a class not asked for
    f"{QP} = 2, {PD} = 3\n",  # not the order asked
    "IOPCIDevice = 2, AppleTestPCI = 1\n",  # ioclasscount(8)'s example: other classes
    "IOPCIDevice = 2\nAppleTestPCI = 1\n",  # the listing of every class (no class asked)
    f"?? = 3, {QP} = 2\n",  # a name printInstanceCount could not convert
    f"{PD} = 2147483648, {QP} = 2\n",  # above SInt32: a negative count printed unsigned
    f"{PD} = 18446744073709551615, {QP} = 2\n",  # -1 as `%lu` of a sign-extended SInt32
    f"{PD} = {'9' * 5000}, {QP} = 2\n",  # more digits than int() takes by default
    f"{PD} = -1, {QP} = 2\n",
    f"{PD} = 3.0, {QP} = 2\n",
    f"{PD} = \u0663, {QP} = 2\n",  # an Arabic-Indic digit, which int() would take
    f"{PD} =3, {QP} = 2\n",
    f"{PD}  = 3, {QP} = 2\n",
    f" {PD} = 3, {QP} = 2\n",
    f"{PD} = 3,{QP} = 2\n",
    f"[bold]{PD}[/bold] = 3, {QP} = 2\n",  # markup
    f"{PD} = [red]3[/red], {QP} = 2\n",
    f"<b>{PD}</b> = 3, {QP} = 2\n",
    f"{PD} = 3\x1b[2J, {QP} = 2\n",  # control characters
    f"{PD} = 3\x00, {QP} = 2\n",
    f"{PD}\t= 3, {QP} = 2\n",
    f"{PD} = ??, {QP} = 2\n",
    f"{PD} = <no such class, {QP} = 2\n",
    "ioclasscount: command not found\n",
    "x" * 100_000 + "\n",
])
def test_any_other_output_is_a_parse_error_naming_what_was_expected(text: str) -> None:
    with pytest.raises(FactsParseError) as e:
        parse_rdma_in_use(text)
    assert f"`{PD} = N`, `{QP} = N` on one line ending in a newline" in e.value.expected
    assert e.value.found is not None and len(e.value.found) <= 120
    assert "ioclasscount AppleThunderboltRDMAProtectionDomain AppleThunderboltRDMAQueuePair" in e.value.message


def devinfo_active(n: int, max_pd: int = 11, max_qp: int = 11) -> str:
    """`ibv_devinfo -v` with `n` PORT_ACTIVE devices and one PORT_DOWN (the lab's layout, as devinfo_v)."""
    block = ("hca_id:\trdma_en{i}\n\tmax_qp:\t\t\t\t{qp}\n\tmax_pd:\t\t\t\t{pd}\n\t\tport:\t1\n"
             "\t\t\tstate:\t\t\t{state}\n")
    return "".join(block.format(i=2 + i, qp=max_qp, pd=max_pd, state="PORT_ACTIVE (4)" if i < n else "PORT_DOWN (1)")
                   for i in range(n + 1))


def _kernel(domains: int | str, queue_pairs: int | str, *, active: int = 1, failed: int = 0, running: bool = True,
            complete: bool = True, max_pd: int = 11, max_qp: int = 11) -> Ledger:
    before = [crash("08:59:00")] if complete else []  # a log that begins before the boot holds every failure
    log = "\n".join([*before, *(crash(f"10:{i:02d}:00") for i in range(failed))])
    starts = failed_starts_since(log, parse_boottime(BOOT), whole_file=False)
    got = ledger("s1", parse_ibv_devinfo(devinfo_active(active, max_pd, max_qp)), starts, running,
                 parse_rdma_in_use(f"{PD} = {domains}, {QP} = {queue_pairs}\n"))
    assert isinstance(got, Ledger)
    return got


@pytest.mark.parametrize(("domains", "queue_pairs", "active", "left", "severity"), [
    (8, 8, 1, 2, None),  # max_pd 11, max_qp 11 (10 usable): 2 starts left
    (9, 9, 1, 1, "warning"),  # one start before the device is out
    (10, 10, 1, 0, "error"),
    (10, 9, 1, 1, "warning"),  # domains against max_pd: the 11th domain is still free
    (9, 10, 1, 0, "error"),  # queue pairs against max_qp - 1 (mlx#4209: the 11th is refused)
    (24, 24, 3, 2, None),  # node-wide: 24 over 3 active devices is 8 a device
    (25, 25, 3, 1, "warning"),  # ceil(25 / 3) = 9: the fullest device holds at least 9
    (27, 27, 3, 1, "warning"),
    (28, 28, 3, 0, "error"),  # ceil(28 / 3) = 10
    (0, 0, 2, 10, None),
])
def test_the_kernels_count_is_the_use_shared_among_the_active_devices(domains, queue_pairs, active, left,
                                                                       severity) -> None:
    led = _kernel(domains, queue_pairs, active=active)
    assert led.left == left and led.complete
    said = verdict(led)
    assert (said[0] if said else None) == severity
    per = (-(-domains // active), -(-queue_pairs // active))
    assert (f"kernel: {domains} domains, {queue_pairs} queue pairs over {active} active devices (the fullest holds "
            f"at least {per[0]} domains and {per[1]} queue pairs)").replace("1 active devices", "1 active device") \
        in led.evidence()


def test_the_kernels_count_replaces_the_failed_start_estimate() -> None:
    # dryvist/nix-ai: an attempt-based ledger "once read `domains=3` against a real count of zero"
    led = _kernel(1, 1, failed=9)  # 9 failed starts would warn; the kernel holds only the running runner's
    assert verdict(led) is None and led.left == 9
    assert "kernel: 1 domain, 1 queue pair over 1 active device (the fullest holds at least 1 domain and 1 queue " \
        "pair)" in led.evidence()
    assert "9 failed starts since boot: 9 left" in led.evidence()
    severity, message = verdict(_kernel(10, 10, failed=0)) or ("", "")  # held by something exo did not log
    assert severity == "error" and "errno 16 (EBUSY)" in message and "failed runner starts" not in message


def test_with_the_kernels_count_a_log_that_begins_after_the_boot_is_no_longer_could_not_tell() -> None:
    led = _kernel(3, 3, failed=3, complete=False)
    assert led.failed is not None and not led.failed.complete  # the estimate alone would say "could not tell"
    assert verdict(led) is None and undecided(led) is None
    assert "at least 3 failed starts since boot" in led.evidence()
    severity, message = verdict(_kernel(9, 9, failed=3, complete=False)) or ("", "")
    assert severity == "warning" and "room for 1 more runner start:" in message and "at least" not in message


@pytest.mark.parametrize(("domains", "queue_pairs", "why"), [
    ("<no such class>", 3, f"{PD} = <no such class>: the kernel knows no such class"),
    (3, "?? (error reading/converting value)", f"{QP} = ?? (error reading/converting value)"),
])
def test_a_kernel_count_not_known_falls_back_to_the_estimate_and_says_so(domains, queue_pairs, why: str) -> None:
    led = _kernel(domains, queue_pairs, failed=8, running=True)
    assert led.kernel is None and led.left == 1
    assert f"estimated, the kernel's count not read ({why}" in led.evidence()
    assert "8 failed since boot, 1 running: 1 left" in led.evidence()
    severity, message = verdict(led) or ("", "")
    assert severity == "warning" and "room for 1 more runner start" in message


def _facts(ioclasscount: Raw | None, log: str | None = None):
    from macfleet.collect.gather import Gathered
    from macfleet.facts.commands import BOOTTIME, IOCLASSCOUNT
    from macfleet.flow.checks import node_facts

    outputs = {BOOTTIME.key: _raw(BOOT), "ibv-devinfo:verbose": _raw(devinfo_active(2))}
    if log is not None:
        outputs["exo-log"] = _raw(log)
    if ioclasscount is not None:
        outputs[IOCLASSCOUNT.key] = ioclasscount
    return node_facts(Gathered(outputs={"s1": outputs}), "s1")


def _raw(text: str, rc: int = 0, stderr: str = "") -> Raw:
    return Raw(stdout=text, stderr=stderr, rc=rc, took_s=0.1)


def test_doctor_reads_the_kernels_count_even_without_exos_log() -> None:
    from tests.judge.test_health import NODES
    from tests.judge.test_health import verdict as doctor

    f = _facts(_raw(f"{PD} = 18, {QP} = 18\n"))  # 18 over 2 active devices: 9 a device
    assert f.rdma_in_use is not None and f.exo_failed_starts is None
    [found] = doctor("rdma-ledger", {n: f for n in NODES}, "s1")
    assert found.severity == "warning" and "room for 1 more runner start:" in found.message
    assert "kernel: 18 domains, 18 queue pairs over 2 active devices" in found.evidence
    assert "failed starts since boot not counted (exo-log: no answer" in found.evidence
    assert doctor("rdma-ledger", {n: _facts(_raw(f"{PD} = 2, {QP} = 2\n")) for n in NODES}, "s1") == []


@pytest.mark.parametrize(("answer", "said"), [
    (_raw("", 71, "Error: Can't get registry root.\n"), "ioclasscount: exit 71: Error: Can't get registry root."),
    (_raw(f"{PD} = 3, {QP} = 2"), "unexpected output of `ioclasscount AppleThunderboltRDMAProtectionDomain"),
    (_raw(f"{PD} = 3, {QP} = <no such class>\n"), f"{QP} = <no such class>"),
    (None, "ioclasscount: no answer"),
])
def test_doctor_says_which_count_it_used_when_the_kernels_is_not_read(answer, said: str) -> None:
    from tests.judge.test_health import NODES
    from tests.judge.test_health import verdict as doctor

    f = _facts(answer, "\n".join([crash("08:59:00"), *(crash(f"10:{i:02d}:00") for i in range(9))]))
    [found] = doctor("rdma-ledger", {n: f for n in NODES}, "s1")
    assert found.severity == "warning" and "estimated, the kernel's count not read (" in found.evidence
    assert said in found.evidence and "9 failed since boot, 0 running: 1 left" in found.evidence
    unread = doctor("rdma-ledger", {n: _facts(answer) for n in NODES}, "s1")
    assert "could not be counted: exo-log: no answer" in unread.reason and said in unread.reason
