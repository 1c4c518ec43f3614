"""A fleet of worker processes, one per role, that tests, the demo, the bench and chaos control:
start a role (optionally with a fault point armed), kill it with SIGKILL, pause it with SIGSTOP,
restart it, stop everything, and read each role's peak memory, CPU time and stop counters.

A started fleet holds the state dir's fleet lock, like `wakeful worker all`: it refuses to start
beside a running one (they would split the consumer groups' partitions), and a `worker all` started
while it runs is refused. Its roles stop when the process that owns it dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import psutil
from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient

from wakeful.consumers.kafka.consuming import CLASSIC_SESSION_S, static_id
from wakeful.consumers.kafka.supervisor import (
    METRICS_HOST_ENV,
    METRICS_PORT_ENV,
    ROLES,
    claim_fleet,
    instance_id,
    members,
    role_of_member,
    spawn,
)
from wakeful.core import kafka_auth
from wakeful.core.kafka_rights import ADMIN, RIGHTS
from wakeful.core.log import librdkafka_config
from wakeful.core.metrics_pure import ports
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.operate.catalog import publish_and_journal

LEAVE_TIMEOUT_MS = 5_000  # for the admin's call that takes a stopped fleet out of its groups


class Fleet:
    """Processes are named as `worker all --replicas` names them: a role's first by the role
    (`gate`), its k-th `gate#k`. Every method that takes a name takes any member's."""

    def __init__(
        self,
        env: dict[str, str],
        roles: Iterable[str] = ROLES,
        logs: Path | None = None,
        replicas: Mapping[str, int] | None = None,
        *,
        restart_failed: bool = False,
    ) -> None:
        self.env = {"WAKEFUL_INSTANCE_ID": "fleet", **env}
        # As `wakeful worker all` does: a role that gave up (exited with an error, such as a Kafka
        # client that would not close, which asks for a restart) is started again. Never one that a
        # signal ended (a kill or a crash point) or that stopped cleanly: tests do those on purpose.
        self.restart_failed = restart_failed
        self.restarted: list[tuple[str, int]] = []  # (member, exit code), in order
        self.roles = tuple(roles)
        self.members = tuple(members(self.roles, replicas))
        self.dir = logs or Path(tempfile.mkdtemp(prefix="wakeful-fleet-"))
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.peak: dict[str, int] = dict.fromkeys(self.members, 0)
        self.cpu: dict[str, float] = dict.fromkeys(self.members, 0.0)
        self.starts: dict[str, int] = dict.fromkeys(self.members, 0)
        self._done = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._lock: int | None = None

    def start(self) -> Fleet:
        settings = Settings.from_env(self.env)
        self._lock = claim_fleet(settings.home)
        if settings.kafka_group_protocol == "consumer":
            wait_for_classic_members_to_go(settings, CLASSIC_SESSION_S + 15)
        publish_and_journal(settings)  # as `worker all` does, before its roles (D102)
        for member in self.members:
            self.start_role(member)
        self._sampler.start()
        return self

    def start_role(self, role: str, fault: str | None = None) -> subprocess.Popen[bytes]:
        self.starts[role] += 1
        with (self.dir / f"{role}.log").open("ab") as log:
            # Its own process group, so a role left paused (SIGSTOP) also ends when the owner dies.
            proc = spawn(
                role,
                [fault] if fault else [],
                env=self.env,
                output=log,
                own_group=True,
                metrics_at=self.metrics_at(role),
            )
        self.procs[role] = proc
        return proc

    def metrics_at(self, member: str) -> tuple[str, int] | None:
        """Where a member serves its metrics: with WAKEFUL_METRICS_PORT in the fleet's environment,
        its own port, as `worker all` gives them (supervisor.metrics_at); else nowhere."""
        base = self.env.get(METRICS_PORT_ENV)
        if not base:
            return None
        return self.env.get(METRICS_HOST_ENV, "127.0.0.1"), ports(self.members, int(base))[member]

    def kill(self, role: str) -> None:
        proc = self.procs[role]
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)

    def stop_role(self, role: str) -> None:
        proc = self.procs.get(role)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # a paused process cannot act on SIGTERM
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def restart(self, role: str, fault: str | None = None) -> subprocess.Popen[bytes]:
        self.stop_role(role)
        return self.start_role(role, fault)

    def add_member(self, role: str) -> str:
        """Start one more process of `role`, named as `--replicas` names it (`gate#3` after
        `gate#2`): it joins the role's consumer group while the others run."""
        name = members([role], {role: len(self.members_of(role)) + 1})[-1]
        self.members += (name,)
        self.peak[name], self.cpu[name], self.starts[name] = 0, 0.0, 0
        self.start_role(name)
        return name

    def members_of(self, role: str) -> list[str]:
        """The names of a role's processes: `gate`, `gate#2`, ..."""
        return [m for m in self.members if role_of_member(m) == role]

    def alive(self, role: str) -> bool:
        return self.procs[role].poll() is None

    def stop(self) -> dict[str, dict[str, Any]]:
        """Stop every role; returns each role's last `role.stop` counters."""
        self._done.set()
        for role in self.procs:
            proc = self.procs[role]
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.procs:
            self.leave_groups()
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        return self.counters()

    def leave_groups(self) -> None:
        """Take the members, all stopped, out of their groups (leave_groups below), so that the
        next fleet need not wait for them: stop() does, and so may whoever saw a fleet's owner die
        without stopping it."""
        leave_groups(Settings.from_env(self.env), self.members, self.env)

    def wait_started(self, timeout: float) -> list[str]:
        """Wait until every process has logged its start (a slow machine may take a while to import
        the Kafka clients); returns the members that have not by then."""

        def missing() -> list[str]:
            return [m for m in self.members if not _logged_start(self.dir / f"{m}.log")]

        wait_until(lambda: not missing(), timeout, interval=0.2)
        return missing()

    def peak_by_role(self) -> dict[str, int]:
        """The largest peak RSS among each role's processes."""
        return {r: max(b for m, b in self.peak.items() if role_of_member(m) == r) for r in self.roles}

    def counters(self) -> dict[str, dict[str, Any]]:
        stats: dict[str, dict[str, Any]] = {}
        for role in self.members:
            path = self.dir / f"{role}.log"
            for line in path.read_bytes().splitlines() if path.exists() else []:
                if b'"role.stop"' in line:
                    stats[role] = orjson.loads(line)
        return stats

    def cpu_now(self) -> dict[str, float]:
        """Each member's CPU seconds read now (a dead one's up to its last sample): the bench takes
        it when the first task is published and when the last effect lands, so what the roles
        spend starting, importing and warming up is not charged to the tasks."""
        self._read()
        return dict(self.cpu)

    def _sample(self) -> None:
        while not self._done.wait(0.1):
            self._read()
            if self.restart_failed:
                self._restart_failed()

    def _restart_failed(self) -> None:
        for member, proc in list(self.procs.items()):
            code = proc.poll()
            if gave_up(code) and not self._done.is_set():
                assert code is not None
                self.restarted.append((member, code))
                logging.getLogger(__name__).warning(
                    "fleet: %s exited with %s; started again, as its supervisor would", member, code
                )
                self.start_role(member)

    def _read(self) -> None:
        for role, proc in list(self.procs.items()):
            try:
                p = psutil.Process(proc.pid)
                self.peak[role] = max(self.peak[role], p.memory_info().rss)
                # with the processes it started (the executor's minter, D120): their CPU is its work
                spent = [p.cpu_times(), *(c.cpu_times() for c in p.children(recursive=True))]
                self.cpu[role] = sum(t.user + t.system for t in spent)
            except psutil.NoSuchProcess:
                continue


def gave_up(code: int | None) -> bool:
    """Whether a role's exit code says it gave up and asks to be started again: an error exit.
    Not a signal's (a kill, a crash point: negative), not a clean stop (0), not one still running."""
    return code is not None and code > 0


def wait_for_classic_members_to_go(settings: Settings, timeout: float) -> None:
    """Before members of the consumer protocol (KIP-848) join the roles' groups: a classic group
    that still has members (a static one stays for its session after it stops) is not upgraded
    while they hold cooperative-sticky's assignor data, and the broker's refusal is fatal to a
    joining consumer. Waits until none has (docs/decisions.md D41), or gives up after `timeout`."""
    groups = [g for rights in RIGHTS.values() for g in rights.groups]
    admin = AdminClient(kafka_auth.client_config(settings, ADMIN) | librdkafka_config())

    def classic_members_gone() -> bool:
        found = admin.describe_consumer_groups(groups, request_timeout=10)
        described = [future.result() for future in found.values()]
        return not any(d.type == ConsumerGroupType.CLASSIC and d.members for d in described)

    wait_until(classic_members_gone, timeout, interval=1.0)


def leave_groups(settings: Settings, stopped: Iterable[str], env: Mapping[str, str]) -> None:
    """Take members that have stopped (`gate`, `gate#2`, as spawn() started them with `env`) out of
    their roles' groups, as the admin. A static member does not leave when it stops (KIP-345): its
    group would keep its partitions for its session, and whatever joins next under another identity
    (a fleet with fewer replicas, `worker all`, a member of the consumer protocol) would wait up to
    CLASSIC_SESSION_S for them. Best effort: with the broker away, or a kafka-python without the
    call (before 3.0), they stay until their sessions end, as they would have anyway."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        from kafka.admin import MemberToRemove
    except ImportError:
        return
    if settings.kafka_group_protocol != "classic":
        return  # KIP-848 members have no static identity: each left its group as it closed
    by_group: dict[str, list[Any]] = {}
    for member in stopped:
        for group in RIGHTS[role_of_member(member)].groups:
            static = static_id(instance_id(member, env), group)
            by_group.setdefault(group, []).append(MemberToRemove(group_instance_id=static))
    if not by_group:
        return
    with _quiet_logins(), contextlib.suppress(KafkaError):
        admin = KafkaAdminClient(
            **kafka_auth.kafka_python_config(settings, ADMIN),
            request_timeout_ms=LEAVE_TIMEOUT_MS,
            bootstrap_timeout_ms=LEAVE_TIMEOUT_MS,
        )
        with contextlib.closing(admin):
            for group, static_members in by_group.items():
                # One that never joined, or whose session already ended, is an error for that
                # member alone in the answer: there was nothing to remove.
                admin.remove_group_members(group, static_members)


@contextlib.contextmanager
def _quiet_logins() -> Iterator[None]:
    """kafka-python warns at each login over a plaintext listener (the local stack's): after every
    fleet's stop, in the demo's or the bench's output, that is noise. Its other warnings stay."""
    scram = logging.getLogger("kafka.net.sasl.scram")
    level = scram.level
    scram.setLevel(logging.ERROR)
    try:
        yield
    finally:
        scram.setLevel(level)


def _logged_start(log: Path) -> bool:
    text = log.read_bytes() if log.exists() else b""
    return b'"role.start"' in text or b'"relay.start"' in text
