"""Host facts: `sw_vers`, `sysctl`, `system_profiler SPHardwareDataType -json`, `pmset -g`, `fdesetup status`,
`csrutil status`, `systemsetup -getremotelogin`. Layouts: shared/research/macos-outputs.md §9."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import Field

from macfleet.facts._common import Facts, fail, guarded, lines_for, nonblank

# ---------------------------------------------------------------------------------------------- sw_vers


class SwVersFacts(Facts):
    product_name: str
    product_version: str
    build_version: str
    product_version_extra: str | None = None  # Rapid Security Response suffix, e.g. "(a)"
    other_lines: list[str] = Field(default_factory=list)  # lines pasted along that are not sw_vers output


_SW_KEYS = {
    "ProductName": "product_name", "ProductVersion": "product_version", "BuildVersion": "build_version",
    "ProductVersionExtra": "product_version_extra",
}


@guarded("sw-vers")
def parse_sw_vers(text: str) -> SwVersFacts:
    kind = "sw-vers"
    lines = nonblank(lines_for(kind, text))
    values: dict[str, str] = {}
    other: list[str] = []
    for _n, raw in lines:
        key, sep, value = raw.partition(":")
        field = _SW_KEYS.get(key.strip())
        if sep and field:
            values[field] = value.strip()
        else:
            other.append(raw.strip())
    missing = [k for k, f in _SW_KEYS.items() if f not in values and k != "ProductVersionExtra"]
    if missing:
        first = lines[0] if lines else (1, "")
        raise fail(kind, "'ProductName:', 'ProductVersion:' and 'BuildVersion:' lines", line=first[0],
                   found=first[1].strip())
    return SwVersFacts(**values, other_lines=other)


# ----------------------------------------------------------------------------------------------- sysctl


class SysctlChange(Facts):
    old: str
    new: str


class SysctlFacts(Facts):
    """`sysctl a b c` (`values` by name), `sysctl -n a b c` (`bare_values`, in argument order: the names are
    not printed, the caller knows them), `sysctl name=value` (`changes`). Unknown names are in `unknown_oids`."""

    values: dict[str, str] = Field(default_factory=dict)
    bare_values: list[str] = Field(default_factory=list)
    changes: dict[str, SysctlChange] = Field(default_factory=dict)
    unknown_oids: list[str] = Field(default_factory=list)
    other_lines: list[str] = Field(default_factory=list)  # lines pasted along that are not sysctl output

    def int_value(self, name: str) -> int | None:
        v = self.values.get(name)
        if v is None and name in self.changes:
            v = self.changes[name].new
        try:
            return int(v) if v is not None else None
        except ValueError:
            return None


_SYSCTL_NAMED = re.compile(r"^(?P<name>[a-z_][\w\-]*(?:\.[\w\-]+)+):(?:\s(?P<value>.*))?$")
_SYSCTL_CHANGE = re.compile(r"^(?P<old>.*?)\s+->\s+(?P<new>\S+)(?:\s+#.*)?$")
_SYSCTL_UNKNOWN = re.compile(r"^sysctl: unknown oid '(?P<name>[^']+)'")


@guarded("sysctl")
def parse_sysctl(text: str) -> SysctlFacts:
    kind = "sysctl"
    lines = nonblank(lines_for(kind, text))
    if not lines:
        raise fail(kind, "'name: value' lines or bare values", line=1, found="")
    first = lines[0][1].strip()
    if not (_SYSCTL_NAMED.match(first) or _SYSCTL_UNKNOWN.match(first)):
        return _sysctl_bare(lines)
    values: dict[str, str] = {}
    changes: dict[str, SysctlChange] = {}
    unknown: list[str] = []
    rest: list[str] = []
    for _n, raw in lines:
        t = raw.rstrip()
        if m := _SYSCTL_UNKNOWN.match(t.strip()):
            unknown.append(m.group("name"))
        elif m := _SYSCTL_NAMED.match(t):
            value = (m.group("value") or "").strip()
            if c := _SYSCTL_CHANGE.match(value):
                changes[m.group("name")] = SysctlChange(old=c.group("old").strip(), new=c.group("new"))
            else:
                values[m.group("name")] = value
        else:
            rest.append(t.strip())
    return SysctlFacts(values=values, changes=changes, unknown_oids=unknown, other_lines=rest)


# `sysctl -n a b c` prints only values, one a line; the caller asks for a few, and at least one of the
# values macfleet reads (memsize, ncpu, wired_limit_mb...) is a number.
_SYSCTL_BARE_MAX_LINES = 32
_SYSCTL_BARE_MAX_CHARS = 256
_SYSCTL_BARE_NUMBER = re.compile(r"-?\d+")


def _sysctl_bare(lines: list[tuple[int, str]]) -> SysctlFacts:
    kind = "sysctl"
    values = [t.strip() for _, t in lines]
    for (n, _), v in zip(lines, values, strict=True):
        if len(v) > _SYSCTL_BARE_MAX_CHARS or re.match(r"^[A-Z][\w ()/-]*:(\s|$)", v):
            raise fail(kind, "'name: value' lines, or the bare values of `sysctl -n`", line=n, found=v)
    if len(values) > _SYSCTL_BARE_MAX_LINES or not any(_SYSCTL_BARE_NUMBER.fullmatch(v) for v in values):
        raise fail(kind, f"'name: value' lines, or up to {_SYSCTL_BARE_MAX_LINES} bare values of `sysctl -n` "
                   "(at least one a number)", line=lines[0][0], found=values[0])
    return SysctlFacts(bare_values=values)


# ---------------------------------------------------------------------------- SPHardwareDataType -json


class HardwareFacts(Facts):
    chip: str | None = None  # "Apple M3 Ultra" (chip_type); None on Intel or when not shown
    model_identifier: str | None = None  # "Mac15,14"
    model_name: str | None = None  # "Mac Studio"
    model_number: str | None = None
    memory_bytes: int | None = None  # from "512 GB" (GB = GiB here)
    serial_number: str | None = None  # as printed, anonymised values included
    cores_total: int | None = None
    processor_counts: list[int] = Field(default_factory=list)  # the fields of "proc 24:16:8:0"
    activation_lock: str | None = None
    source_format: Literal["json", "text"] = "json"


_MEMORY = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]B)\s*$", re.IGNORECASE)
_UNITS = {"KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def _memory_bytes(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    m = _MEMORY.match(value)
    if not m:
        return None
    return int(float(m.group("n")) * _UNITS[m.group("unit").upper()])


def _processors(value: Any) -> tuple[int | None, list[int]]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, [value]
    if isinstance(value, str):
        m = re.match(r"^\s*proc\s+([\d:]+)\s*$", value)
        if m:
            counts = [int(x) for x in m.group(1).split(":") if x.isdigit()]
            return (counts[0] if counts else None), counts
        m = re.match(r"^\s*(\d+)", value)
        if m:
            return int(m.group(1)), []
    return None, []


def _s(value: Any) -> str | None:
    return value if isinstance(value, str) else None


@guarded("hardware")
def parse_hardware(text: str) -> HardwareFacts:
    kind = "hardware"
    lines = lines_for(kind, text)
    body = "\n".join(t for _, t in lines).strip()
    if not body.startswith("{"):
        return _hardware_text(lines)
    try:
        doc, _end = json.JSONDecoder().raw_decode(body)  # trailing text (a shell's "%" marker) is ignored
    except ValueError as e:
        raise fail(kind, "a JSON document", line=getattr(e, "lineno", None), found=str(e)) from None
    items = doc.get("SPHardwareDataType") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        found = ", ".join(list(doc)[:3]) if isinstance(doc, dict) else type(doc).__name__
        raise fail(kind, 'a JSON object with key "SPHardwareDataType"', line=1, found=found)
    overview = next((i for i in items if isinstance(i, dict)), None)
    if overview is None:
        raise fail(kind, "a hardware_overview entry in SPHardwareDataType", line=1, found="[]")
    total, counts = _processors(overview.get("number_processors"))
    return HardwareFacts(
        chip=_s(overview.get("chip_type")) or _s(overview.get("cpu_type")),
        model_identifier=_s(overview.get("machine_model")),
        model_name=_s(overview.get("machine_name")),
        model_number=_s(overview.get("model_number")),
        memory_bytes=_memory_bytes(overview.get("physical_memory")),
        serial_number=_s(overview.get("serial_number")),
        cores_total=total,
        processor_counts=counts,
        activation_lock=_s(overview.get("activation_lock_status")),
    )


_HW_TEXT = {"Chip": "chip", "Model Identifier": "model_identifier", "Model Name": "model_name",
            "Model Number": "model_number", "Memory": "memory", "Serial Number (system)": "serial_number",
            "Total Number of Cores": "cores"}


def _hardware_text(lines: list) -> HardwareFacts:
    found: dict[str, str] = {}
    for _n, raw in nonblank(lines):
        key, sep, value = raw.strip().partition(":")
        if sep and key in _HW_TEXT:
            found[_HW_TEXT[key]] = value.strip()
    if not found:
        first = next(((n, t.strip()) for n, t in lines if t.strip()), (1, ""))
        raise fail("hardware", "a JSON document or 'Hardware Overview' lines", line=first[0], found=first[1])
    total, _ = _processors(found.get("cores"))
    return HardwareFacts(
        chip=found.get("chip"), model_identifier=found.get("model_identifier"), model_name=found.get("model_name"),
        model_number=found.get("model_number"), memory_bytes=_memory_bytes(found.get("memory")),
        serial_number=found.get("serial_number"), cores_total=total, source_format="text",
    )


# ------------------------------------------------------------------------------------------------- pmset


class PmsetFacts(Facts):
    """`pmset -g`: `settings` are the "Currently in use" values without their annotations, which are kept in
    `annotations` ("sleep prevented by powerd, sharingd"). `sections` holds every section as printed."""

    settings: dict[str, str]
    annotations: dict[str, str] = Field(default_factory=dict)
    sections: dict[str, dict[str, str]] = Field(default_factory=dict)


_PMSET_LINE = re.compile(r"^\s*(?P<key>\S(?:.*?\S)?)\s+(?P<value>[^\s()]+)(?:\s+\((?P<note>.*)\)?)?\s*$")


# `pmset -g` prints the first two, `pmset -g custom` one per power source.
_PMSET_SECTIONS = ("System-wide power settings", "Currently in use", "AC Power", "Battery Power", "UPS Power")


@guarded("pmset")
def parse_pmset(text: str) -> PmsetFacts:
    kind = "pmset"
    lines = nonblank(lines_for(kind, text))
    sections: dict[str, dict[str, str]] = {}
    annotations: dict[str, str] = {}
    section: str | None = None
    for n, raw in lines:
        t = raw.rstrip()
        if not t[:1].isspace() and t.endswith(":"):
            section = t[:-1].strip()
            if section not in _PMSET_SECTIONS:
                raise fail(kind, "a section header: " + ", ".join(f"'{h}:'" for h in _PMSET_SECTIONS),
                           line=n, found=t.strip())
            sections.setdefault(section, {})
            continue
        if section is None:
            raise fail(kind, "a section header such as 'Currently in use:'", line=n, found=t.strip())
        m = _PMSET_LINE.match(t)
        if not m:
            if t.strip() and section is not None and " " not in t.strip():
                sections[section][t.strip()] = ""  # a flag printed without value
                continue
            raise fail(kind, "'<setting>  <value>' lines", line=n, found=t.strip())
        sections[section][m.group("key")] = m.group("value")
        if m.group("note") and section == "Currently in use":
            annotations[m.group("key")] = m.group("note").rstrip(")").strip()
    if not sections:
        raise fail(kind, "'System-wide power settings:' / 'Currently in use:' sections", line=1, found="")
    settings = sections.get("Currently in use", {})
    return PmsetFacts(settings=settings, annotations=annotations, sections=sections)


# ---------------------------------------------------------------------------------------------- fdesetup


class FdesetupFacts(Facts):
    filevault_on: bool
    status_line: str
    in_progress: str | None = None  # "Encryption in progress: Percent completed = 42.0" etc.
    needs_restart: bool = False


@guarded("fdesetup")
def parse_fdesetup(text: str) -> FdesetupFacts:
    kind = "fdesetup"
    lines = nonblank(lines_for(kind, text))
    first = lines[0] if lines else (1, "")
    m = re.match(r"^FileVault is (On|Off)\b", first[1].strip())
    if not m:
        raise fail(kind, "'FileVault is On.' or 'FileVault is Off.'", line=first[0], found=first[1].strip())
    progress = next((t.strip() for _, t in lines[1:] if "in progress" in t.lower()), None)
    return FdesetupFacts(
        filevault_on=m.group(1) == "On",
        status_line=first[1].strip(),
        in_progress=progress,
        needs_restart="restart" in " ".join(t for _, t in lines).lower(),
    )


# ----------------------------------------------------------------------------------------------- csrutil


class CsrutilFacts(Facts):
    """`status` is None when the summary line is not in the capture (e.g. `csrutil status | grep Kext`)."""

    status: Literal["enabled", "disabled", "unknown"] | None
    custom_configuration: bool
    configuration: dict[str, bool] = Field(default_factory=dict)  # "Kext Signing" -> enabled?
    notes: list[str] = Field(default_factory=list)  # the warning sentence and other prose


_CSR_STATUS = re.compile(r"^System Integrity Protection status:\s*(?P<s>enabled|disabled|unknown)\b(?P<rest>.*)$")
_CSR_ITEM = re.compile(r"^(?P<k>[A-Za-z][\w\- ]*?):\s*(?P<v>enabled|disabled)\.?$")


@guarded("csrutil")
def parse_csrutil(text: str) -> CsrutilFacts:
    kind = "csrutil"
    lines = nonblank(lines_for(kind, text))
    status = None
    custom = False
    config: dict[str, bool] = {}
    notes: list[str] = []
    for _n, raw in lines:
        t = raw.strip()
        if m := _CSR_STATUS.match(t):
            status = m.group("s")
            custom = "Custom Configuration" in m.group("rest")
        elif t == "Configuration:":
            custom = True
        elif m := _CSR_ITEM.match(t):
            config[m.group("k").strip()] = m.group("v") == "enabled"
        else:
            notes.append(t)
    if status is None and not config:
        first = lines[0] if lines else (1, "")
        raise fail(kind, "'System Integrity Protection status: ...'", line=first[0], found=first[1].strip())
    return CsrutilFacts(status=status, custom_configuration=custom or (status is None and bool(config)),
                        configuration=config, notes=notes)


# ------------------------------------------------------------------------------------------ remote login


class RemoteLoginFacts(Facts):
    """`enabled` is None when systemsetup refused to answer (run without root: it prints the refusal on
    stdout and exits 0) — unknown, not Off."""

    enabled: bool | None
    needs_admin: bool = False
    message: str


@guarded("remote-login")
def parse_remote_login(text: str) -> RemoteLoginFacts:
    kind = "remote-login"
    lines = nonblank(lines_for(kind, text))
    first = lines[0] if lines else (1, "")
    t = first[1].strip()
    if m := re.match(r"^Remote Login:\s*(On|Off)\b", t, re.IGNORECASE):
        return RemoteLoginFacts(enabled=m.group(1).lower() == "on", message=t)
    if "administrator access" in t:
        return RemoteLoginFacts(enabled=None, needs_admin=True, message=t)
    raise fail(kind, "'Remote Login: On|Off' or the administrator-access refusal", line=first[0], found=t)
