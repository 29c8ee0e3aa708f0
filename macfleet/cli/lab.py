"""`macfleet lab`: a simulated Thunderbolt-mesh Mac cluster on this Linux machine (docs/lab.md).

Thin room: parse options, call `macfleet.lab.control` (imported lazily: the core never loads the lab), render.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from macfleet.cli.options import JsonOpt, seconds_option
from macfleet.cli.shared import lazy_module
from macfleet.errors import UsageError
from macfleet.render.output import console, emit

# The result models (pydantic) load when a command runs, not for `lab --help`.
results = lazy_module("macfleet.cli.lab_results")
if TYPE_CHECKING:
    from macfleet.cli.lab_results import LabFaultKinds, LabNode, LabUp

app = typer.Typer(
    no_args_is_help=True,
    help="A simulated Mac cluster (network namespaces, veth Thunderbolt cables, sshd, macOS stand-ins). "
    "Linux, root.",
)



def _lab_name(value: str) -> str:
    """Every lab command checks --name here, before it does anything (a name becomes paths and namespaces)."""
    from macfleet.lab import state

    return state.check_name(value)


NameOpt = Annotated[str, typer.Option("--name", callback=_lab_name, help="Lab name (also the inventory name).")]


def ssh_hint(name: str, node: str) -> str:
    """The `lab ssh` line `lab up` suggests (options before the node: the command after it is passed as is)."""
    return f"macfleet lab ssh --name {name} {node} 'sw_vers'"


def _table(nodes: list[LabNode]) -> None:
    from rich.table import Table

    t = Table(box=None)
    for col in ("node", "mesh", "state", "address", "faults"):
        t.add_column(col)
    for n in nodes:
        style = {"up": "green", "off": "red"}.get(n.state, "yellow")
        t.add_row(n.name, n.mesh, f"[{style}]{n.state}[/{style}]", n.address, ", ".join(n.faults))
    console.print(t)


@app.command("up")
def up_cmd(
    name: NameOpt = "lab",
    nodes: Annotated[int | None, typer.Option("--nodes", min=1, help="Nodes in one full mesh (default 4).")] = None,
    pods: Annotated[str | None, typer.Option("--pods", help="PODSxNODES meshes, e.g. 8x4.")] = None,
    model: Annotated[str, typer.Option("--model", help="mac-studio-m3-ultra | mac-studio-m4-max | mac-mini-m4-pro "
                                       "| mac-mini-m4")]
    = "mac-studio-m3-ultra",
    tb_rate: Annotated[str, typer.Option("--tb-rate", help="Thunderbolt link rate (tc units).")] = "1gbit",
    mgmt_rate: Annotated[str, typer.Option("--mgmt-rate", help="Management link rate (tc units).")] = "125mbit",
    boot_seconds: Annotated[float, seconds_option("--boot-seconds", low=0, high=600,
                                                  help="How long a reboot takes.")] = 3.0,
    fresh: Annotated[bool, typer.Option("--fresh", help="Macs out of the box: bridge on, RDMA off, no exo.")] = False,
    no_exo: Annotated[bool, typer.Option("--no-exo", help="Do not install and start the exo stand-in.")] = False,
    all_ports: Annotated[bool, typer.Option("--all-ports", help="Cable the ports that cannot do RDMA too, for "
                                            "meshes larger than the RDMA ports allow (7 Mac Studios).")] = False,
    inventories: Annotated[Path, typer.Option("--inventories", help="Where inventories/NAME is written.")]
    = Path("inventories"),
    latency: Annotated[float, typer.Option("--latency", min=0, max=10, help="How long the stand-ins take to "
                                           "answer, as a share of a real Mac's (docs/lab.md): 1 as a Mac, 0 the "
                                           "lab's own speed.")] = 1.0,
    json_output: JsonOpt = False,
) -> None:
    """Bring a lab up and write inventories/NAME for it."""
    from macfleet.lab import control

    lab = control.up(name, nodes=nodes, pods=pods, model=model, fresh=fresh, exo=not no_exo, tb_rate=tb_rate,
                     mgmt_rate=mgmt_rate, boot_seconds=boot_seconds, inventories=inventories, all_ports=all_ports,
                     latency=latency)
    result = results.LabUp(name=name, inventory=lab["inventory_dir"], took_s=lab["took_s"],
                   nodes=[results.LabNode(**n) for n in control.status(name)])

    def human(r: LabUp) -> None:
        _table(r.nodes)
        console.print(f"lab [bold]{r.name}[/bold] up in {r.took_s:.1f}s; inventory: {r.inventory}")
        console.print(f"try: {ssh_hint(r.name, r.nodes[0].name)}", highlight=False)

    emit(result, json_mode=json_output or None, human=human)


@app.command("status")
def status_cmd(name: NameOpt = "lab", json_output: JsonOpt = False) -> None:
    """Each node's mesh, power state and management address."""
    from macfleet.lab import control

    result = results.LabStatus(nodes=[results.LabNode(**n) for n in control.status(name)])
    emit(result, json_mode=json_output or None, human=lambda r: _table(r.nodes))


@app.command("down")
def down_cmd(name: NameOpt = "lab") -> None:
    """Tear the lab down (idempotent): namespaces, links, processes, state, inventory."""
    from macfleet.lab import control

    control.down(name)


@app.command("ssh", context_settings={"allow_interspersed_args": False})
def ssh_cmd(
    node: Annotated[str, typer.Argument(help="Node name.")],
    command: Annotated[str | None, typer.Argument(help="One string, run by the node's login shell.")] = None,
    name: NameOpt = "lab",
) -> None:
    """SSH to a node with the lab's key and strict host keys; passes stdout, stderr and exit code through."""
    from macfleet.lab import state

    state.require_root_linux()
    argv = state.ssh_argv(name, node, command)
    rc = subprocess.call(argv)
    raise typer.Exit(rc)


@app.command("power")
def power_cmd(
    node: Annotated[str, typer.Argument(help="Node name.")],
    action: Annotated[str, typer.Argument(help="on | off | cycle")],
    name: NameOpt = "lab",
    json_output: JsonOpt = False,
) -> None:
    """Press the power button: on, off (hard), or cycle (off, then on after --boot-seconds)."""
    from macfleet.lab import state

    emit(results.LabPower(node=node, state=state.power(name, node, action)), json_mode=json_output or None,
         human=lambda r: console.print(f"{r.node}: {r.state}"))


@app.command("recovery", context_settings={"allow_interspersed_args": False})
def recovery_cmd(
    node: Annotated[str, typer.Argument(help="Node name (must be off).")],
    argv: Annotated[list[str], typer.Argument(help="Command run in Recovery's Terminal, after `--`.")],
    name: NameOpt = "lab",
) -> None:
    """The operator's physical step: boot the (off) node into Recovery, run CMD there, restart it."""
    import sys

    from macfleet.lab import control

    if argv and argv[0] == "--":
        argv = argv[1:]
    p = control.recovery(name, node, argv)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    raise typer.Exit(p.returncode)


@app.command("fault")
def fault_cmd(
    fault: Annotated[str, typer.Argument(help="Fault name (`macfleet lab faults` lists them).")],
    args: Annotated[list[str] | None, typer.Argument(help="Its arguments: nodes, seconds, version. A negative "
                                                          "number goes after `--`.")] = None,
    clear: Annotated[bool, typer.Option("--clear", help="Undo exactly what the fault did.")] = False,
    name: NameOpt = "lab",
    json_output: JsonOpt = False,
) -> None:
    """Turn a fault on (or off with --clear): cabling, network, RDMA, host or exo (docs/lab-faults.md)."""
    from macfleet.lab import faults

    rec = faults.fault(name, fault, list(args or []), clear=clear)
    result = results.LabFault(kind=rec["kind"], args=rec["args"], nodes=rec["nodes"], cleared=clear)
    emit(result, json_mode=json_output or None,
         human=lambda r: console.print(f"{' '.join([r.kind, *r.args])}: {'cleared' if r.cleared else 'on'}",
                                       markup=False, highlight=False))


@app.command("faults")
def faults_cmd(name: NameOpt = "lab", json_output: JsonOpt = False) -> None:
    """The faults `lab fault` can inject, one line each (and which are on, if lab NAME is up)."""
    from macfleet.lab import control, faults

    try:
        active = sorted({f for n in control.status(name) for f in n.get("faults", [])})
    except UsageError:  # no lab of that name: the list of kinds is still worth showing
        active = []
    result = results.LabFaultKinds(faults=[results.LabFaultKind(usage=u, description=d) for u, d in faults.describe()],
                           active=active)

    def human(r: LabFaultKinds) -> None:
        width = max(len(f.usage) for f in r.faults)
        for f in r.faults:
            console.print(f"{f.usage:<{width}}  {f.description}", highlight=False, markup=False, soft_wrap=True)
        if r.active:
            console.print(f"on in lab {name}: " + "; ".join(r.active), highlight=False, markup=False)

    emit(result, json_mode=json_output or None, human=human)


@app.command("exo-build")
def exo_build_cmd(
    version: Annotated[str, typer.Option("--version", help="exo version the build reports, e.g. 1.0.71.")],
    out: Annotated[Path, typer.Option("--out", help="Directory to write the build into.")],
    broken: Annotated[bool, typer.Option("--broken", help="A build whose runner never comes up.")] = False,
    source: Annotated[bool, typer.Option("--source", help="A source tree instead, built on a builder node by its "
                                         "build.sh (`macfleet_exo.build.command: sh ./build.sh`).")] = False,
    fail_build: Annotated[bool, typer.Option("--fail-build", help="(with --source) A source whose build fails.")]
    = False,
    builds_mlx: Annotated[bool, typer.Option("--builds-mlx", help="(with --source) A pyproject.toml shaped as "
                                             "exo's: MLX an extra built from a git source (needs Xcode).")] = False,
    zenoh: Annotated[bool, typer.Option("--zenoh", help="(with --source) An exo that declares zenoh's peer ports "
                                        "(52414/tcp, 52413/udp), as exo does since 09f9ea313.")] = False,
) -> None:
    """Write an exo stand-in build (or, with --source, a source tree) usable as `macfleet rollout exo --source
    DIR` (docs/lab-exo.md)."""
    from macfleet.lab.exo import build

    if fail_build and not source:
        raise UsageError("--fail-build goes with --source (a build that is already made cannot fail)")
    if (builds_mlx or zenoh) and not source:
        raise UsageError(f"{'--builds-mlx' if builds_mlx else '--zenoh'} goes with --source (only a source is built)")
    if source:
        build.write_source(out, version, broken=broken, fail=fail_build, builds_mlx=builds_mlx, zenoh=zenoh)
        what = (f"source{' (its build fails)' if fail_build else ''}; "
                f"build command: {build.SOURCE_BUILD_COMMAND}")
    else:
        build.write_build(out, version, broken=broken)
        what = "build"
    console.print(f"exo stand-in {version}{' (broken)' if broken else ''} {what} written to {out}", markup=False,
                  highlight=False)


@app.command("llama-build")
def llama_build_cmd(
    out: Annotated[Path, typer.Option("--out", help="Directory to write the build into.")],
    broken: Annotated[bool, typer.Option("--broken", help="A build whose rpc-server cannot start.")] = False,
) -> None:
    """Write a llama.cpp stand-in build (bin/rpc-server) usable as `macfleet rollout llama-rpc --source DIR`."""
    from macfleet.lab.llama import build

    try:
        build.write_build(out, broken=broken)
    except FileExistsError as exc:
        raise UsageError(f"--out {out}: {exc}", hint="give an empty or absent directory") from None
    console.print(f"llama.cpp stand-in{' (broken)' if broken else ''} written to {out}", markup=False,
                  highlight=False)
