"""`system_profiler` stand-in: SPThunderboltDataType (text, -json, -xml) and SPHardwareDataType.

Shapes follow shared/samples (macos__sp_thunderbolt_*, macos__sp_hardware_json_*) and
the real captures: buses in descending order, host bus keys, Mac peers without route
string / switch UID, the RDMA service (64087) only when the PEER has RDMA on, speed by cable kind.
"""

from __future__ import annotations

import sys

from .common import CORES, Links, Node

SERVICE_KEY_RDMA = "\u02c7" * 6 + "AD"  # the mojibake key of macOS 26.5+ captures
SPEED_BY_KIND = {"tb5": "80 Gb/s", "tb4": "40 Gb/s"}


# Sources (issue 31; samples = shared/samples, GUESS = listed in docs/lab.md "Guesses"):
# - a Mac peer: `Vendor Name`, `Device Name`, `Domain UUID`, no route string or switch UID, its services; the
#   RDMA service (protocol 64087, key `ˇˇˇˇˇˇAD`) only when the PEER has RDMA on: samples
#   macos__sp_thunderbolt_json_mbp_m5max_pair_peer_anon_1.json, …_local_anon_1.json,
#   macos__sp_thunderbolt_text_macmini_m4pro_2_peer_mbp.txt
def _peer_item(node: Node, receptacle: int, links: Links) -> dict | None:
    hit = node.peer(receptacle)
    if hit is None:
        return None
    _cable, peer, far = hit
    pboot = peer.boot
    if pboot.get("power") != "on":
        return None
    services = [
        {
            "_name": "service_ip",
            "protocol_id_key": 1,
            "protocol_revision_key": 1,
            "protocol_version_key": 1,
            "service_uuid_key": pboot.get("service_uuids", {}).get("ip", ""),
        }
    ]
    if peer.rdma_enabled:
        services.append(
            {
                "_name": "unknown_xd_service",
                "protocol_id_key": 64087,
                "protocol_revision_key": 0,
                "protocol_version_key": 1,
                "service_key_key": SERVICE_KEY_RDMA,
                "service_uuid_key": pboot.get("service_uuids", {}).get("rdma", ""),
            }
        )
    return {
        "_name": peer.model["marketing_name"],
        "device_id_key": "0xA",
        "device_name_key": peer.model["model_identifier"],
        "domain_uuid_key": pboot.get("domain_uuids", {}).get(str(far["receptacle"]), ""),
        "services_title": services,
        "vendor_id_key": "0x0A27",
        "vendor_name_key": "Apple Inc.",
    }


# - GUESS: an unknown Mac's entry (the unknown-mac fault), shaped like a peer
def _foreign_item(foreign: dict) -> dict:
    """A Mac that is not part of the lab (lab fault `unknown-mac`): its bus domain UUID matches no node."""
    return {
        "_name": foreign["marketing_name"],
        "device_id_key": "0xA",
        "device_name_key": foreign["model_identifier"],
        "domain_uuid_key": foreign["domain_uuid"],
        "services_title": [
            {"_name": "service_ip", "protocol_id_key": 1, "protocol_revision_key": 1, "protocol_version_key": 1,
             "service_uuid_key": foreign["ip_uuid"]},
            {"_name": "unknown_xd_service", "protocol_id_key": 64087, "protocol_revision_key": 0,
             "protocol_version_key": 1, "service_key_key": SERVICE_KEY_RDMA, "service_uuid_key": foreign["rdma_uuid"]},
        ],
        "vendor_id_key": "0x0A27",
        "vendor_name_key": "Apple Inc.",
    }


# - a dock with the far Mac behind it: samples macos__sp_thunderbolt_json_mbp_tb5_dock_1.json (the dock's
#   fields); which side names the other Mac through a hub: GUESS (reported: research/macos-outputs.md 10.8)
def _dock_item(hub: dict, inner: dict | None) -> dict:
    """A dock between two Macs (lab fault `via-hub`), shaped as macos__sp_thunderbolt_json_mbp_tb5_dock_1."""
    item: dict = {}
    if inner is not None:
        item["_items"] = [inner]
    free = {"current_speed_key": "Up to 40 Gb/s", "link_status_key": "0x7", "micro_version_key": "0.88.0",
            "receptacle_status_key": "receptacle_no_devices_connected"}
    item.update({
        "_name": hub["name"],
        "device_id_key": hub.get("device_id", "0x708"),
        "device_name_key": hub["name"],
        "device_revision_key": "0x3",
        "mode_key": "usb_four",
        "receptacle_2_tag": dict(free),
        "receptacle_3_tag": dict(free),
        "receptacle_upstream_ambiguous_tag": {"current_speed_key": hub.get("speed", "40 Gb/s"),
                                              "link_status_key": "0x2", "micro_version_key": "0.88.0",
                                              "receptacle_status_key": "receptacle_connected"},
        "route_string_key": "1",
        "switch_uid_key": hub["switch_uid"],
        "switch_version_key": "41.1",
        "vendor_id_key": "0x2B89",
        "vendor_name_key": hub["vendor"],
    })
    return item


# - buses in descending order, host bus keys, `Up to 120 Gb/s` idle / `80 Gb/s` TB5 / `40 Gb/s` TB4, link
#   status 0x2 connected / 0x7 idle, receptacle_status_key: samples macos__sp_thunderbolt_json_macmini_m4pro_2_
#   peer_mbp.json, macos__sp_thunderbolt_json_mbp_tb5_dock_1.json; research/macos-outputs.md section 5
# - domain UUIDs new at every boot: research/macos-outputs.md 10.1; values of UIDs/UUIDs: GUESS
def thunderbolt_items(node: Node) -> list[dict]:
    links = Links()
    boot = node.boot
    buses = []
    for port in sorted(node.ports, key=lambda p: p["receptacle"], reverse=True):
        r = port["receptacle"]
        dev = port["device"]
        hit = node.lab.cable_at(node.name, r)
        connected = hit is not None and links.carrier(dev)
        bus: dict = {}
        item = None
        if connected and hit[0].get("foreign"):
            item = _foreign_item(hit[0]["foreign"])
        elif connected and hit[0].get("hub"):
            hub = hit[0]["hub"]
            item = _dock_item(hub, _peer_item(node, r, links) if hub.get("sees") == node.name else None)
        elif connected:
            item = _peer_item(node, r, links)
        if item is not None:
            bus["_items"] = [item]
        bus["_name"] = f"thunderboltusb4_bus_{r - 1}"
        bus["device_name_key"] = node.model["marketing_name"]
        bus["domain_uuid_key"] = boot.get("domain_uuids", {}).get(str(r), "")
        if connected:
            kind = hit[0].get("kind", "tb5")
            speed = SPEED_BY_KIND.get(kind, "40 Gb/s")
            if hit[0].get("hub"):
                speed = hit[0]["hub"].get("speed", "40 Gb/s")
            if port["max_speed_gbps"] < 120:
                speed = "40 Gb/s"
            tag = {
                "current_speed_key": speed,
                "link_status_key": "0x2",
                "micro_version_key": "0.0.0",
                "receptacle_id_key": str(r),
                "receptacle_status_key": "receptacle_connected",
            }
        else:
            tag = {
                "current_speed_key": f"Up to {port['max_speed_gbps']} Gb/s",
                "link_status_key": "0x7",
                "micro_version_key": "0.0.0",
                "receptacle_id_key": str(r),
                "receptacle_status_key": "receptacle_no_devices_connected",
            }
        bus["receptacle_1_tag"] = tag
        bus["route_string_key"] = "0"
        bus["switch_uid_key"] = node.uid(r)
        bus["vendor_name_key"] = "Apple Inc."
        buses.append(bus)
    return buses


# - text layout: samples macos__sp_thunderbolt_text_macmini_m4pro_2_peer_mbp.txt, …_macmini_m4pro_1.txt
def _text(items: list[dict]) -> str:
    out = ["Thunderbolt/USB4:", ""]
    for bus in items:
        n = bus["_name"].rsplit("_", 1)[1]
        tag = bus["receptacle_1_tag"]
        out += [
            f"    Thunderbolt/USB4 Bus {n}:",
            "",
            f"      Vendor Name: {bus['vendor_name_key']}",
            f"      Device Name: {bus['device_name_key']}",
            f"      UID: {bus['switch_uid_key']}",
            f"      Route String: {bus['route_string_key']}",
            f"      Domain UUID: {bus['domain_uuid_key']}",
            "      Port:",
            "          Status: "
            + ("Device connected" if tag["receptacle_status_key"] == "receptacle_connected" else "No device connected"),
            f"          Link Status: {tag['link_status_key']}",
            f"          Speed: {tag['current_speed_key']}",
            f"          Receptacle: {tag['receptacle_id_key']}",
            f"          Micro Firmware Version: {tag['micro_version_key']}",
            "",
        ]
        for item in bus.get("_items", []):
            out += _item_text(item, 8)
    return "\n".join(out) + "\n"


def _item_text(item: dict, indent: int) -> list[str]:
    pad = " " * indent
    out = [f"{pad}{item['_name']}:", "", f"{pad}  Vendor Name: {item['vendor_name_key']}",
           f"{pad}  Device Name: {item['device_name_key']}"]
    if "mode_key" in item:  # a dock / device: route string and UID, no domain UUID
        up = item.get("receptacle_upstream_ambiguous_tag", {})
        out += [f"{pad}  Mode: USB4", f"{pad}  Device ID: {item['device_id_key']}",
                f"{pad}  Vendor ID: {item['vendor_id_key']}", f"{pad}  UID: {item['switch_uid_key']}",
                f"{pad}  Route String: {item['route_string_key']}", f"{pad}  Port (Upstream):",
                f"{pad}      Status: Device connected", f"{pad}      Speed: {up.get('current_speed_key', '')}", ""]
        for inner in item.get("_items", []):
            out += _item_text(inner, indent + 4)
        return out
    out += [f"{pad}  Device ID: {item['device_id_key']}", f"{pad}  Vendor ID: {item['vendor_id_key']}",
            f"{pad}  Domain UUID: {item['domain_uuid_key']}", f"{pad}  Services:"]
    for svc in item["services_title"]:
        title = "Internet Protocol" if svc["_name"] == "service_ip" else "Service: Unknown"
        out += [
            f"{pad}    {title}:",
            f"{pad}      Protocol ID: {svc['protocol_id_key']}",
            f"{pad}      Protocol Version: {svc['protocol_version_key']}",
            f"{pad}      Protocol Revision: {svc['protocol_revision_key']}",
        ]
        if "service_key_key" in svc:
            out.append(f"{pad}      Service Key: {svc['service_key_key']}")
        out.append(f"{pad}      Service UUID: {svc['service_uuid_key']}")
    out.append("")
    return out


# - `-json` layout: samples macos__sp_thunderbolt_json_macmini_m4pro_2_peer_mbp.json
def _json(data_type: str, items: list[dict]) -> str:
    # Real output: 2-space indent, `"key" : value`, keys sorted (`_items` sorts first), raw UTF-8,
    # no trailing newline. json is imported here, for the -json form only.
    import json

    return json.dumps({data_type: items}, indent=2, sort_keys=True, separators=(",", " : "), ensure_ascii=False)


# - `-xml` plist: samples macos__sp_thunderbolt_xml_mbp_tb5_dock_1.xml
def _xml(data_type: str, items: list[dict], reporter: str) -> bytes:
    import datetime as dt
    import plistlib

    doc = [
        {
            "_SPCommandLineArguments": [
                "/usr/sbin/system_profiler",
                "-nospawn",
                "-xml",
                data_type,
                "-detailLevel",
                "full",
            ],
            "_SPCompletionInterval": 0.0812,
            "_SPResponseTime": 0.0991,
            "_dataType": data_type,
            "_detailLevel": -1,
            "_items": items,
            "_parentDataType": "SPHardwareDataType",
            "_properties": {"_name": {"_isColumn": "YES", "_order": "0"}},
            "_timeStamp": dt.datetime.now(dt.UTC).replace(microsecond=0, tzinfo=None),
            "_versionInfo": {f"com.apple.SystemProfiler.{reporter}": "2.1.0"},
        }
    ]
    return plistlib.dumps(doc, sort_keys=True)




# - SPHardwareDataType -json keys, `proc T:P:E:0`: samples macos__sp_hardware_json_studio_m2ultra_1.json,
#   macos__sp_hardware_json_mbp_m5max_1.json; GUESS: boot_rom_version and os_loader_version values
def hardware_items(node: Node) -> list[dict]:
    total, perf, eff = CORES.get(node.model["chip"], (8, 4, 4))
    info = node.info
    return [
        {
            "_name": "hardware_overview",
            "activation_lock_status": "activation_lock_disabled",
            "boot_rom_version": "13822.101.6",
            "chip_type": node.model["chip"],
            "machine_model": node.model["model_identifier"],
            "machine_name": node.model["marketing_name"],
            "model_number": info["model_number"],
            "number_processors": f"proc {total}:{perf}:{eff}:0",
            "os_loader_version": "13822.101.6",
            "physical_memory": f"{node.model['memory_bytes'] // 1024**3} GB",
            "platform_UUID": info["platform_uuid"],
            "provisioning_UDID": info["provisioning_udid"],
            "serial_number": info["serial"],
        }
    ]


# - `Chip:`, `Total Number of Cores: T (P Performance and E Efficiency)`, `Memory:` lines with 6-space indent:
#   samples macos__sysctl_memsize_plus_sphardware_grep_studio_m3ultra_1.txt; the other lines: GUESS
def _hardware_text(node: Node) -> str:
    h = hardware_items(node)[0]
    total, perf, eff = CORES.get(node.model["chip"], (8, 4, 4))
    lines = [
        "Hardware:",
        "",
        "    Hardware Overview:",
        "",
        f"      Model Name: {h['machine_name']}",
        f"      Model Identifier: {h['machine_model']}",
        f"      Model Number: {h['model_number']}",
        f"      Chip: {h['chip_type']}",
        f"      Total Number of Cores: {total} ({perf} Performance and {eff} Efficiency)",
        f"      Memory: {h['physical_memory']}",
        f"      System Firmware Version: {h['boot_rom_version']}",
        f"      OS Loader Version: {h['os_loader_version']}",
        f"      Serial Number (system): {h['serial_number']}",
        f"      Hardware UUID: {h['platform_UUID']}",
        f"      Provisioning UDID: {h['provisioning_UDID']}",
        "      Activation Lock Status: Disabled",
        "",
    ]
    return "\n".join(lines) + "\n"


# - data types, `-json`, `-xml`, `-detailLevel`, `-timeout`, `-listDataTypes`: system_profiler(8); the two-line
#   `-listDataTypes` list: GUESS
def main(node: Node, args: list[str]) -> int:
    fmt = "text"
    types = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "-json":
            fmt = "json"
        elif a == "-xml":
            fmt = "xml"
        elif a in ("-detailLevel", "-timeout"):
            i += 1
        elif a == "-listDataTypes":
            sys.stdout.write("Available Datatypes:\nSPHardwareDataType\nSPThunderboltDataType\n")
            return 0
        elif a.startswith("-"):
            pass
        else:
            types.append(a)
        i += 1
    if not types:
        types = ["SPHardwareDataType", "SPThunderboltDataType"]
    for t in types:
        if t == "SPThunderboltDataType":
            items = thunderbolt_items(node)
            reporter = "SPThunderboltReporter"
        elif t == "SPHardwareDataType":
            items = hardware_items(node)
            reporter = "SPPlatformReporter"
        else:
            continue
        if fmt == "json":
            sys.stdout.write(_json(t, items))
        elif fmt == "xml":
            sys.stdout.buffer.write(_xml(t, items, reporter))
        elif t == "SPThunderboltDataType":
            sys.stdout.write(_text(items))
        else:
            sys.stdout.write(_hardware_text(node))
    return 0
