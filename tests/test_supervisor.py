"""Roles live and die with the process that started them, and one fleet runs per state dir.

Real processes: `wakeful worker all` and a Fleet owner are SIGKILLed, and their roles must be gone
soon after, having stopped cleanly; a second fleet on the same state dir is refused. An orphaned
role that ignores SIGTERM, and how replicas are named: tests/unit/test_supervisor_rules.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import psutil
import pytest
from helpers import kill_processes, process_alive, process_paused

from wakeful.consumers.kafka.supervisor import FLEET_LOCK, ROLES, members
from wakeful.core import process
from wakeful.core.errors import StackError
from wakeful.core.process import log_tail, wait_until
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet, leave_groups

START_S = 240.0  # six interpreters importing the Kafka clients, on a small shared machine
GONE_S = 60.0
# Above the longest chain of this file's own bounds: two fleets started one after the other, then
# the wait for their roles to go.
FLEETS_S = 2 * START_S + GONE_S
WORKER = [sys.executable, "-m", "wakeful.cli.main", "worker"]


@pytest.fixture(scope="module", autouse=True)
def supervised_members_leave(settings: Settings) -> Iterator[None]:
    """The roles `worker all` ran here (two of each at most), stopped, leave their groups once the
    file is done: as static members they would hold their partitions for their sessions, and the
    next test's fleet, under other identities, would wait for them."""
    yield
    leave_groups(settings, members(ROLES, dict.fromkeys(ROLES, 2)), os.environ)


def _events(log: Path, event: str) -> list[str]:
    """The role of each line that logged `event` (the relay announces its start as `relay.start`)."""
    names = {event, "relay.start"} if event == "role.start" else {event}
    roles = []
    for line in log.read_bytes().splitlines() if log.exists() else []:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:  # a line still being written, or not one of ours
            continue
        if isinstance(record, dict) and record.get("event") in names:
            roles.append(str(record.get("role")))
    return roles


def _lock_free(home: Path) -> bool:
    fd = process.hold_lock(home / FLEET_LOCK)
    if fd is not None:
        os.close(fd)
    return fd is not None


@contextmanager
def _worker_all(log: Path, *options: str) -> Iterator[tuple[subprocess.Popen[bytes], list[psutil.Process]]]:
    """`wakeful worker all` with its six roles up (each has logged its start), and its roles."""
    with log.open("ab") as out:
        sup = subprocess.Popen([*WORKER, "all", *options], stdout=out, stderr=out, stdin=subprocess.DEVNULL)
    roles: list[psutil.Process] = []
    try:
        up = wait_until(lambda: sorted(_events(log, "role.start")) == sorted(ROLES), START_S)
        assert up, f"worker all did not start its roles:\n{log_tail(log)}"
        roles = psutil.Process(sup.pid).children()
        assert sorted(r.cmdline()[-1] for r in roles) == sorted(ROLES)
        yield sup, roles
    finally:
        kill_processes([*roles, psutil.Process(sup.pid)] if sup.poll() is None else roles)
        sup.wait(30)


@pytest.mark.timeout(FLEETS_S)
def test_sigkilled_supervisor_takes_its_roles_with_it(
    settings: Settings, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker-all.log"
    with _worker_all(log) as (sup, roles):
        sup.kill()
        sup.wait(30)
        gone = wait_until(lambda: not any(process_alive(r) for r in roles), GONE_S)
        assert gone, f"roles outlived their supervisor: {[r.pid for r in roles if process_alive(r)]}"
        # SIGTERM, not SIGKILL: each finished its batch and logged its counters.
        assert sorted(_events(log, "role.stop")) == sorted(ROLES), log_tail(log)
        assert _lock_free(settings.home), "the lock file a killed supervisor left blocks the next fleet"


@pytest.mark.timeout(FLEETS_S)
def test_second_fleet_is_refused_while_one_runs(
    settings: Settings, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    with _worker_all(tmp_path / "first.log") as (first, roles):
        second = subprocess.run([*WORKER, "all"], capture_output=True, text=True, timeout=120, check=False)
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert f"pid {first.pid} " in lines[0] and f"`kill {first.pid}`" in lines[0], lines[0]
        assert "--allow-second" in lines[0], lines[0]
        # The demo, bench, chaos and the tests run their own fleets, and are refused the same way.
        with pytest.raises(StackError, match=f"pid {first.pid} .*`kill {first.pid}`"):
            Fleet(dict(os.environ), logs=tmp_path).start()
        assert all(process_alive(r) for r in roles), "a refused fleet disturbed the running one"
        # Told to, a second fleet starts beside the first.
        with _worker_all(tmp_path / "second.log", "--allow-second") as (beside, _):
            beside.send_signal(signal.SIGTERM)
            assert beside.wait(60) == 0
        first.send_signal(signal.SIGTERM)
        assert first.wait(60) == 0
        assert not any(process_alive(r) for r in roles)


# Owns a fleet of three roles; restarts one from a thread that then ends (as chaos does) and one from
# the main thread; prints the roles' pids, then waits to be killed.
FLEET_OWNER = """
import os, sys, threading
from pathlib import Path
import orjson
from wakeful.devstack.fleet import Fleet, leave_groups
from wakeful.core.process import wait_until

logs = Path(sys.argv[1])
fleet = Fleet(dict(os.environ), roles=("executor", "timer", "relay"), logs=logs).start()

def starts(role):
    return sum(b'.start"' in line for line in (logs / f"{role}.log").read_bytes().splitlines())

assert wait_until(lambda: all(starts(r) == 1 for r in fleet.roles), float(sys.argv[2]))

def restart_relay():
    fleet.kill("relay")
    fleet.start_role("relay")
    assert wait_until(lambda: starts("relay") == 2, float(sys.argv[2]))

thread = threading.Thread(target=restart_relay)
thread.start()
thread.join()
fleet.restart("timer")
assert wait_until(lambda: all(starts(r) == 2 for r in ("timer", "relay")) and starts("executor") == 1,
                  float(sys.argv[2]))
print(orjson.dumps({role: proc.pid for role, proc in fleet.procs.items()}).decode(), flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(FLEETS_S)
def test_fleet_roles_die_with_their_sigkilled_owner(
    settings: Settings, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", FLEET_OWNER, str(tmp_path), str(START_S)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    roles: dict[str, psutil.Process] = {}
    try:
        assert owner.stdout is not None
        line = owner.stdout.readline()  # the owner waits for its roles with its own deadline
        assert line, f"the fleet did not start:\n{log_tail(tmp_path / 'executor.log')}"
        roles = {role: psutil.Process(pid) for role, pid in orjson.loads(line).items()}
        # Restarted from a thread that has ended since, the relay still runs.
        assert process_alive(roles["relay"]) and _events(tmp_path / "relay.log", "role.stop") == []
        lock_was_free = _lock_free(settings.home)  # while it ran, `worker all` would have been refused
        # A role left paused, as the `:stop` fault point leaves it, must go too: paused once all
        # its threads have stopped, as the kernel continues an orphaned group only then.
        roles["executor"].send_signal(signal.SIGSTOP)
        assert wait_until(lambda: process_paused(roles["executor"].pid), 30)
        owner.kill()
        owner.wait(30)
        gone = wait_until(lambda: not any(process_alive(r) for r in roles.values()), GONE_S)
        left = [r for r, p in roles.items() if process_alive(p)]
        assert gone, f"roles outlived their fleet's owner: {left}\n" + "\n".join(
            f"{r} ({_state(roles[r])}):\n{log_tail(tmp_path / f'{r}.log', 15)}" for r in left
        )
        assert _events(tmp_path / "timer.log", "role.stop") == ["timer", "timer"]  # restarted, then stopped
        assert _events(tmp_path / "relay.log", "role.stop") == ["relay"]  # the first one was SIGKILLed
        assert not lock_was_free, "the fleet did not hold the state dir's fleet lock"
    finally:
        kill_processes(
            [*roles.values(), psutil.Process(owner.pid)] if owner.poll() is None else list(roles.values())
        )
        owner.wait(30)
        # The owner died without stopping its fleet: the roles it ran leave their groups here.
        Fleet(dict(os.environ), roles=("executor", "timer", "relay"), logs=tmp_path).leave_groups()


def _state(proc: psutil.Process) -> str:
    """A process's state for a failure message (running, sleeping, stopped ...), or "gone"."""
    try:
        return str(proc.status())
    except psutil.Error:
        return "gone"


@pytest.mark.timeout(FLEETS_S)
def test_replicas_of_a_role_share_its_group_under_identities_of_their_own(
    settings: Settings, kafka_bootstrap: str, redis_url: str, tmp_path: Path
) -> None:
    from confluent_kafka.admin import AdminClient

    from wakeful.core import kafka_auth
    from wakeful.core.log import librdkafka_config

    log = tmp_path / "replicas.log"
    with log.open("ab") as out:
        sup = subprocess.Popen(
            [*WORKER, "executor", "--replicas", "2"], stdout=out, stderr=out, stdin=subprocess.DEVNULL
        )
    admin = AdminClient(kafka_auth.client_config(settings, kafka_auth.ADMIN) | librdkafka_config())

    def group() -> list[tuple[str, int]]:
        (described,) = admin.describe_consumer_groups(["wakeful-executor"]).values()
        members = described.result(timeout=10).members
        return sorted((m.group_instance_id or "", len(m.assignment.topic_partitions)) for m in members)

    last: list[tuple[str, int]] = []

    def shared() -> bool:
        """One reading of the group: the two processes, and no one else, hold three partitions each
        (a member of an earlier process that did not leave keeps its partitions for its session)."""
        last[:] = group()
        return [n for _, n in last] == [3, 3] and all("-supervised" in i for i, _ in last)

    try:
        assert wait_until(lambda: _events(log, "role.start") == ["executor", "executor"], START_S), log_tail(
            log
        )
        # Both in the group, neither fencing the other: each holds its share of the partitions.
        assert wait_until(shared, START_S), (last, log_tail(log))
        ids = [i for i, _ in last]
        assert len(set(ids)) == 2 and all(ids), ids
    finally:
        sup.send_signal(signal.SIGTERM)
        sup.wait(60)
    assert sorted(_events(log, "role.stop")) == ["executor", "executor"], log_tail(log)
