"""The OpenSSH argv a transfer logs in with, derived from the same SshTarget paramiko uses (issue 26 item 2)."""

from __future__ import annotations

import shlex
from pathlib import Path

from macfleet.collect.ssh import Hop, SshTarget


def _target(**kw) -> SshTarget:
    base = dict(node="n1", host="10.0.0.9", port=2222, user="admin", key_files=(Path("/k/id"),),
                known_hosts=(Path("/inv dir/known_hosts"),), connect_timeout_s=7.5)
    return SshTarget(**{**base, **kw})


def _option(opts: tuple[str, ...], name: str) -> str | None:
    found = [o.split("=", 1)[1] for o in opts if o.startswith(name + "=")]
    return found[0] if found else None


def test_a_direct_login_has_its_keys_strict_known_hosts_and_no_config_file() -> None:
    t = _target()
    opts = t.openssh_options()
    assert opts[:2] == ("-F", "/dev/null") and "StrictHostKeyChecking=yes" in opts and "BatchMode=yes" in opts
    assert _option(opts, "UserKnownHostsFile") == '"/inv dir/known_hosts"'  # one path, its space kept
    assert opts[opts.index("-i"):opts.index("-i") + 2] == ("-i", "/k/id") and "IdentitiesOnly=yes" in opts
    assert opts[opts.index("-p") + 1] == "2222" and _option(opts, "ConnectTimeout") == "8"
    assert t.argv("true")[-3:] == ["-a", "admin@10.0.0.9", "true"] and t.argv("x", forward_agent=True)[-3] == "-A"
    assert _option(opts, "ProxyCommand") is None


def test_two_jump_hosts_nest_each_with_its_own_key_and_known_hosts() -> None:
    hops = (Hop(host="bastion", port=22, user="ops", key_files=(Path("/k/bastion%1"),)),
            Hop(host="inner", port=2200, user=None, known_hosts=(Path("/kh/inner"),)))
    opts = _target(jumps=hops).openssh_options()
    outer = _option(opts, "ProxyCommand")
    assert outer is not None and "%%" not in outer.replace("%%%%", "")  # the nested hop's % doubled twice
    words = shlex.split(outer.replace("%%", "%"))
    assert words[-3:] == ["-W", "10.0.0.9:2222", "inner"] and words[words.index("-p") + 1] == "2200"
    assert _option(tuple(words), "UserKnownHostsFile") == '/kh/inner "/inv dir/known_hosts"'
    assert words[words.index("-i") + 1] == "/k/id"  # the inner hop has no key of its own: the node's
    inner = shlex.split(_option(tuple(words), "ProxyCommand").replace("%%", "%"))
    assert inner[-3:] == ["-W", "inner:2200", "bastion"] and inner[inner.index("-l") + 1] == "ops"
    assert inner[inner.index("-i") + 1] == "/k/bastion%1" and "StrictHostKeyChecking=yes" in inner


def test_a_proxy_command_from_the_config_is_kept() -> None:
    opts = _target(proxy_command="nc -X 5 -x proxy:1080 10.0.0.9 2222").openssh_options()
    assert _option(opts, "ProxyCommand") == "nc -X 5 -x proxy:1080 10.0.0.9 2222"
