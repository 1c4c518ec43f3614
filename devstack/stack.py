"""`wakeful dev up | down | status`: the local stack as one unit.

Servers named by WAKEFUL_KAFKA_BOOTSTRAP / WAKEFUL_REDIS_URL are used as they are; only the
missing ones are started here, and `down` stops only what `up` started (by pid file).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from wakeful.core import topics
from wakeful.core.settings import Settings
from wakeful.devstack import kafka, process, redis_server
from wakeful.state.seal import Keyring


@dataclass(frozen=True)
class ServerStatus:
    name: str
    address: str
    managed: str  # "local" (started by wakeful) or "external"
    pid: int | None
    healthy: bool

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def up(settings: Settings, say: process.Say) -> list[ServerStatus]:
    settings.home.mkdir(parents=True, exist_ok=True)
    if not settings.keyring.exists():
        Keyring.generate().save(settings.keyring)
        say(f"created the sealing keyring {settings.keyring} (mode 0600)")
    if settings.runs_local_redis:
        redis_server.start(settings, say)
    else:
        say(f"redis: using {settings.redis_address} (WAKEFUL_REDIS_URL); nothing started")
    if settings.runs_local_kafka:
        kafka.start(settings, say)
    else:
        say(f"kafka: using {settings.kafka_bootstrap} (WAKEFUL_KAFKA_BOOTSTRAP); nothing started")
    created = topics.ensure_topics(settings.kafka_bootstrap, settings.partitions)
    if created:
        say(f"created topics: {', '.join(created)} ({settings.partitions} partitions each)")
    return status(settings)


def down(settings: Settings, say: process.Say) -> None:
    for name, stop in (("kafka", kafka.stop), ("redis", redis_server.stop)):
        pid = stop(settings)
        say(f"{name}: stopped pid {pid}" if pid else f"{name}: not running here")


def status(settings: Settings) -> list[ServerStatus]:
    kafka_pid = process.running_pid(kafka.pid_path(settings), kafka.is_ours(settings))
    redis_pid = process.running_pid(redis_server.pid_path(settings), redis_server.is_ours(settings))
    return [
        ServerStatus(
            name="kafka",
            address=settings.kafka_bootstrap,
            managed="local" if settings.runs_local_kafka else "external",
            pid=kafka_pid,
            healthy=kafka.healthy(settings.kafka_bootstrap),
        ),
        ServerStatus(
            name="redis",
            address=settings.redis_address,
            managed="local" if settings.runs_local_redis else "external",
            pid=redis_pid,
            healthy=redis_server.healthy(settings.redis_url),
        ),
    ]
