"""The inventory loader: the example loads; every kind of bad input gets one precise problem line."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from macfleet.errors import InventoryError, UsageError
from macfleet.inventory.load import load_inventory
from tests.conftest import EXAMPLE_INVENTORY


def test_example_loads() -> None:
    fleet = load_inventory(EXAMPLE_INVENTORY)
    assert [m.name for m in fleet.meshes] == ["mesh1"]
    mesh = fleet.meshes[0]
    assert mesh.node_names == ("studio-1", "studio-2", "studio-3", "studio-4")
    assert mesh.nodes[0].model_spec.chip == "Apple M3 Ultra"
    assert mesh.nodes[0].port_labels == {2: "rear 2", 3: "rear 3"}
    assert mesh.settings.ipplan.pool == ipaddress.IPv4Network("10.213.0.0/16")
    assert len(mesh.pairs) == 6
    assert fleet.path("known_hosts") == fleet.root / "known_hosts"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _problems(inv: Path) -> list[str]:
    with pytest.raises(InventoryError) as info:
        load_inventory(inv)
    return [str(p) for p in info.value.problems]


HOSTS = "hosts.yml"
SETTINGS = "group_vars/all/macfleet.yml"

CASES = [
    # (file, old, new, expected problem line)
    (
        SETTINGS,
        "prefix: 30 ",
        "prefix: 29 ",
        "inv/group_vars/all/macfleet.yml:8 macfleet_ipplan.prefix: found 29, expected 30 or 31",
    ),
    (
        SETTINGS,
        "  interval_s: 30",
        "  interval_s: often",
        "inv/group_vars/all/macfleet.yml:33 macfleet_probes.interval_s: found 'often', expected a valid number",
    ),
    (
        SETTINGS,
        "  debounce: 3 ",
        "  debounse: 3 ",
        "inv/group_vars/all/macfleet.yml:40 macfleet_remediation.debounse: found unknown key `debounse`, "
        "expected a known key (did you mean `debounce`?)",
    ),
    (
        SETTINGS,
        "macfleet_probes:",
        "macfleet_probs:",
        "inv/group_vars/all/macfleet.yml:32 macfleet_probs: found unknown key `macfleet_probs`, "
        "expected a known key (did you mean `macfleet_probes`?)",
    ),
    (
        HOSTS,
        "ansible_host: studio-2.cluster.example.com",
        'ansible_host: "studio-2; rm -rf /"',
        "inv/hosts.yml:16 macfleet.children.mesh1.hosts.studio-2.ansible_host: found 'studio-2; rm -rf /', "
        "expected an IP address or a host name",
    ),
    (
        HOSTS,
        "        studio-3:\n",
        "        studio-3$(reboot):\n",
        "inv/hosts.yml:19 macfleet.children.mesh1.hosts.studio-3$(reboot): found host name 'studio-3$(reboot)', "
        "expected letters, digits, `.`, `_`, `-` (no spaces or shell characters)",
    ),
    (
        HOSTS,
        "        studio-4:\n",
        "        studio-3:\n",
        "inv/hosts.yml:23 studio-3: found `studio-3` twice (first at line 19), expected each key once",
    ),
    (
        HOSTS,
        "          ansible_user: admin                          # an administrator",
        "          ansible_usr: admin                          # an administrator",
        "inv/hosts.yml:10 macfleet.children.mesh1.hosts.studio-1.ansible_usr: found unknown key `ansible_usr`, "
        "expected a known key (did you mean `ansible_user`?)",
    ),
    (
        HOSTS,
        '          macfleet_model: "Mac15,14"                   # Mac Studio',
        '          macfleet_modle: "Mac15,14"                   # Mac Studio',
        "inv/hosts.yml:11 macfleet.children.mesh1.hosts.studio-1.macfleet_modle: found unknown key "
        "`macfleet_modle`, expected a known key (did you mean `macfleet_model`?)",
    ),
    (
        HOSTS,
        '          ansible_user: admin\n          macfleet_model: "Mac15,14"\n        studio-3:',
        '          ansible_user: admin\n          ansible_port: 70000\n          macfleet_model: "Mac15,14"\n'
        "        studio-3:",
        "inv/hosts.yml:18 macfleet.children.mesh1.hosts.studio-2.ansible_port: found 70000, "
        "expected a port number 1-65535",
    ),
    (
        HOSTS,
        "    mesh1:",
        "    mesh-1:",
        "inv/hosts.yml:6 macfleet.children.mesh-1: found group name 'mesh-1', "
        "expected letters, digits and `_` (Ansible group names have no dashes)",
    ),
    (
        HOSTS,
        "ansible_host: studio-4.cluster.example.com",
        "ansible_host: [studio-4",
        "inv/hosts.yml:25: found a YAML syntax error",
    ),
]


@pytest.mark.parametrize(("file", "old", "new", "expected"), CASES, ids=[c[3].split(": found")[0][-40:] for c in CASES])
def test_each_problem_is_named(example_inventory: Path, file: str, old: str, new: str, expected: str) -> None:
    _edit(example_inventory / file, old, new)
    problems = _problems(example_inventory)
    assert any(p.startswith(expected) for p in problems), problems


def test_host_in_two_meshes(example_inventory: Path) -> None:
    hosts = example_inventory / HOSTS
    hosts.write_text(
        hosts.read_text() + "    mesh2:\n      hosts:\n        studio-1:\n          ansible_host: 10.9.9.9\n"
    )
    assert _problems(example_inventory) == [
        "inv/hosts.yml macfleet.children.mesh2.hosts.studio-1: found host `studio-1` in meshes `mesh1` and `mesh2`, "
        "expected each Mac in exactly one mesh"
    ]


def test_pool_too_small(example_inventory: Path) -> None:
    _edit(example_inventory / SETTINGS, "pool: 10.213.0.0/16", "pool: 10.213.0.0/26")
    assert _problems(example_inventory) == [
        "inv/group_vars/all/macfleet.yml macfleet_ipplan.pool: found 10.213.0.0/26: 16 /30 subnets for 1 mesh(es) "
        "(mesh1), expected at least 32 /30 subnets (32 per mesh), i.e. a /25 or larger"
    ]


def test_mesh_override_replaces_whole_block(example_inventory: Path) -> None:
    (example_inventory / "group_vars" / "mesh1.yml").write_text("macfleet_ipplan:\n  prefix: 31\n")
    fleet = load_inventory(example_inventory)
    assert fleet.meshes[0].settings.ipplan.prefix == 31
    assert fleet.settings.ipplan.prefix == 30
    assert str(fleet.meshes[0].settings.ipplan.pool) == "10.213.0.0/16"  # the default, not the `all` value


def test_several_problems_all_reported(example_inventory: Path) -> None:
    _edit(example_inventory / SETTINGS, "prefix: 30 ", "prefix: 29 ")
    _edit(example_inventory / HOSTS, "ansible_host: studio-4.cluster.example.com", "ansible_host: 'a b'")
    assert len(_problems(example_inventory)) == 2


def test_missing_directory_is_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no inventory directory"):
        load_inventory(tmp_path / "nope")


def test_missing_hosts_file(tmp_path: Path) -> None:
    assert _problems(tmp_path) == [
        f"{tmp_path}: found no hosts.yml, expected hosts.yml listing the meshes under group `macfleet`"
    ]


def test_no_macfleet_group(example_inventory: Path) -> None:
    (example_inventory / HOSTS).write_text("all:\n  hosts:\n    a: {}\n")
    problems = _problems(example_inventory)
    assert problems[0] == (
        "inv/hosts.yml:1: found no `macfleet` group, "
        "expected a top-level group `macfleet` whose children are the meshes"
    )


# -- fuzz: any YAML document gives a model or a clean InventoryError, nothing else --------------------

yaml_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.text(max_size=12))
yaml_values = st.recursive(
    yaml_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(
            st.sampled_from(
                [
                    "macfleet",
                    "children",
                    "hosts",
                    "mesh1",
                    "n1",
                    "ansible_host",
                    "vars",
                    "macfleet_ipplan",
                    "pool",
                    "prefix",
                    "x",
                ]
            )
            | st.text(max_size=6),
            children,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hosts=yaml_values, group_vars=yaml_values)
def test_fuzz_loader(tmp_path_factory: pytest.TempPathFactory, hosts: object, group_vars: object) -> None:
    inv = tmp_path_factory.mktemp("fuzz")
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))
    (inv / "group_vars" / "all" / "x.yml").write_text(yaml.safe_dump(group_vars))
    try:
        load_inventory(inv)
    except InventoryError as exc:
        assert exc.problems and all(str(p) for p in exc.problems)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(alphabet=st.sampled_from(list("macfleet:children hosts-\n {}[]'\"#&*!|>%@`,?")), max_size=80))
def test_fuzz_raw_text(tmp_path_factory: pytest.TempPathFactory, text: str) -> None:
    inv = tmp_path_factory.mktemp("raw")
    (inv / "hosts.yml").write_text(text)
    try:
        load_inventory(inv)
    except InventoryError as exc:
        assert exc.problems


# ------------------------------------------------------------------------------------ bounded input


def _alias_bomb(levels: int = 9) -> str:
    out = 'x0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    for i in range(1, levels + 1):
        out += f"x{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]\n"
    return out


def test_alias_bomb_is_refused_at_once(example_inventory: Path) -> None:
    """9^10 values once expanded: before, 30-50 s and gigabytes, then a MemoryError traceback. Run as the
    user would, in a child with 1 GB of address space and a deadline, so the old behaviour fails the test
    instead of taking the machine down."""
    import resource
    import subprocess
    import sys

    hosts = example_inventory / HOSTS
    text = hosts.read_text().replace('macfleet_model: "Mac15,14"  ', "macfleet_model: *a9  ", 1)
    hosts.write_text("anchors:\n" + "".join(f"  {line}\n" for line in _alias_bomb().splitlines()) + text)

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    result = subprocess.run(
        [sys.executable, "-m", "macfleet", "inventory", "check", "-i", str(example_inventory)],
        capture_output=True, text=True, timeout=60, preexec_fn=limit_memory,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "inv/hosts.yml:" in result.stderr and "alias" in result.stderr


@pytest.mark.parametrize(
    ("yaml_text", "found"),
    [
        ("macfleet_exo:\n  version: " + "v" * 10_000 + "\n", "a value of 10000 characters"),
        ("macfleet_exo:\n  env: " + "[" * 100 + "]" * 100 + "\n", "nested more than 64 deep"),
    ],
    ids=["long-value", "deep-nesting"],
)
def test_long_values_and_deep_nesting_are_refused(example_inventory: Path, yaml_text: str, found: str) -> None:
    (example_inventory / "group_vars/all/zz.yml").write_text(yaml_text)
    (problem,) = _problems(example_inventory)
    assert problem.startswith("inv/group_vars/all/zz.yml:2") and found in problem


def test_oversized_file_is_refused(example_inventory: Path) -> None:
    (example_inventory / "group_vars/all/zz.yml").write_text("# padding\n" * 200_000)
    (problem,) = _problems(example_inventory)
    assert "over 1048576 bytes" in problem


# ------------------------------------------------------------------------- what Ansible would refuse


def test_mesh_vars_that_are_not_a_mapping_are_refused(example_inventory: Path) -> None:
    _edit(example_inventory / HOSTS, "    mesh1:\n", '    mesh1:\n      vars: "str"\n')
    assert _problems(example_inventory) == [
        "inv/hosts.yml:7 macfleet.children.mesh1.vars: found 'str', expected a mapping (Ansible refuses anything "
        "else here)"
    ]


def test_two_hosts_at_one_address_are_refused(example_inventory: Path) -> None:
    _edit(example_inventory / HOSTS, "studio-3.cluster.example.com", "Studio-1.cluster.example.com")
    (problem,) = _problems(example_inventory)
    assert problem.startswith("inv/hosts.yml:20 macfleet.children.mesh1.hosts.studio-3.ansible_host: found ")
    assert "already the address of `studio-1`" in problem


@pytest.mark.parametrize(
    "pool", ["0.0.0.0/0", "127.0.0.0/8", "169.254.0.0/16", "100.64.0.0/16", "8.8.0.0/16", "224.0.0.0/8",
             "198.18.0.0/16", "10.0.0.0/7"],
)
def test_a_pool_outside_the_private_ranges_is_refused(example_inventory: Path, pool: str) -> None:
    _edit(example_inventory / SETTINGS, "pool: 10.213.0.0/16", f"pool: {pool}")
    (problem,) = _problems(example_inventory)
    assert problem.startswith(f"inv/group_vars/all/macfleet.yml:7 macfleet_ipplan.pool: found '{pool}', expected a "
                              "private range")


@pytest.mark.parametrize("pool", ["10.0.0.0/8", "172.16.0.0/12", "192.168.64.0/20"])
def test_private_pools_are_accepted(example_inventory: Path, pool: str) -> None:
    _edit(example_inventory / SETTINGS, "pool: 10.213.0.0/16", f"pool: {pool}")
    assert str(load_inventory(example_inventory).settings.ipplan.pool) == pool


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("  gather_deadline_s: 60", "  gather_deadline_s: .inf", "macfleet_probes.gather_deadline_s: found inf"),
        ("  interval_s: 30", "  interval_s: .nan", "macfleet_probes.interval_s: found nan"),
        ("  connect_timeout_s: 10", "  connect_timeout_s: 1e12",
         "connect_timeout_s: found '1e12', expected less than or equal to 600"),
    ],
    ids=["inf", "nan", "huge"],
)
def test_numbers_are_finite_and_sane(example_inventory: Path, old: str, new: str, expected: str) -> None:
    _edit(example_inventory / SETTINGS, old, new)
    (problem,) = _problems(example_inventory)
    assert expected in problem


# --------------------------------------------------------------- ssh options that run a local command


def test_proxycommand_and_localcommand_are_warned_about_with_file_and_line(example_inventory: Path) -> None:
    _edit(example_inventory / HOSTS, "          ansible_user: admin\n",
          "          ansible_user: admin\n          ansible_ssh_extra_args: -o ProxyCommand='nc %h %p'\n")
    hv = example_inventory / "host_vars" / "studio-2"
    hv.mkdir(parents=True)
    (hv / "ssh.yml").write_text("# hand-written\nansible_ssh_common_args: -oPermitLocalCommand=yes -oLocalCommand=id\n")
    fleet = load_inventory(example_inventory)
    assert [str(w) for w in fleet.warnings] == [
        "inv/host_vars/studio-2/ssh.yml:2 ansible_ssh_common_args: found the ssh option PermitLocalCommand, which runs "
        "a command on this machine at every connection, expected ProxyJump for a jump host, unless you wrote this "
        "command yourself",
        "inv/hosts.yml:18 macfleet.children.mesh1.hosts.studio-2.ansible_ssh_extra_args: found the ssh option "
        "ProxyCommand, which runs a command on this machine at every connection, expected ProxyJump for a jump "
        "host, unless you wrote this command yourself",
    ]
    assert load_inventory(EXAMPLE_INVENTORY).warnings == ()


@pytest.mark.parametrize(("models_dir", "ok"), [
    ("~/.exo/models", True),  # inside the hidden ~/.exo
    ("/Volumes/Models/exo.noindex", True),
    ("/Volumes/Models.noindex/exo", True),
    ("/Volumes/Models/exo", False),  # Spotlight would index it: mdutil cannot switch a folder off
    ("~/models", False),
    ("models", False),
])
def test_the_models_directory_must_be_one_spotlight_skips(example_inventory: Path, models_dir: str, ok: bool) -> None:
    (example_inventory / "group_vars/all/zz.yml").write_text(f"macfleet_exo:\n  models_dir: {models_dir}\n")
    problems = _problems(example_inventory) if not ok else []
    if ok:
        load_inventory(example_inventory)
    else:
        (problem,) = problems
        assert "models_dir" in problem
        if models_dir != "models":
            assert "Spotlight" in problem and ".noindex" in problem


def _declare(inv: Path, models_yaml: str) -> None:
    (inv / "group_vars/all/zz.yml").write_text("macfleet_models:\n" + models_yaml)


def test_declared_models_are_read_with_their_placement(example_inventory: Path) -> None:
    _declare(example_inventory, "  - name: mlx-community/Llama-3.2-1B-Instruct-4bit\n"
                                "    place: {sharding: tensor, transport: ring, min_nodes: 2}\n"
                                "  - name: mlx-community/Kimi-K2-Instruct-4bit\n")
    mesh = load_inventory(example_inventory).meshes[0]
    (kept,) = mesh.settings.kept_placed
    assert (kept.name, kept.place.sharding, kept.place.transport, kept.place.min_nodes) == (
        "mlx-community/Llama-3.2-1B-Instruct-4bit", "tensor", "ring", 2)
    assert [m.name for m in mesh.settings.models][1] == "mlx-community/Kimi-K2-Instruct-4bit"


@pytest.mark.parametrize(("models_yaml", "expected"), [
    ("  - name: llama\n", "macfleet_models.0.name: found 'llama', expected a Hugging Face model id, ORG/NAME"),
    ("  - name: a/../b\n", "macfleet_models.0.name: found 'a/../b', expected a Hugging Face model id"),
    ("  - name: org/m\n    place: {sharding: expert}\n",
     "macfleet_models.0.place.sharding: found 'expert', expected 'pipeline' or 'tensor'"),
    ("  - name: org/m\n    place: {transport: tcp}\n",
     "macfleet_models.0.place.transport: found 'tcp', expected 'rdma' or 'ring'"),
    ("  - name: org/m\n    place: {over: rdma}\n", "macfleet_models.0.place.over: found unknown key `over`"),
    ("  - name: org/m\n    place: {min_nodes: 5}\n",
     "macfleet_models.0.place.min_nodes: found 5, expected at most the 4 Macs of mesh `mesh1`"),
    ("  - name: org/m\n  - name: org/m\n", "macfleet_models: found a list, expected each model once: org/m is "
                                          "listed more than once"),
    ("  - name: org/m\n  - name: org/M\n", "expected each model once: org/M, org/m is listed more than once"),
    ("  - name: org/m\n    place: {min_nodes: true}\n", "macfleet_models.0.place.min_nodes"),
    ("  - name: org/m\n    place: {bogus: 1}\n", "expected one of: min_nodes, sharding, transport"),
])
def test_a_bad_declared_model_is_named(example_inventory: Path, models_yaml: str, expected: str) -> None:
    _declare(example_inventory, models_yaml)
    problems = _problems(example_inventory)
    assert any(expected in p for p in problems), problems


def _keys(value: object) -> set[str]:
    if isinstance(value, dict):
        return {k for k in value if isinstance(k, str)} | {x for v in value.values() for x in _keys(v)}
    if isinstance(value, list):
        return {x for v in value for x in _keys(v)}
    return set()


def test_every_key_in_the_example_is_read_by_something() -> None:
    """Issue 30: `macfleet_exo.source` and `macfleet_models` sat in the example and nothing read them. Each key
    the example sets (host and group names aside) is named by product code or a playbook other than the model
    that declares it."""
    root = Path(__file__).resolve().parents[1]
    files = [EXAMPLE_INVENTORY / "hosts.yml", *sorted((EXAMPLE_INVENTORY / "group_vars").rglob("*.yml"))]
    keys = set().union(*(_keys(yaml.safe_load(f.read_text())) for f in files))
    fleet = load_inventory(EXAMPLE_INVENTORY)
    names = {n.name for m in fleet.meshes for n in m.nodes} | {m.name for m in fleet.meshes}
    readers = [p.read_text() for pattern in ("macfleet/**/*.py", "playbooks/**/*.yml", "playbooks/**/*.j2")
               for p in root.glob(pattern) if p.name != "model.py" and "lab" not in p.relative_to(root).parts]
    unread = sorted(k for k in keys - names if not any(re.search(rf"\b{re.escape(k)}\b", t) for t in readers))
    assert unread == [], f"keys in the example nothing reads: {unread}"
