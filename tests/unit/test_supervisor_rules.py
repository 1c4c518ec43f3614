"""The supervisor's rules without a stack: how many processes each role runs and what they are
called, and a role whose parent is gone ends even when it ignores SIGTERM (a stand-in role and
parent, real processes). Fleets on the real stack: tests/test_supervisor.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers import kill_processes, process_alive

from wakeful.consumers.kafka import supervisor
from wakeful.core.process import wait_until

GONE_S = 60.0


# A role too stuck to act on SIGTERM: it ignores it. Started the way spawn() starts a role.
STUCK_ROLE = """
import signal, sys, time
from pathlib import Path
from wakeful.consumers.kafka import supervisor

supervisor.STOP_GRACE_S = 2
signal.signal(signal.SIGTERM, signal.SIG_IGN)
supervisor.stop_with_parent()
Path(sys.argv[1]).write_text("watching")
while True:
    time.sleep(60)
"""
STUCK_PARENT = """
import os, subprocess, sys
env = {**os.environ, sys.argv[1]: str(os.getpid())}
child = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[3]], env=env)
print(child.pid, flush=True)
sys.stdin.read()
"""


def test_orphaned_role_that_ignores_sigterm_is_ended_after_the_grace(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    argv = [sys.executable, "-c", STUCK_PARENT, supervisor.PARENT_PID_ENV, STUCK_ROLE, str(ready)]
    parent = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert parent.stdout is not None
    child = psutil.Process(int(parent.stdout.readline()))
    try:
        assert wait_until(ready.exists, 60), "the stuck role never started watching its parent"
        parent.kill()
        parent.wait(30)
        assert wait_until(lambda: not process_alive(child), GONE_S), "an orphan that ignores SIGTERM lingers"
    finally:
        kill_processes([child, psutil.Process(parent.pid)] if parent.poll() is None else [child])
        parent.wait(30)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, {"gate": 1, "executor": 1, "timer": 1}),
        ("3", {"gate": 3, "executor": 3, "timer": 3}),
        ("gate=3,executor=2", {"gate": 3, "executor": 2, "timer": 1}),
        (" gate=2 , ", {"gate": 2, "executor": 1, "timer": 1}),
    ],
)
def test_replicas_name_processes_per_role_and_leave_the_others_at_one(
    text: str | None, expected: dict[str, int]
) -> None:
    assert supervisor.parse_replicas(text, ("gate", "executor", "timer"), partitions=6) == expected


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("bank=2", "no role 'bank' runs here"),
        ("gate=0", "from 1 to 64"),
        ("gate=two", "from 1 to 64"),
        ("gate=7", "each topic has 6 partitions"),
    ],
)
def test_replicas_that_cannot_run_are_refused_saying_why(text: str, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        supervisor.parse_replicas(text, ("gate", "executor", "timer"), partitions=6)


def test_a_roles_first_process_keeps_the_roles_name_and_the_others_are_numbered() -> None:
    names = supervisor.members(("gate", "timer"), {"gate": 3})
    assert names == ["gate", "gate#2", "gate#3", "timer"]
    assert {supervisor.role_of_member(n) for n in names} == {"gate", "timer"}


def test_worker_all_with_an_ingress_port_runs_the_http_door_as_a_member_of_its_own() -> None:
    from wakeful.consumers.kafka.supervisor import INGRESS, command

    assert command(INGRESS, [], 18080)[-3:] == ["ingress", "--port", "18080"]
    assert command("gate#2", ["gate.after_consume"])[-3:] == ["gate", "--fault", "gate.after_consume"]
    assert command("gate#2", [])[-2:] == ["worker", "gate"]
    with pytest.raises(ValueError, match="port"):
        command(INGRESS, [])
