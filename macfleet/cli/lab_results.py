"""What `macfleet lab` commands print with --json: loaded when one runs, not for `lab --help` (pydantic)."""

from __future__ import annotations

from pydantic import BaseModel


class LabNode(BaseModel):
    name: str
    mesh: str
    state: str
    address: str
    faults: list[str] = []


class LabStatus(BaseModel):
    nodes: list[LabNode]


class LabUp(BaseModel):
    name: str
    inventory: str
    took_s: float
    nodes: list[LabNode]


class LabPower(BaseModel):
    node: str
    state: str


class LabFault(BaseModel):
    kind: str
    args: list[str]
    nodes: list[str]
    cleared: bool


class LabFaultKind(BaseModel):
    usage: str
    description: str


class LabFaultKinds(BaseModel):
    faults: list[LabFaultKind]
    active: list[str] = []  # faults on in the named lab, when it is up
