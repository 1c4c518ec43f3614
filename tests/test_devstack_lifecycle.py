"""`wakeful dev up | down | status` on a private stack (own state dir and ports), run the way a
user runs it: as the CLI, in a subprocess."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import psutil
import pytest
from confluent_kafka import Consumer, Producer
from helpers import free_ports, kafka_as, kcat, kcat_sasl, new_checkpoint, run_cli, set_stage

from wakeful.consumers.kafka import wiring
from wakeful.core import secrets, topics
from wakeful.core.settings import Settings
from wakeful.devstack import kafka, redis_server
from wakeful.examples.refund import Stage
from wakeful.operate import topics as topic_admin
from wakeful.state import acl

# Ports nobody else holds now (another stack on this machine must not meet this one).
KAFKA_PORT, CONTROLLER_PORT, REDIS_PORT = free_ports(3)
PORTS = {
    "WAKEFUL_KAFKA_PORT": str(KAFKA_PORT),
    "WAKEFUL_KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT),
    "WAKEFUL_REDIS_PORT": str(REDIS_PORT),
}
COMMAND_S = 240  # one `wakeful dev ...`: a private stack's start, on a small shared machine
pytestmark = pytest.mark.timeout(2 * COMMAND_S + 60)  # a test runs `dev up` up to twice


def wakeful(
    env: dict[str, str], *args: str, check: bool = True, umask: int = -1
) -> subprocess.CompletedProcess[str]:
    result = run_cli(env, *args, timeout=COMMAND_S, umask=umask)
    if check and result.returncode != 0:
        pytest.fail(f"wakeful {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def our_processes(home: Path) -> list[psutil.Process]:
    """Every live process that belongs to the stack in this state dir."""
    found = []
    for proc in psutil.process_iter():
        try:
            if f"-Dwakeful.home={home}" in proc.cmdline() or (
                proc.name().startswith("redis-server") and Path(proc.cwd()).is_relative_to(home)
            ):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    home = tmp_path_factory.mktemp("stack")
    env = {k: v for k, v in os.environ.items() if k not in ("WAKEFUL_KAFKA_BOOTSTRAP", "WAKEFUL_REDIS_URL")}
    env.update(PORTS, WAKEFUL_HOME=str(home), WAKEFUL_PARTITIONS="2")
    yield env
    wakeful(env, "dev", "down", check=False)


def status(env: dict[str, str]) -> dict[str, dict[str, object]]:
    out = wakeful(env, "dev", "status", "--json", check=False).stdout
    return {row["name"]: row for row in orjson.loads(out)}


def test_dev_up_twice_is_harmless_and_keeps_the_same_servers(private: dict[str, str]) -> None:
    wakeful(private, "dev", "up")
    first = status(private)
    assert first["kafka"]["healthy"] and first["redis"]["healthy"]
    assert first["kafka"]["address"] == f"127.0.0.1:{KAFKA_PORT}"

    again = wakeful(private, "dev", "up")
    assert "already running" in again.stderr
    second = status(private)
    assert second["kafka"]["pid"] == first["kafka"]["pid"]
    assert second["redis"]["pid"] == first["redis"]["pid"]
    assert len(our_processes(Path(private["WAKEFUL_HOME"]))) == 2


def test_clients_wakeful_did_not_write_see_the_stack(private: dict[str, str]) -> None:
    admin = kcat_sasl("admin", Settings.from_env(private))
    listing = kcat("-b", f"127.0.0.1:{KAFKA_PORT}", *admin, "-L", timeout=30).stdout.decode()
    assert f"broker 1 at 127.0.0.1:{KAFKA_PORT}" in listing
    for name in topics.ALL:
        assert f'topic "{name}"' in listing
    ping = subprocess.run(
        ["redis-cli", "-p", str(REDIS_PORT), "ping"], capture_output=True, text=True, timeout=10, check=False
    )
    assert ping.stdout.strip().startswith("NOAUTH")  # it answers, and refuses a stranger
    password = secrets.load(Settings.from_env(private), "admin", "redis")["password"]
    authed = subprocess.run(
        [
            "redis-cli",
            "--no-auth-warning",
            "-p",
            str(REDIS_PORT),
            "--user",
            acl.user_name("admin"),
            "--pass",
            password,
            "ping",
        ],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert authed.stdout.strip() == "PONG"


def test_broker_and_redis_restart_keep_what_was_acknowledged(private: dict[str, str], unique: str) -> None:
    settings = Settings.from_env(private)
    topic = f"wakeful.test.durable.{unique}"
    topic_admin.ensure_topics(settings, 1, names=[topic])
    producer = Producer(kafka_as(settings.kafka_bootstrap, settings=settings) | {"acks": "all"})
    for i in range(5):
        producer.produce(topic, key=b"t", value=f"m{i}".encode())
    assert producer.flush(30) == 0
    acl.connect(settings, "admin").set("wk:{durable}:probe", unique)
    # A task written by compare-and-swap (MULTI/EXEC as the gate's ACL user) must survive the
    # AOF replay too, which runs as Redis's default user.
    store = wiring.store_for(settings, "gate")
    task = store.create(new_checkpoint(), "create").checkpoint
    lease = wiring.leases_for(settings, "executor").acquire(task.task_id)
    store.transition(task.task_id, 1, "m1", set_stage(Stage.READY), lease=lease)

    old_kafka, old_redis = kafka.stop(settings), redis_server.stop(settings)
    assert old_kafka and old_redis
    wakeful(private, "dev", "up")
    now = status(private)
    assert now["kafka"]["pid"] != old_kafka and now["redis"]["pid"] != old_redis

    consumer = Consumer(
        kafka_as(settings.kafka_bootstrap, settings=settings)
        | {
            "group.id": f"g-{unique}",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(seen) < 5 and time.monotonic() < deadline:
        seen += [m.value() or b"" for m in consumer.consume(10, 0.5) if m.error() is None]
    consumer.close()
    assert seen == [f"m{i}".encode() for i in range(5)]
    assert acl.connect(settings, "admin").get("wk:{durable}:probe") == unique.encode()
    reloaded = wiring.store_for(settings, "gate").load(task.task_id)
    assert (reloaded.state_version, reloaded.stage) == (2, Stage.READY)


def test_no_user_but_the_owner_can_read_the_stacks_data_whatever_the_umask(
    private: dict[str, str], unique: str
) -> None:
    """Kafka's segments and Redis's append-only file hold signed events and ledger keys: readable
    by another local user, they are past every login and ACL."""
    home = Path(private["WAKEFUL_HOME"])
    settings = Settings.from_env(private)
    wakeful(private, "dev", "up")
    loose = home / "kafka" / "left-by-an-earlier-release.log"
    loose.write_text("x")
    for path in (home, home / "kafka" / "data", loose):
        path.chmod(0o777 if path.is_dir() else 0o666)
    kafka.stop(settings)
    redis_server.stop(settings)
    wakeful(private, "dev", "up", umask=0)  # a user whose umask lets everyone read everything
    topic = f"wakeful.test.private.{unique}"
    topic_admin.ensure_topics(settings, 1, names=[topic])  # new segments, made by the running broker
    producer = Producer(kafka_as(settings.kafka_bootstrap, settings=settings) | {"acks": "all"})
    producer.produce(topic, key=b"t", value=b"signed")
    assert producer.flush(30) == 0
    acl.connect(settings, "admin").set("wk:{private}:probe", unique)  # the append-only file grows
    assert list((home / "kafka" / "data").glob(f"{topic}-0/*.log"))
    assert list((home / "redis").glob("appendonlydir/*"))
    open_to_others = []
    for folder, _dirs, files in os.walk(home):
        if (mode := Path(folder).stat().st_mode & 0o777) != 0o700:
            open_to_others.append(f"{folder} {oct(mode)}")
        for name in files:
            if (mode := Path(folder, name).lstat().st_mode & 0o777) & 0o077:
                open_to_others.append(f"{Path(folder, name).relative_to(home)} {oct(mode)}")
    assert open_to_others == []


def test_dev_down_leaves_no_process_of_ours(private: dict[str, str]) -> None:
    home = Path(private["WAKEFUL_HOME"])
    wakeful(private, "dev", "up")
    assert our_processes(home)
    wakeful(private, "dev", "down")
    assert our_processes(home) == []
    assert not (home / "kafka" / "kafka.pid").exists() and not (home / "redis" / "redis.pid").exists()
    assert wakeful(private, "dev", "status", check=False).returncode == 1


def test_external_servers_are_used_and_nothing_is_started(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    # A cluster of one's own is reached with its admin's credential, here the running stack's.
    env = dict(
        os.environ,
        WAKEFUL_HOME=str(tmp_path),
        WAKEFUL_KAFKA_BOOTSTRAP=kafka_bootstrap,
        WAKEFUL_REDIS_URL=redis_url,
        WAKEFUL_SECRETS=str(Settings.from_env().secrets),
    )
    env.update(PORTS)
    out = wakeful(env, "dev", "up")
    assert "nothing started" in out.stderr
    assert our_processes(tmp_path) == []
    rows = status(env)
    assert rows["kafka"]["managed"] == "external" and rows["kafka"]["healthy"]
    assert rows["redis"]["managed"] == "external" and rows["redis"]["healthy"]
