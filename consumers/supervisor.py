"""`wakeful worker all`: one process per role, restarted when it dies.

A `--fault POINT` goes to the role that owns the point (its name before the dot), on that role's
first start only: the process kills itself there once, and its restart runs clean.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from wakeful.core.faults import role_of
from wakeful.core.log import Log

# Every consumer role, one module each in consumers/; `wakeful worker all` runs one of each.
ROLES = ("inbound", "gate", "proposer", "executor", "timer", "relay")
RESTART_DELAY_S = 0.5


def spawn(role: str, fault_points: Sequence[str]) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "wakeful.cli.main", "worker", role]
    if fault_points:
        argv += ["--fault", ",".join(fault_points)]
    # A stable identity per host and role: a restarted role resumes its partitions at once.
    env = {"WAKEFUL_INSTANCE_ID": f"{socket.gethostname()}-supervised", **os.environ}
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env)


def supervise(roles: Sequence[str], fault_points: Sequence[str], stop: threading.Event) -> int:
    log = Log(role="supervisor")
    pending = {r: [p for p in fault_points if role_of(p) == r] for r in roles}
    procs = {r: spawn(r, pending.pop(r)) for r in roles}
    restarts = 0
    log("supervisor.start", roles=list(roles), pids={r: p.pid for r, p in procs.items()})
    while not stop.is_set():
        for role, proc in list(procs.items()):
            code = proc.poll()
            if code is None:
                continue
            restarts += 1
            log("supervisor.restart", role=role, exit_code=code)
            time.sleep(RESTART_DELAY_S)
            procs[role] = spawn(role, [])
        stop.wait(0.2)
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log("supervisor.stop", restarts=restarts)
    return 0
