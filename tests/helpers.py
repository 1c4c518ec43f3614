"""Plain helpers shared by tests (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import functools
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import confluent_kafka
import httpx
import orjson
import psutil
import redis
from confluent_kafka import Consumer, Message, TopicPartition

from wakeful.core import kafka_auth
from wakeful.core.log import Log
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.core.topics import WAKE
from wakeful.examples.bank import Bank
from wakeful.examples.refund import Stage
from wakeful.examples.refund import app as refund_app
from wakeful.operate.client import Client
from wakeful.schemas.checkpoint import BusinessState, Checkpoint, SecurityScope, VersionStamps
from wakeful.schemas.logs import UNDO_PREFIX


def new_checkpoint(task_id: str | None = None, amount: int = 100, stage: str = Stage.RECEIVED) -> Checkpoint:
    """A fresh refund checkpoint as the gate would create it."""
    return Checkpoint(
        task_id=task_id or f"t-{uuid.uuid4().hex[:12]}",
        business=BusinessState(stage=stage, data={"amount": amount, "currency": "EUR"}),
        security=SecurityScope(tenant="acme", principal_ref="principal:alice"),
        versions=VersionStamps(
            policy="refund-policy-1",
            tool_catalog=refund_app.catalog,
            agent_id="refund-agent",
            state_version=0,
        ),
        updated_at=datetime.now(UTC),
    )


def set_stage(stage: str) -> Callable[[Checkpoint], Checkpoint]:
    def fn(cp: Checkpoint) -> Checkpoint:
        return cp.model_copy(update={"business": cp.business.model_copy(update={"stage": stage})})

    return fn


def bump_attempts(cp: Checkpoint) -> Checkpoint:
    return cp.model_copy(
        update={"execution": cp.execution.model_copy(update={"attempts": cp.execution.attempts + 1})}
    )


def race_transitions(
    task_id: str, owner: str, fence: int, threads: int, servers: dict[str, str]
) -> list[tuple[bool, int]]:
    """In a child process: `threads` concurrent transitions of one task under a shared lease, on the
    Redis (or Redis Cluster) that the settings in `servers` name (redis_env()): the child's own
    environment names the shared stack's.

    Returns (applied, lost_races) per thread; a Contention error counts as not applied.
    """
    import threading

    from wakeful.consumers.kafka import wiring
    from wakeful.core.errors import Contention
    from wakeful.core.settings import Settings
    from wakeful.state.lease import Lease

    store = wiring.store_for(Settings.from_env({**os.environ, **servers}), "gate")
    lease = Lease(task_id, owner, fence, 120_000)  # as the test took it: the store checks the token
    results: list[tuple[bool, int]] = []

    def write() -> None:
        try:
            outcome = store.transition(task_id, None, uuid.uuid4().hex, bump_attempts, lease=lease)
            results.append((True, outcome.lost_races))
        except Contention:
            results.append((False, 0))

    pool = [threading.Thread(target=write) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return results


def metrics_urls(fleet: Any) -> dict[str, str]:
    """Each member of a fleet started with a metrics port, by the URL of its /metrics."""
    urls = {}
    for member in fleet.members:
        at = fleet.metrics_at(member)
        assert at is not None, f"{member} serves no metrics"
        urls[member] = f"http://{at[0]}:{at[1]}/metrics"
    return urls


def redis_env(settings: Settings) -> dict[str, str]:
    """The settings that name the Redis (or Redis Cluster) `settings` use, for a child process."""
    return {
        "WAKEFUL_REDIS_PORT": str(settings.redis_port),
        "WAKEFUL_REDIS_CLUSTER": "1" if settings.redis_cluster else "0",
    }


def command(client: redis.Redis, *args: str | int | bytes) -> Any:
    """Send a raw command (redis-py leaves execute_command untyped)."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def raw_get(client: redis.Redis, key: str) -> bytes:
    value = client.get(key)
    assert isinstance(value, bytes), f"{key} holds no bytes"
    return value


FIRST_RECEIPT_S = 120.0  # a fresh fleet's first event: its roles join their groups first


def start_fleet(
    client: Any,
    model: str = "rules",
    lease_ttl_ms: int | None = None,
    env: dict[str, str] | None = None,
    *,
    restart_failed: bool = False,
) -> Any:
    """One process per role, warmed up: the first task has gone all the way through. `env`: the
    roles' environment (default: this process's); `restart_failed`: Fleet's, as `worker all`."""
    import os

    from wakeful.devstack.fleet import Fleet

    env = {**(os.environ if env is None else env), "WAKEFUL_MODEL": model}
    if lease_ttl_ms is not None:
        env["WAKEFUL_LEASE_TTL_MS"] = str(lease_ttl_ms)
    fleet = Fleet(env, restart_failed=restart_failed).start()
    try:
        # A fresh fleet's roles join their groups first: up to a session on a busy box.
        warm, _ = client.new_task(10, timeout=FIRST_RECEIPT_S)
        client.wait_settled(warm, 60)
    except BaseException:  # a fleet that never warmed up is stopped here: no fixture would stop it
        fleet.stop()
        raise
    return fleet


def refund_proposal(task_id: str, state_version: int, amount: int) -> Any:
    """The envelope a proposer would publish: refund `amount` EUR, decided on `state_version`."""
    from wakeful.schemas.proposals import Proposal

    body = Proposal(
        tool="refund",
        args={"task_id": task_id, "amount": amount, "currency": "EUR"},
        rationale=f"decided on state_version {state_version}",
        model="rules",
    )
    return proposal_envelope(task_id, state_version, body)


def proposal_envelope(task_id: str, state_version: int, body: Any) -> Any:
    """The envelope a proposer publishes for the Proposal `body`, decided on `state_version`."""
    from wakeful.schemas.events import Envelope

    return Envelope(
        message_id=f"proposal:{task_id}:{state_version}",
        task_id=task_id,
        task_version=state_version,
        kind="proposal",
        created_at=datetime.now(UTC),
        trace_id=f"test:{task_id}",
        payload=body.model_dump(mode="json"),
        in_reply_to=f"propreq:{task_id}:{state_version}",
    )


def role_message(settings: Any, role: str, topic: str, key: str, value: bytes) -> Message:
    """A message as `role` would publish it on `topic`, signed with the role's own key."""
    from wakeful.core import provenance

    headers = provenance.load_signer(settings, role).headers(topic, key.encode(), value)
    return Message(topic=topic, partition=0, offset=0, key=key.encode(), value=value, headers=headers)


def produce(producer: Any, msg: Message) -> None:
    """Publish a message built by `role_message`, headers and all."""
    producer.produce(msg.topic(), key=msg.key(), value=msg.value(), headers=msg.headers())


def kafka_as(
    bootstrap: str, role: str = kafka_auth.ADMIN, settings: Settings | None = None
) -> dict[str, Any]:
    """A confluent-kafka client's settings for `bootstrap`, logged in as `role`. Tests read and
    make topics as the admin; a test that plays a role or an upstream system logs in as that one."""
    return kafka_auth.client_config(settings or Settings.from_env(), role) | {"bootstrap.servers": bootstrap}


def kafka_python_as(bootstrap: str, role: str = kafka_auth.ADMIN) -> dict[str, Any]:
    """The same for kafka-python (its keyword arguments)."""
    return kafka_auth.kafka_python_config(Settings.from_env(), role) | {"bootstrap_servers": bootstrap}


def kcat_sasl(role: str, settings: Settings | None = None) -> list[str]:
    """kcat's -X arguments that log in as `role` (its password from the role's kafka.json)."""
    config = kafka_auth.client_config(settings or Settings.from_env(), role)
    keys = ("security.protocol", "sasl.mechanism", "sasl.username", "sasl.password")
    return [arg for key in keys for arg in ("-X", f"{key}={config[key]}")]


def kcat(*args: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    """Run kcat, a client wakeful did not write, on the librdkafka that confluent-kafka ships.

    kcat links the system's librdkafka, and before 2.6.1 its SCRAM exchange repeats the client nonce,
    which Kafka 4 refuses (confluentinc/librdkafka#4895): every SCRAM login would fail, good
    credentials included. The wheel's copy has the fix and the same ABI.
    """
    found = shutil.which("kcat")
    assert found, "kcat is missing: run `bash scripts/setup`"
    env = dict(os.environ, LD_LIBRARY_PATH=str(_wheel_librdkafka_dir()))
    return subprocess.run(
        [found, *args], input=stdin, env=env, capture_output=True, timeout=timeout, check=False
    )


@functools.cache
def _wheel_librdkafka_dir() -> Path:
    libs = Path(confluent_kafka.__file__).resolve().parent.parent / "confluent_kafka.libs"
    wheel = sorted(libs.glob("librdkafka*.so*"))
    assert wheel, f"no librdkafka in {libs}: kcat cannot log in to Kafka 4 with the system's copy"
    # One folder per user and wheel, reused by every test run: it holds only a link.
    folder = Path(tempfile.gettempdir()) / f"wakeful-kcat-{os.getuid()}-{wheel[0].name}"
    folder.mkdir(mode=0o700, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # another test process made it first
        (folder / "librdkafka.so.1").symlink_to(wheel[0])
    return folder


def topic_marks(bootstrap: str, topic: str) -> list[TopicPartition]:
    """Each partition's end offset now: read from here to see only what happens next."""
    consumer = Consumer(kafka_as(bootstrap) | {"group.id": "offsets-probe"})
    try:
        parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return [
            TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1])
            for p in parts
        ]
    finally:
        consumer.close()


def wait_letter(
    bootstrap: str, since: list[TopicPartition], match: Callable[[dict[str, Any]], bool], timeout: float = 60
) -> tuple[dict[str, Any], int] | None:
    """The first dead letter after `since` (see topic_marks) that matches, with its size in bytes on
    the topic; None if there is none within timeout seconds."""
    consumer = Consumer(
        kafka_as(bootstrap) | {"group.id": f"dlq-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    consumer.assign(since)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                if msg.error() is None:
                    letter: dict[str, Any] = orjson.loads(msg.value() or b"{}")
                    if match(letter):
                        return letter, len(msg.value() or b"")
        return None
    finally:
        consumer.close()


def wait_dead_letter(
    bootstrap: str, since: list[TopicPartition], task_id: str, source: str, timeout: float = 60
) -> dict[str, Any] | None:
    """The first dead letter that `source` wrote for task_id after `since`, or None."""
    found = wait_letter(
        bootstrap, since, lambda d: d.get("task_id") == task_id and d.get("source") == source, timeout
    )
    return found[0] if found else None


class StandInProducer:
    def flush(self, _timeout: float) -> int:
        return 0

    def produce(self, *_: Any, **__: Any) -> None:
        return None

    def poll(self, _timeout: float) -> int:
        return 0


def msg(key: str, offset: int, partition: int = 0) -> Message:
    return Message(topic="t", partition=partition, offset=offset, key=key.encode(), value=b"v")


class StandInConsumer:
    """The runner's side of a consumer, for pure tests: records stored offsets and seeks."""

    def __init__(self) -> None:
        self.stored: list[TopicPartition] = []
        self.seeks: list[TopicPartition] = []

    def store_offsets(self, offsets: list[TopicPartition]) -> None:
        self.stored += offsets

    def seek(self, tp: TopicPartition) -> None:
        self.seeks.append(tp)


def run_cli(
    env: dict[str, str], *args: str, timeout: float, umask: int = -1
) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, with exactly `env` (and `umask`, if one is given)."""
    return subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        umask=umask,
    )


@contextlib.contextmanager
def private_stack(home: Path) -> Iterator[dict[str, str]]:
    """A stack of its own (state dir under `home`, ports nothing else uses), for a test that must
    not share the test stack's: the environment that reaches it. Stopped on the way out."""
    kafka, controller, redis_port = free_ports(3)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("WAKEFUL_") or k in ("WAKEFUL_CACHE", "WAKEFUL_KAFKA_HEAP")
    } | {
        "WAKEFUL_HOME": str(home / "state"),
        "WAKEFUL_KAFKA_PORT": str(kafka),
        "WAKEFUL_KAFKA_CONTROLLER_PORT": str(controller),
        "WAKEFUL_REDIS_PORT": str(redis_port),
    }
    up = run_cli(env, "dev", "up", timeout=300)
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        yield env
    finally:
        run_cli(env, "dev", "down", timeout=120)


def claimable_ports() -> range:
    """Loopback ports for servers a test starts: below the kernel's ephemeral range, where no
    outgoing connection takes one between our probe and the server's bind (a port bound to 0 is
    one of those, and a role's metrics port so taken failed a fleet's start), and this pytest-xdist
    worker's share of them, so two workers never pick the same one."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    span = range(max(20000, low - 12000), low)
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    share = len(span) // workers
    return range(span.start + worker * share, span.start + (worker + 1) * share)


def _free(ports: range) -> bool:
    import socket

    socks = [socket.socket() for _ in ports]
    try:
        for sock, port in zip(socks, ports, strict=True):
            sock.bind(("127.0.0.1", port))
    except OSError:
        return False
    finally:
        for sock in socks:
            sock.close()
    return True


def free_ports(n: int, tries: int = 200) -> list[int]:
    """n loopback ports nothing listens on now (claimable_ports), so a private stack never meets
    another one's."""
    pool = claimable_ports()
    found: list[int] = []
    for port in random.sample(pool, min(tries, len(pool))):
        if _free(range(port, port + 1)):
            found.append(port)
        if len(found) == n:
            return found
    raise RuntimeError(f"no {n} free loopback ports found among {pool}")


def free_port_run(n: int, tries: int = 50) -> int:
    """The first of n consecutive loopback ports nothing listens on now (a fleet's metrics ports),
    among claimable_ports."""
    pool = claimable_ports()
    for _ in range(tries):
        first = random.randrange(pool.start, pool.stop - n)
        if _free(range(first, first + n)):
            return first
    raise RuntimeError(f"no run of {n} free loopback ports found in {tries} tries among {pool}")


def process_alive(proc: psutil.Process) -> bool:
    """Whether the process still runs: a zombie does not."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def process_paused(pid: int) -> bool:
    """Whether every thread of process `pid` has stopped (SIGSTOP). Its status alone shows only its
    main thread: the others may still be on their way, and until the last has stopped the kernel
    does not count the process as stopped (a parent that dies meanwhile leaves it paused for good,
    as an orphaned group is continued only if it is stopped when it becomes orphaned)."""
    try:
        tasks = Path(f"/proc/{pid}/task")
        states = [(t / "stat").read_text().rpartition(")")[2].split()[0] for t in tasks.iterdir()]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return bool(states) and all(state == "T" for state in states)


def kill_processes(procs: list[psutil.Process]) -> None:
    """Leave nothing behind when a test fails (by pid: psutil refuses a pid reused since)."""
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()


def raw_kafka(settings: Any) -> dict[str, Any]:
    """librdkafka settings for a client that uses no wakeful code, writing with the broker's
    blessing (as its admin): for tests of what roles must refuse even when the broker lets it in."""
    return kafka_as(settings.kafka_bootstrap, kafka_auth.ADMIN, settings)


def inbound_wake(event: Any, task_id: str, principal: str = "alice") -> Any:
    """The wake inbound publishes for a signed event it accepted for task_id (its verdict included)."""
    from wakeful.schemas.events import Envelope

    now = datetime.now(UTC)
    payload = {"reason": "event", "principal": principal, "event": event.encode().decode()}
    return Envelope(
        message_id=event.event_id,
        task_id=task_id,
        task_version=0,
        kind="wake",
        created_at=now,
        trace_id=event.event_id,
        payload=payload | {"judged_at": now.isoformat()},
    )


def gate_for(settings: Any, app: Any = refund_app) -> Any:
    """A gate as its role's main() builds one (for `app`, default the refund), to drive with
    handle() in a test."""
    from confluent_kafka import Producer

    from wakeful.consumers.gate.main import Gate
    from wakeful.consumers.kafka import wiring
    from wakeful.core import provenance
    from wakeful.core.log import Log

    producer = Producer(kafka_as(settings.kafka_bootstrap, "gate", settings))
    return Gate(
        wiring.store_for(settings, "gate", app),
        producer,
        Log(),
        app=app,
        keys=provenance.load_keys(settings, "gate"),
    )


def deliver_under(app: Any, settings: Any, event: Any, principal: str) -> None:
    """One signed event, as inbound wakes the gate with it, handled by a gate of `app` (a deploy
    other than the running fleet's); what it would dead-letter is dropped."""
    from types import SimpleNamespace

    gate = gate_for(settings, app=app)
    gate.runner = SimpleNamespace(dead_letter=lambda *_: None)
    wake = inbound_wake(event, event.task_id, principal=principal)
    gate.handle(role_message(settings, "inbound", WAKE, event.task_id, wake.encode()))


class RecordedLog(Log):
    """A role's Log that keeps each line's event and fields, for a test to read."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    def bind(self, **_more: Any) -> RecordedLog:
        return self

    def said(self, event: str) -> list[dict[str, Any]]:
        return [fields for name, fields in self.lines if name == event]


def wait_logged(
    path: Path, event: str, task_id: str, since: int = 0, timeout: float = 60
) -> dict[str, Any] | None:
    """The first line of a role's log file `path` (from byte `since`) with this event for task_id."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for _, line in log_records(path, since):
            if line.get("event") == event and line.get("task_id") == task_id:
                return line
        time.sleep(0.05)
    return None


def executor_for(
    settings: Any,
    letters: list[str],
    owner: str | None = None,
    app: Any = refund_app,
    log: RecordedLog | None = None,
) -> Any:
    """An executor as its role's main() builds one (for `app`, default the refund), to drive with
    handle() in a test; the reasons it dead-letters with go to `letters`, its log lines to `log`."""
    from types import SimpleNamespace

    from wakeful.consumers.executor import credentials
    from wakeful.consumers.executor.main import Executor
    from wakeful.consumers.kafka import wiring
    from wakeful.core import provenance
    from wakeful.core.log import Log

    for tool in app.tools:
        tool.connect(settings)
    credentials.start(settings, app, Log(role="executor"))  # its minter, as main() starts it (D120)
    executor: Any = Executor(
        wiring.store_for(settings, "executor", app),
        wiring.leases_for(settings, "executor", owner=owner)
        if owner
        else wiring.leases_for(settings, "executor"),
        wiring.actions_for(settings, "executor"),
        log if log is not None else Log(),
        keys=provenance.load_keys(settings, "executor"),
        app=app,
    )
    executor.runner = SimpleNamespace(dead_letter=lambda _m, reason, _t=None: letters.append(reason))
    return executor


CHAOS_S = 600  # one `wakeful chaos` round: its fleet's start, the traffic, the kills and the check


def chaos_report(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`wakeful chaos ARGS --json` in a process of its own: its report, once it exited 0."""
    result = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", "chaos", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=CHAOS_S,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:] + result.stdout[-3000:]
    report: dict[str, Any] = orjson.loads(result.stdout)
    return report


def log_records(path: Path, since: int = 0) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """A role's structured log lines after byte `since`, each with its decoded record; anything
    else in the file (a fault point's notice, a traceback, a line still being written) is skipped."""
    with path.open("rb") as f:
        f.seek(since)
        lines = f.read().splitlines()
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict):
            yield line, record


class BankClient(Client):
    """The client as the refund's tests read a task: `show` also gives the reference bank's entries
    for it (the refund's downstream), which `wakeful task show` leaves to each app's own tools
    (`effects`)."""

    @cached_property
    def bank(self) -> Bank:
        return Bank(self.admin)

    def show(self, task_id: str) -> dict[str, Any]:
        shown = super().show(task_id)  # the state first: a booking always precedes the close that records it
        if "quarantine" in shown:
            entries = self.bank.entries(task_id)  # a scan, but the task cannot say its operations
        else:  # one booking at most per op key the task ran
            found = (self.bank.lookup(op) for op in shown["actions"] if not op.startswith(UNDO_PREFIX))
            entries = [e for e in found if e is not None]
        return shown | {"ledger": [e.model_dump(mode="json") for e in entries]}


def killed_at(fleet: Any, role: str, fault: str, start: Callable[[], str], within: float) -> str:
    """Restart `role` of `fleet` armed to die at `fault` (core/faults.py, POINT@N), start a task
    with `start`, wait for the role's SIGKILL there, and start the role again: the task's id."""
    import signal

    proc = fleet.restart(role, fault=fault)
    task_id = start()
    deadline = time.monotonic() + within
    while proc.poll() is None:
        assert time.monotonic() < deadline, f"{fault} was never reached"
        time.sleep(0.05)
    assert proc.returncode == -signal.SIGKILL, proc.returncode
    fleet.start_role(role)
    return task_id


@contextlib.contextmanager
def ingress_door(env: dict[str, str] | None = None, start_s: float = 30.0) -> Iterator[str]:
    """`wakeful ingress` on a free port, as an operator starts it (with `env` added); its URL once
    it answers its health check. Stopped on the way out."""
    (port,) = free_ports(1)
    proc = subprocess.Popen(
        [sys.executable, "-m", "wakeful.cli.main", "ingress", "--port", str(port)],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        up = wait_until(lambda: proc.poll() is not None or answers(url), start_s, interval=0.05)
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "ingress exited"
        assert up, "ingress did not answer its health check"
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def answers(url: str) -> bool:
    """Whether `wakeful ingress` at `url` answers its health check now."""
    try:
        return httpx.get(f"{url}/v1/health", timeout=1.0).status_code == 200
    except httpx.TransportError:
        return False


def downstream_as(settings: Settings, name: str) -> redis.Redis:
    """A client of downstream `name`'s rights, for a test of the downstream itself: the example
    downstreams have no static login (D125), so this makes a user of their rules, as the minter
    does for a step (`wakeful-test-<name>`), and logs in as it."""
    from wakeful.state import acl

    user, password = downstream_login(settings, name)
    return acl.client(settings, username=user, password=password, connection_class=acl.CountingConnection)


_DOWNSTREAM_PASSWORDS: dict[tuple[str, str], str] = {}


def downstream_login(settings: Settings, name: str) -> tuple[str, str]:
    """The user and password downstream_as logs in with, made (again, after a restart) each call."""
    from wakeful.state import acl, downstreams, minted

    [found] = [d for d in acl.downstreams_of(settings) if d.user == name]
    assert isinstance(found, downstreams.Downstream)
    user = f"wakeful-test-{name}"
    # one password per server and name in a process: a client made earlier keeps logging in
    password = _DOWNSTREAM_PASSWORDS.setdefault((settings.redis_url, name), uuid.uuid4().hex)
    admin = acl.connect(settings, "admin")
    try:
        admin.execute_command(*minted.setuser(user, password, minted.rules_of(found)))  # type: ignore[no-untyped-call]  # the minter's own rules
    finally:
        admin.close()
    return user, password
