"""The RDMA resource ledger: device limits from `ibv_devinfo -v`, failed runner starts since boot from exo's log,
and the verdict "reboot the mesh before the next start" while one start is still left."""

from __future__ import annotations

from pathlib import Path

import pytest

from macfleet.errors import FactsParseError
from macfleet.facts.ledger import failed_starts_since, parse_boottime
from macfleet.facts.rdma import parse_ibv_devinfo
from macfleet.judge.rdma_ledger import Ledger, device_capacity, ledger, verdict

CAP = Path(__file__).resolve().parent.parent / "fixtures" / "captures" / "ibv-devinfo"
BOOT = "{ sec = 1764662400, usec = 52071 } Wed Dec  2 09:00:00 2026"


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
    got = ledger("s1", parse_ibv_devinfo(devinfo_v()), failed_starts_since(log, boot, whole_file=True), running)
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
    assert "9 failed since boot" in _ledger(9).evidence()


def test_no_limits_is_a_reason_not_a_guess() -> None:
    boot = parse_boottime(BOOT)
    assert boot is not None
    plain = parse_ibv_devinfo("hca_id:\trdma_en2\n\t\tport:\t1\n\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n")
    why = ledger("s1", plain, failed_starts_since("", boot, whole_file=True), False)
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
        ledger("s1", parse_ibv_devinfo(devinfo_v()), tail, False).short or "")
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
