"""Named tests on real captures: real values, the surprises of macos-outputs.md §10, cable matching."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from macfleet.errors import FactsParseError
from macfleet.facts.links import match_links
from macfleet.facts.network import parse_hardware_ports, parse_ifconfig, parse_service_order
from macfleet.facts.portmap import build_port_map
from macfleet.facts.rdma import parse_ibv_devices, parse_ibv_devinfo, parse_nvram, parse_rdma_ctl
from macfleet.facts.system import (
    parse_hardware,
    parse_pmset,
    parse_remote_login,
    parse_sw_vers,
    parse_sysctl,
)
from macfleet.facts.thunderbolt import parse_thunderbolt

CAP = Path(__file__).resolve().parent.parent / "fixtures" / "captures"


def read(kind: str, name: str) -> str:
    return (CAP / kind / name).read_text(encoding="utf-8")


def tb(name: str):
    return parse_thunderbolt(read("thunderbolt", name))


M5_LOCAL = "macos__sp_thunderbolt_json_mbp_m5max_pair_local_anon_1.json"
M5_PEER = "macos__sp_thunderbolt_json_mbp_m5max_pair_peer_anon_1.json"
MINI_TEXT = "macos__sp_thunderbolt_text_macmini_m4pro_2_peer_mbp.txt"
MINI_JSON = "macos__sp_thunderbolt_json_macmini_m4pro_2_peer_mbp.json"


# ------------------------------------------------------------------------------------ real values


def test_mini_peer_mbp_text_values() -> None:
    f = tb(MINI_TEXT)
    assert f.host.name == "Mac mini"
    assert [p.receptacle for p in f.ports] == [1, 2, 3]
    r2 = f.port(2)
    assert r2.bus == 1 and r2.connected and r2.speed_gbps == 40 and r2.switch_uid == "0x05AC51E771159CF1"
    (mac,) = r2.attached
    assert (mac.kind, mac.name, mac.model) == ("mac", "MacBook Pro", "Mac17,6")
    assert mac.domain_uuid == "BC5DEC53-7E36-4A9A-8459-456EBAB5E58A"
    assert mac.services == ["ip", "rdma"]
    (display,) = f.port(3).attached
    assert (display.kind, display.name, display.mode, display.speed_gbps) == ("device", "Studio Display",
                                                                            "Thunderbolt 3", 20)
    assert f.port(1).connected is False and f.port(1).max_speed_gbps == 120 and f.port(1).capability == "tb5"


def test_text_json_and_xml_forms_agree() -> None:
    text, js = tb(MINI_TEXT), tb(MINI_JSON)
    assert text.model_dump(exclude={"source_format"}) == js.model_dump(exclude={"source_format"})
    dock_json = tb("macos__sp_thunderbolt_json_mbp_tb5_dock_1.json")
    dock_xml = tb("macos__sp_thunderbolt_xml_mbp_tb5_dock_1.xml")
    assert dock_xml.source_format == "xml"
    assert dock_json.model_dump(exclude={"source_format"}) == dock_xml.model_dump(exclude={"source_format"})


def test_studio_docks_without_blank_lines_or_top_header() -> None:
    f = tb("macos__sp_thunderbolt_text_studio_m4max_docks_1.txt")
    assert [(p.receptacle, p.speed_gbps) for p in f.ports] == [(1, 40), (2, 80), (3, None), (4, 40)]
    assert [a.name for p in f.ports for a in p.attached] == ["Pegasus32-R", "TS5 Plus", "PRO-G40"]
    assert all(a.kind == "device" for p in f.ports for a in p.attached)


def test_hardware_ports_m3_ultra_and_m4_base() -> None:
    m3 = parse_hardware_ports(read("hardware-ports",
                                   "macos__networksetup_listallhardwareports_studio_m3ultra_trimmed_1.txt"))
    assert {n: p.device for n, p in m3.by_thunderbolt().items()} == {i: f"en{i + 1}" for i in range(1, 7)}
    assert all(p.mac is None for p in m3.ports)  # trimmed by its author


def test_ibv_devices_kernel_order_kept() -> None:
    f = parse_ibv_devices(read("ibv-devices", "mlx__mlx-docs_ibv_devices_m3-ultra.txt"))
    assert [d.name for d in f.devices] == ["rdma_en2", "rdma_en3", "rdma_en5", "rdma_en4", "rdma_en6", "rdma_en7"]
    assert f.devices[2].guid == "8396a9d9edbaac05"


def test_ibv_devinfo_v_gid_table_from_line_joined_copy() -> None:
    f = parse_ibv_devinfo(read("ibv-devinfo", "mlx__apple-tn3205_ibv_devinfo_-d_rdma_en2_-v.txt"))
    (d,) = f.devices
    assert (d.name, d.state, d.port, d.transport) == ("rdma_en2", "PORT_ACTIVE", 1, "Thunderbolt (100)")
    assert d.node_guid == "9093:3a23:2588:ac05"
    assert d.gids == ["fe80::344d:4ff:feea:4e40", "::ffff:169.254.205.255", "fe80::1021:1bac:fe1:b5e3"]
    assert d.has_ipv4_gid is True and d.ipv4_gid_address == "169.254.205.255" and d.ipv4_gid_index == 1


def test_ibv_devinfo_plain_has_unknown_gid_not_false() -> None:
    f = parse_ibv_devinfo(read("ibv-devinfo", "macos__ibv_devinfo_elided_macmini_m4pro_tn3205_1.txt"))
    assert [(d.name, d.state) for d in f.devices] == [(f"rdma_en{i}", "PORT_ACTIVE") for i in (2, 3, 4)]
    assert all(d.has_ipv4_gid is None for d in f.devices) and f.verbose is False


def test_ibv_devinfo_grep_port_states() -> None:
    f = parse_ibv_devinfo(read("ibv-devinfo", "macos__ibv_devinfo_v_grep_tb4_mac_3ports_1.txt"))
    assert [(d.name, d.state, d.active_width) for d in f.devices] == [
        ("rdma_en2", "PORT_DOWN", "8X (4)"), ("rdma_en3", "PORT_DOWN", "8X (4)"), ("rdma_en4", "PORT_ACTIVE", "4X (2)")
    ]


def test_ifconfig_full_bridge_members_and_states() -> None:
    f = parse_ifconfig(read("ifconfig", "macos__ifconfig_full_macbook_bridge_inactive_1.txt"))
    bridge = f.get("bridge0")
    assert bridge.members == ["en1", "en2", "en3"] and bridge.status == "inactive"
    assert f.get("en1").flags.count("PROMISC") == 1 and f.get("en1").status == "inactive"
    en0 = f.get("en0")
    assert en0.inet[0].address == "192.168.28.58" and en0.inet[0].prefixlen == 22
    assert f.get("lo0").mtu == 16384


def test_ifconfig_one_interface_with_prompt() -> None:
    f = parse_ifconfig(read("ifconfig", "mlx__apple-tn3205_ifconfig_en2_thunderbolt-ip.txt"))
    (en2,) = f.interfaces
    assert en2.name == "en2" and en2.inet[0].address == "169.254.205.255" and en2.inet[0].netmask == "255.255.0.0"
    assert en2.inet6[0].scope == "en2" and en2.status == "active"


def test_hardware_values() -> None:
    h = parse_hardware(read("hardware", "macos__sp_hardware_json_studio_m2ultra_1.json"))
    assert (h.chip, h.model_identifier, h.memory_bytes, h.cores_total) == ("Apple M2 Ultra", "Mac14,14", 64 << 30, 24)
    m2 = parse_hardware(read("hardware", "macos__sp_hardware_json_mbp_m2_1.json"))  # no final newline, zsh '%'
    assert m2.serial_number == "D5XQV1FMFJ" and m2.memory_bytes == 16 << 30


def test_pmset_values_and_annotations() -> None:
    f = parse_pmset(read("pmset", "macos__pmset_g_desktop_fixture_1.txt"))
    assert f.settings["Sleep On Power Button"] == "1" and f.settings["sleep"] == "120"
    laptop = parse_pmset("Currently in use:\n sleep                 1 (sleep prevented by powerd, sharingd)\n")
    assert laptop.settings == {"sleep": "1"}
    assert laptop.annotations == {"sleep": "sleep prevented by powerd, sharingd"}


def test_sysctl_forms() -> None:
    n = parse_sysctl(read("sysctl", "macos__sysctl_n_memsize_ncpu_brand_studio_m2ultra_1.txt"))
    assert n.bare_values == ["68719476736", "24", "Apple M2 Ultra"]
    named = parse_sysctl(read("sysctl", "macos__sysctl_hw_vm_macos26_1.txt"))
    assert named.int_value("hw.memsize") == 7516192768
    setting = parse_sysctl(read("sysctl", "macos__sysctl_iogpu_wired_limit_set_1.txt"))
    assert setting.changes["iogpu.wired_limit_mb"].new == "0"
    assert parse_sysctl("sysctl: unknown oid 'hw.cpufrequency_max'\n").unknown_oids == ["hw.cpufrequency_max"]


def test_service_order_disabled_service() -> None:
    f = parse_service_order(read("service-order", "macos__networksetup_listnetworkserviceorder_exo_services_1.txt"))
    last = f.services[-1]
    assert (last.order, last.name, last.enabled, last.device) == (None, "EXO Thunderbolt 3", False, "en4")


def test_rdma_ctl_and_ibv_devices_from_one_transcript() -> None:
    text = read("rdma-ctl", "mlx__omlx-issue-3037_rdma_ctl_status_ibv_devices_empty_tb4.txt")
    assert parse_rdma_ctl(text).enabled is True
    assert parse_ibv_devices(text).devices == []


def test_rdma_ctl_refusal_outside_recovery_is_never_a_state() -> None:
    """rdma_ctl's refusal outside Recovery ("This tool needs to be executed from Recovery OS": exit 77 by
    dryvist/nix-darwin's runbook, exit 0 by jundot/omlx's notes) is judged by its text: never enabled/disabled,
    and the reason says it was the refusal."""
    from macfleet.facts.rdma import refused_outside_recovery

    text = "This tool needs to be executed from Recovery OS\n"
    assert refused_outside_recovery(text) and not refused_outside_recovery("enabled\n")
    with pytest.raises(FactsParseError, match="refused: it runs that only in Recovery"):
        parse_rdma_ctl(text)


def test_nvram_forms() -> None:  # no public capture exists (macos-outputs.md §11): the documented layout
    assert parse_nvram("rdma-enable\t1\n").rdma_enable == "1"
    missing = parse_nvram("nvram: Error getting variable - 'rdma-enable': (iokit/common) data was not found\n")
    assert missing.rdma_enable is None and missing.missing == ["rdma-enable"]


# --------------------------------------------------------------------- macos-outputs.md §10 surprises


def test_s1_domain_uuids_change_across_boots_uids_do_not() -> None:
    before = tb("macos__sp_thunderbolt_text_macmini_m4pro_1.txt")
    after = tb(MINI_TEXT)
    assert [p.switch_uid for p in before.ports] == [p.switch_uid for p in after.ports]
    assert not {p.domain_uuid for p in before.ports} & {p.domain_uuid for p in after.ports}
    # so matching across passes finds no link
    assert match_links({"before": before, "after": after}).links == []


def test_s2_base_m4_ios_host_name_and_missing_thunderbolt_3() -> None:
    f = parse_hardware_ports(read("hardware-ports", "macos__networksetup_listallhardwareports_macmini_m4_1.txt"))
    assert sorted(f.by_thunderbolt()) == [1, 2, 4]
    text = read("thunderbolt", "macos__sp_thunderbolt_text_macmini_m4pro_1.txt").replace("Mac mini", "iOS")
    assert parse_thunderbolt(text).host.name == "iOS"


def test_s3_enx_is_read_not_derived() -> None:
    f = parse_hardware_ports(read("hardware-ports", "macos__networksetup_listallhardwareports_mbp_m4max_trimmed_1.txt"))
    assert {n: p.device for n, p in f.by_thunderbolt().items()} == {1: "en1", 2: "en2", 3: "en3"}
    m5 = parse_hardware_ports("Hardware Port: Thunderbolt 1\nDevice: en1\n\nHardware Port: Thunderbolt 2\n"
                              "Device: en6\n\nHardware Port: Thunderbolt 3\nDevice: en2\n")
    pm = build_port_map(tb(M5_LOCAL), m5)
    assert [(e.receptacle, e.device) for e in pm.entries] == [(1, "en1"), (2, "en6"), (3, "en2")]


def test_s4_rdma_service_only_when_peer_has_rdma_and_key_is_opaque() -> None:
    local, peer = tb(M5_LOCAL), tb(M5_PEER)
    assert local.port(2).attached[0].services == ["ip", "rdma"]  # the peer has RDMA on
    assert peer.port(2).attached[0].services == ["ip"]  # the local one has it off
    assert local.port(2).attached[0].service_details[1].service_key == "ˇˇˇˇˇˇAD"
    assert tb(MINI_TEXT).port(2).attached[0].service_details[1].service_key == "ˇˇˇˇˇˇAD"


def test_s5_two_tb5_macs_can_link_at_40() -> None:
    f = tb("macos__sp_thunderbolt_text_mbp_tb5_two_peers_abridged_1.txt")
    assert f.port(1).capability == "tb5"
    for r in (2, 3):
        assert f.port(r).speed_gbps == 40 and f.port(r).attached[0].kind == "mac"
        assert f.port(r).capability is None  # a live 40 Gb/s link does not tell TB4 from TB5


def test_s6_refusal_and_emptiness_with_exit_0() -> None:
    r = parse_remote_login(read("remote-login", "macos__systemsetup_getremotelogin_noadmin_1.txt"))
    assert r.enabled is None and r.needs_admin  # unknown, never "Off"
    assert parse_ibv_devices(read("ibv-devices", "macos__ibv_devices_rdma_disabled_1.txt")).devices == []


def test_s7_80g_dock_or_ssd_is_never_a_mac() -> None:
    dock = tb(M5_LOCAL).port(3)
    assert dock.speed_gbps == 80 and dock.attached[0].kind == "device" and dock.attached[0].name == "SB-XTM5"
    ts5 = tb("macos__sp_thunderbolt_text_studio_m4max_docks_1.txt").port(2)
    assert ts5.speed_gbps == 80 and ts5.attached[0].kind == "device"


def test_s8_through_a_hub_only_one_side_names_the_other() -> None:
    a = json.loads(read("thunderbolt", M5_LOCAL))
    b = json.loads(read("thunderbolt", M5_PEER))
    # put the peer's view of A behind a hub: B sees a dock with A nested in it
    bus1 = next(x for x in b["SPThunderboltDataType"] if x["_name"] == "thunderboltusb4_bus_1")
    mac = bus1["_items"][0]
    bus1["_items"] = [{"_name": "Hub", "mode_key": "usb_four", "switch_uid_key": "0x1", "route_string_key": "1",
                       "_items": [mac]}]
    res = match_links({"a": parse_thunderbolt(json.dumps(a)), "b": parse_thunderbolt(json.dumps(b))})
    assert len(res.links) == 1 and res.links[0].via == ["Hub"]
    # and with the hub hiding A completely, A's view is one-sided
    bus1["_items"] = [{"_name": "Hub", "mode_key": "usb_four", "switch_uid_key": "0x1", "route_string_key": "1"}]
    res = match_links({"a": parse_thunderbolt(json.dumps(a)), "b": parse_thunderbolt(json.dumps(b))})
    assert res.links == [] and [o.code for o in res.observations] == ["one_sided"]


def test_s9_whitespace_variants() -> None:
    assert parse_sw_vers("ProductName:\tmacOS\nProductVersion:\t12.6\nBuildVersion:\t21G115").product_version == "12.6"
    m1 = tb("macos__sp_thunderbolt_text_mbp_m1pro_2021_1.txt")
    assert all(p.max_speed_gbps == 40 and p.capability == "tb4" for p in m1.ports)  # "Up to 40 Gb/s x1"
    spaced = read("ibv-devices", "macos__ibv_devices_macmini_m4pro_tn3205_1.txt")
    tabbed = read("ibv-devices", "mlx__mlx-docs_ibv_devices_m3-ultra.txt")
    assert len(parse_ibv_devices(spaced).devices) == 3 and len(parse_ibv_devices(tabbed).devices) == 6
    crlf = read("thunderbolt", MINI_TEXT).replace("\n", "\r\n").replace("    ", "\t")
    assert parse_thunderbolt(crlf).port(2).attached[0].model == "Mac17,6"


# ------------------------------------------------------------------------------ links and cut-offs


def test_m5_max_pair_matches_into_exactly_one_link() -> None:
    res = match_links({"local": tb(M5_LOCAL), "peer": tb(M5_PEER)})
    assert res.observations == []
    (link,) = res.links
    assert (link.a.node, link.a.receptacle, link.b.node, link.b.receptacle) == ("local", 2, "peer", 2)
    assert link.speed_gbps == 80 and link.via == []


def test_topology_links_cli(cli) -> None:
    d = CAP / "thunderbolt"
    result = cli("topology", "links", "--from", f"local={d / M5_LOCAL}", "--from", f"peer={d / M5_PEER}", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert [(x["a"]["node"], x["a"]["receptacle"], x["b"]["node"], x["b"]["receptacle"], x["speed_gbps"])
            for x in out["links"]] == [("local", 2, "peer", 2, 80)]
    assert out["findings"] == []


def test_cut_off_json_keeps_what_is_complete() -> None:
    text = read("thunderbolt", M5_PEER)
    cut = text[: text.index('"thunderboltusb4_bus_0"') + 40]
    f = parse_thunderbolt(cut)
    assert [p.receptacle for p in f.ports] == [2, 3] and f.notes


def test_cut_off_text_keeps_what_is_complete() -> None:
    text = read("thunderbolt", MINI_TEXT)
    cut = text[: text.index("Receptacle: 1") + 5]
    f = parse_thunderbolt(cut)
    assert [p.receptacle for p in f.ports] == [2, 3] and f.notes


@pytest.mark.parametrize(
    ("parser", "kind_file"),
    [
        (parse_thunderbolt, ("hardware", "macos__sp_hardware_json_mbp_m2_1.json")),
        (parse_hardware, ("thunderbolt", M5_PEER)),
        (parse_ibv_devices, ("pmset", "macos__pmset_g_desktop_fixture_1.txt")),
        (parse_hardware_ports, ("ifconfig", "mlx__apple-tn3205_ifconfig_en2_thunderbolt-ip.txt")),
        (parse_thunderbolt, ("ifconfig", "mlx__apple-tn3205_ifconfig_en2_thunderbolt-ip.txt")),
    ],
)
def test_wrong_kind_names_command_and_line(parser, kind_file) -> None:
    with pytest.raises(FactsParseError) as e:
        parser(read(*kind_file))
    assert e.value.command and e.value.expected and e.value.line is not None
