"""`wakeful worker all [--replicas N]`: N processes per role (one by default), each restarted when
it dies, and all gone when the supervisor goes. A role's processes share its consumer group, so the
broker spreads the role's partitions among them.

A `--fault POINT` goes to the role that owns the point (its name before the dot), on that role's
first start only: the process kills itself there once, and its restart runs clean.

Every role started by spawn() (here, and by devstack/fleet.py for the demo, bench, chaos and tests)
stops when the process that started it dies, even by SIGKILL: it gets SIGTERM, so it finishes its
batch and stores its offsets, and if it has not exited STOP_GRACE_S later the kernel ends it.
One whole fleet runs per state dir: a second one would split the consumer groups' partitions.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from wakeful.core import metrics, process
from wakeful.core.errors import ConfigError, StackError
from wakeful.core.faults import role_of
from wakeful.core.log import Log
from wakeful.core.metrics_pure import ports

# Every consumer role, one module each in consumers/; `wakeful worker all` runs one of each.
ROLES = ("inbound", "gate", "proposer", "executor", "timer", "relay")
RESTART_DELAY_S = 0.5
STOP_GRACE_S = 20  # a role asked to stop has this long to finish its batch before it is killed
PARENT_PID_ENV = "WAKEFUL_PARENT_PID"  # set by spawn(): the role stops when this process dies
PARENT_POLL_S = 1.0
FLEET_LOCK = "workers.lock"  # under the state dir; held by the process that runs a whole fleet
PR_SET_PDEATHSIG = 1  # linux/prctl.h
REPLICA_SEP = "#"  # gate#2: the second process of the gate role
INGRESS = "ingress"  # the member that runs the HTTP door (`worker all --ingress-port N`)
MAX_REPLICAS = 64
# A process's metrics port and address (`worker --metrics-port/--metrics-host`): a supervisor gives
# each process its own port, from the one it was given, in members() order (docs/metrics.md).
METRICS_PORT_ENV = "WAKEFUL_METRICS_PORT"
METRICS_HOST_ENV = "WAKEFUL_METRICS_HOST"
# The door's own: a shell that exported a role's metrics port must not bind the door to it.
INGRESS_METRICS_PORT_ENV = "WAKEFUL_INGRESS_METRICS_PORT"
INGRESS_METRICS_HOST_ENV = "WAKEFUL_INGRESS_METRICS_HOST"
_METRICS_ENV = (METRICS_PORT_ENV, METRICS_HOST_ENV, INGRESS_METRICS_PORT_ENV, INGRESS_METRICS_HOST_ENV)

# Linux sends the parent-death signal when the *thread* that forked the child ends, not the process.
# Forking every role from this one thread, which lives as long as the process, keeps a role started
# from a short-lived thread (chaos restarts roles from one) from being stopped when that thread ends.
_forker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wakeful-spawn")


def parse_replicas(text: str | None, roles: Sequence[str], partitions: int) -> dict[str, int]:
    """Processes per role from `--replicas`: `N` for every role, or `gate=3,executor=2` (the others
    1). More processes than a topic has partitions would sit idle, so that is refused too."""
    counts = dict.fromkeys(roles, 1)
    if not text:
        return counts
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) == 1 and "=" not in parts[0]:
        parts = [f"{role}={parts[0]}" for role in roles]
    for part in parts:
        role, _, number = part.partition("=")
        if role not in counts:
            raise ValueError(f"{part!r}: no role {role!r} runs here; roles are {', '.join(roles)}")
        if not number.isdigit() or not 1 <= int(number) <= MAX_REPLICAS:
            raise ValueError(f"{part!r}: give a whole number of processes from 1 to {MAX_REPLICAS}")
        if int(number) > partitions:
            raise ValueError(
                f"{part!r}: each topic has {partitions} partitions, so processes past {partitions} "
                "would sit idle; use fewer, or raise WAKEFUL_PARTITIONS before the topics are made"
            )
        counts[role] = int(number)
    return counts


def members(roles: Sequence[str], replicas: Mapping[str, int] | None = None) -> list[str]:
    """One name per process, replicas[role] of each (1 where unsaid): a role's first process is
    named by the role, its k-th `role#k`."""
    counts = replicas or {}
    return [
        role if k == 1 else f"{role}{REPLICA_SEP}{k}"
        for role in roles
        for k in range(1, counts.get(role, 1) + 1)
    ]


def supervised(roles: Sequence[str], replicas: Mapping[str, int] | None, door: bool) -> list[str]:
    """Every process a supervisor runs, in metrics port order: the roles' (members()), then the
    HTTP door's when it runs (`--ingress-port`), so the door never moves a role's port."""
    return members(roles, replicas) + ([INGRESS] if door else [])


def role_of_member(name: str) -> str:
    return name.partition(REPLICA_SEP)[0]


def instance_id(member: str, env: Mapping[str, str]) -> str:
    """The WAKEFUL_INSTANCE_ID spawn() gives a member's process (`env`: the one it is started with).

    A stable identity per host, role and replica: a restarted process resumes its partitions at
    once, and two processes of one role never share an identity (the broker would fence one)."""
    replica = member.partition(REPLICA_SEP)[2]
    base = env.get("WAKEFUL_INSTANCE_ID", f"{socket.gethostname()}-supervised")
    return f"{base}-{replica}" if replica else base


def command(member: str, fault_points: Sequence[str], ingress_port: int | None = None) -> list[str]:
    """The command line of a member's process: `wakeful worker ROLE`, or for the member `ingress`
    (`worker all --ingress-port N`) the HTTP door, `wakeful ingress --port N`."""
    if member == INGRESS:
        if ingress_port is None:
            raise ValueError("the ingress member needs its port")
        return [sys.executable, "-m", "wakeful.cli.main", "ingress", "--port", str(ingress_port)]
    argv = [sys.executable, "-m", "wakeful.cli.main", "worker", role_of_member(member)]
    if fault_points:
        argv += ["--fault", ",".join(fault_points)]
    return argv


def spawn(
    member: str,
    fault_points: Sequence[str],
    env: Mapping[str, str] | None = None,
    output: IO[bytes] | None = None,
    own_group: bool = False,
    *,
    ingress_port: int | None = None,
    metrics_at: tuple[str, int] | None = None,
) -> subprocess.Popen[bytes]:
    """Start `wakeful worker ROLE` for a member (`gate`, `gate#2`) as a child that stops when this
    process dies (stop_with_parent).

    own_group puts it in a process group of its own: if this process dies while the role is paused
    (SIGSTOP), the kernel hangs up and continues the orphaned group, so the paused role ends too.
    The kernel does so only if every thread of the role has stopped when this process dies: a role
    still on its way into the pause at that moment stays paused, and `kill -CONT PID` ends it.
    metrics_at: the (host, port) it serves its metrics on; without it, it serves none, whatever the
    environment says (one port would otherwise be claimed by every process started).
    """
    argv = command(member, fault_points, ingress_port)
    parent = os.environ if env is None else env
    child_env = {
        **{k: v for k, v in parent.items() if k not in _METRICS_ENV},
        "WAKEFUL_INSTANCE_ID": instance_id(member, parent),
        PARENT_PID_ENV: str(os.getpid()),
    }
    if metrics_at is not None:
        host, port = (
            (INGRESS_METRICS_HOST_ENV, INGRESS_METRICS_PORT_ENV)
            if member == INGRESS
            else (METRICS_HOST_ENV, METRICS_PORT_ENV)
        )
        child_env |= {host: metrics_at[0], port: str(metrics_at[1])}
    return _forker.submit(
        subprocess.Popen,
        argv,
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=output,
        env=child_env,
        process_group=0 if own_group else None,
    ).result()


def metrics_at(names: Sequence[str], metrics_from: tuple[str, int] | None) -> dict[str, tuple[str, int]]:
    """Where each process serves its metrics: (host, first port) gives the first process that port
    and each next one the next port (ports()); every port is checked free first, so a taken one
    stops the supervisor at start, named, not a role restarted for ever. None: no metrics."""
    if metrics_from is None:
        return {}
    host, base = metrics_from
    try:
        chosen = ports(names, base)
    except ValueError as exc:
        raise ConfigError("--metrics-port (WAKEFUL_METRICS_PORT)", str(exc)) from exc
    for member, port in chosen.items():
        metrics.check_free(host, port, member)
    return {m: (host, p) for m, p in chosen.items()}


def spawned() -> bool:
    """Whether spawn() started this process (a supervisor or a fleet is its parent)."""
    return bool(os.environ.get(PARENT_PID_ENV))


def stop_with_parent() -> None:
    """In a role that spawn() started: SIGTERM this process when its parent dies, however it dies,
    and end it STOP_GRACE_S later if it has not stopped by then. A no-op in a role started by hand."""
    raw = os.environ.get(PARENT_PID_ENV)
    if not raw:
        return
    parent = int(raw)
    if sys.platform == "linux":  # at once, from the kernel; the watcher below is the portable net
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    # The parent may have died before the signal was set: the watcher's first look sees that.
    threading.Thread(target=_watch_parent, args=(parent,), name="parent-watch", daemon=True).start()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    # SIGALRM's default action ends the process in the kernel, even if no Python code can run.
    signal.alarm(STOP_GRACE_S)
    os.kill(os.getpid(), signal.SIGTERM)


def claim_fleet(home: Path) -> int:
    """Hold the state dir's fleet lock until this process exits or closes the descriptor returned;
    refuse, naming the process that holds it, if a fleet already runs here."""
    fd = process.hold_lock(home / FLEET_LOCK)
    if fd is None:
        raise fleet_running(home)
    return fd


def fleet_running(home: Path, hint: str = "") -> StackError:
    """The one-line refusal: who runs the fleet here and how to stop it (plus hint)."""
    pid = process.lock_holder(home / FLEET_LOCK)
    if pid is None:  # the holder has not written its pid yet
        return StackError("workers", f"another process already runs a fleet on {home}; stop it first{hint}")
    return StackError(
        "workers",
        f"pid {pid} ({process.describe(pid)}) already runs a fleet on {home}; "
        f"stop it first with `kill {pid}` (its roles stop with it){hint}",
    )


def supervise(
    roles: Sequence[str],
    fault_points: Sequence[str],
    stop: threading.Event,
    home: Path | None = None,
    allow_second: bool = False,
    *,
    replicas: Mapping[str, int] | None = None,
    ingress_port: int | None = None,
    metrics: tuple[str, int] | None = None,
) -> int:
    """Run roles, replicas[role] processes each (default 1), until stop is set; with home, a whole
    fleet holds that state dir's fleet lock. Fault points go to each role's first process. With an
    ingress_port, the HTTP door runs beside them, supervised the same way. metrics: (host, first
    port): each role process, and the door last, serves its metrics on its own port (metrics_at);
    the door's metrics are never on the door's port."""
    lock = None
    if home is not None and set(roles) == set(ROLES):
        lock = process.hold_lock(home / FLEET_LOCK)
        if lock is None and not allow_second:
            raise fleet_running(home, ", or pass --allow-second to run another in the same consumer groups")
    log = Log(role="supervisor")
    pending = {r: [p for p in fault_points if role_of(p) == r] for r in roles}
    names = supervised(roles, replicas, ingress_port is not None)
    at = metrics_at(names, metrics)  # the door's, if it runs, on the port after the last role's
    if at:
        log("supervisor.metrics", urls={m: f"http://{h}:{p}/metrics" for m, (h, p) in at.items()})
    procs = {m: spawn(m, pending.pop(m, []), ingress_port=ingress_port, metrics_at=at.get(m)) for m in names}
    restarts = 0
    pids = {r: p.pid for r, p in procs.items()}
    log("supervisor.start", roles=list(roles), members=names, pids=pids, fleet_lock=lock is not None)
    while not stop.is_set():
        for role, proc in list(procs.items()):
            code = proc.poll()
            if code is None:
                continue
            restarts += 1
            log("supervisor.restart", role=role_of_member(role), member=role, exit_code=code)
            time.sleep(RESTART_DELAY_S)
            procs[role] = spawn(role, [], ingress_port=ingress_port, metrics_at=at.get(role))
        stop.wait(0.2)
    for proc in procs.values():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log("supervisor.stop", restarts=restarts)
    if lock is not None:
        os.close(lock)
    return 0
