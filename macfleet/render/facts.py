"""Human renderings of facts models (rich). Decides nothing: shows what was parsed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from macfleet.facts.network import HardwarePortsFacts, IfconfigFacts
from macfleet.facts.rdma import IbvDevicesFacts, IbvDevinfoFacts
from macfleet.facts.thunderbolt import ThunderboltAttached, ThunderboltFacts
from macfleet.judge.links import LinksReport
from macfleet.render.text import text


def _cells(*values: str) -> list[Text]:
    """Table cells from parsed text: shown as read, never taken for markup."""
    return [text(v) for v in values]


def _speed(v: float | None) -> str:
    return "-" if v is None else f"{v:g} Gb/s"


def _attached_text(a: ThunderboltAttached) -> str:
    if a.kind == "mac":
        services = ", ".join(a.services) or "no services shown"
        return f"Mac {a.name} ({a.model or '?'}) domain {a.domain_uuid or '?'} [{services}]"
    extra = ", ".join(x for x in (a.vendor, a.mode, _speed(a.speed_gbps) if a.speed_gbps else None) if x)
    return f"{a.name}" + (f" ({extra})" if extra else "")


def _add_attached(tree: Tree, attached: list[ThunderboltAttached]) -> None:
    for a in attached:
        _add_attached(tree.add(text(_attached_text(a))), a.attached)


def render_thunderbolt(facts: ThunderboltFacts) -> RenderableType:
    table = Table(title=text(f"Thunderbolt ports of {facts.host.name or 'this Mac'} ({facts.source_format})"))
    for col in ("receptacle", "bus", "link", "speed", "capability", "domain UUID", "attached"):
        table.add_column(col)
    for p in facts.ports:
        tree = Tree("-" if not p.attached else "", hide_root=True)
        _add_attached(tree, p.attached)
        table.add_row(
            *_cells(str(p.receptacle), str(p.bus), "up" if p.connected else "idle",
                    _speed(p.speed_gbps) if p.connected else f"up to {_speed(p.max_speed_gbps)}",
                    p.capability or "?", p.domain_uuid or "?"),
            tree if p.attached else Text("-"),
        )
    return Group(table, *[text(f"note: {n}", style="dim") for n in facts.notes])


def render_hardware_ports(facts: HardwarePortsFacts) -> RenderableType:
    table = Table(title="Hardware ports")
    for col in ("hardware port", "device", "MAC"):
        table.add_column(col)
    for p in facts.ports:
        table.add_row(*_cells(p.name, p.device, p.mac or "-"))
    return table


def render_ibv_devices(facts: IbvDevicesFacts) -> RenderableType:
    if not facts.devices:
        return Text("no RDMA devices (RDMA disabled, or a Thunderbolt 4 Mac)")
    table = Table(title="RDMA devices")
    table.add_column("device")
    table.add_column("node GUID")
    for d in facts.devices:
        table.add_row(*_cells(d.name, d.guid))
    return table


def render_ibv_devinfo(facts: IbvDevinfoFacts) -> RenderableType:
    table = Table(title="RDMA ports")
    for col in ("device", "state", "active MTU", "link layer", "IPv4-mapped GID"):
        table.add_column(col)
    for d in facts.devices:
        gid = "unknown (no -v)" if d.has_ipv4_gid is None else (d.ipv4_gid_address or "none")
        table.add_row(*_cells(d.name, d.state or "?", str(d.active_mtu or "?"), d.link_layer or "?", gid))
    return table


def render_ifconfig(facts: IfconfigFacts) -> RenderableType:
    table = Table(title="Interfaces")
    for col in ("interface", "flags", "mtu", "IPv4", "status", "members"):
        table.add_column(col)
    for i in facts.interfaces:
        table.add_row(*_cells(
            i.name or "?", ",".join(i.flags), str(i.mtu or "?"),
            " ".join(f"{a.address}/{a.prefixlen}" if a.prefixlen is not None else a.address for a in i.inet) or "-",
            i.status or "?", " ".join(i.members) or "-",
        ))
    return table


def render_links(result: LinksReport) -> RenderableType:
    table = Table(title="Thunderbolt links")
    for col in ("A", "B", "speed", "via"):
        table.add_column(col)
    for link in result.links:
        def end(e: Any) -> str:
            return f"{e.node} r{e.receptacle}" + (f" ({e.device})" if e.device else "")

        table.add_row(*_cells(end(link.a), end(link.b), _speed(link.speed_gbps), ", ".join(link.via) or "direct"))
    parts: list[RenderableType] = [table]
    for f in result.findings:
        parts.append(text(f"{f.severity}: {f.message}" + (f" — {f.fix}" if f.fix else "")))
    return Group(*parts)


def render_generic(model: BaseModel, title: str = "facts") -> RenderableType:
    """A tree of the facts under `title` (the command they were read from: never our class names)."""
    tree = Tree(text(title), guide_style="dim")

    def add(node: Tree, value: Any, label: str) -> None:
        if isinstance(value, dict):
            sub = node.add(text(label))
            for k, v in value.items():
                add(sub, v, str(k))
        elif isinstance(value, list) and value and isinstance(value[0], dict | list):
            sub = node.add(text(label))
            for n, v in enumerate(value):
                add(sub, v, f"[{n}]")
        else:
            node.add(text(f"{label}: {value}"))

    for k, v in model.model_dump(mode="json").items():
        add(tree, v, k)
    return tree


RENDERERS = {
    ThunderboltFacts: render_thunderbolt,
    HardwarePortsFacts: render_hardware_ports,
    IbvDevicesFacts: render_ibv_devices,
    IbvDevinfoFacts: render_ibv_devinfo,
    IfconfigFacts: render_ifconfig,
}


def render_facts(model: BaseModel, title: str = "facts") -> RenderableType:
    renderer = RENDERERS.get(type(model))
    return renderer(model) if renderer else render_generic(model, title)  # type: ignore[operator]
