"""The private agent's keeper, run as a script by the controller's Python (`sys.executable -I <this file> SOCK
LIFETIME`, transfer.private_agent): it starts `ssh-agent -D` as its child and ends it, and removes the agent's
directory, as soon as its stdin reaches EOF. Its stdin is a pipe whose only writer is the push's process, so EOF
comes when the push ends and also when it is killed in any way (kill -9 included: the kernel closes the dead
process's descriptors). PR_SET_PDEATHSIG would do on Linux only (and fires when the forking *thread* ends);
`ssh-agent -t` alone leaves the agent running. The keeper runs in a session of its own, so a Ctrl-C at the
terminal reaches the push, which then ends it in order. Standard library only: it imports nothing of macfleet."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def keep(sock: str, lifetime: str) -> None:
    agent = subprocess.Popen(["ssh-agent", "-D", "-t", lifetime, "-a", sock], stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        print(agent.pid, flush=True)
        sys.stdin.buffer.read()
    finally:
        agent.terminate()
        try:
            agent.wait(5)
        except subprocess.TimeoutExpired:
            agent.kill()
            agent.wait()
        shutil.rmtree(os.path.dirname(sock), ignore_errors=True)


if __name__ == "__main__":
    keep(sys.argv[1], sys.argv[2])
