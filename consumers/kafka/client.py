"""What a role asks of Kafka before and beside its consumers and producers: whether its login
works, and which partition a key lands on."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, Message, Producer

from wakeful.core import murmur2
from wakeful.core.kafka_auth import client_config, refused_credentials
from wakeful.core.settings import Settings

PROBE_STEP_S = 0.5


def partition_of(key: str, partitions: int) -> int:
    """The partition a message keyed `key` goes to: murmur2, the Java client's hash, which every
    producer here is configured with, so one key lands on one partition whichever client sent it."""
    return murmur2.partition_of(key.encode(), partitions)


def appended_at(msg: Message) -> datetime | None:
    """When the broker appended `msg`, if its topic has the broker stamp its messages
    (LogAppendTime, core/topics.APPEND_TIMED); None for a producer's own CreateTime, which whoever
    produced it chose (D84)."""
    kind, ms = msg.timestamp()
    return datetime.fromtimestamp(ms / 1000, UTC) if kind == TIMESTAMP_LOG_APPEND_TIME and ms > 0 else None


STAMP_FIX = (
    "`wakeful admin topics` (or kafka-configs.sh ... --add-config message.timestamp.type=LogAppendTime) "
    "has the broker stamp it: until then a backlog longer than the max age is refused as stale"
)


class ArrivalClock:
    """When a message reached Kafka, for a role that judges by it: its broker time, or, on a topic
    still stamped by its producers, this clock, said once in the role's log with what to run (D84)."""

    def __init__(self, log: Callable[..., None]) -> None:
        self.log = log
        self.told: set[str] = set()

    def __call__(self, msg: Message) -> datetime:
        appended = appended_at(msg)
        if appended is not None:
            return appended
        topic = msg.topic() or ""
        if topic not in self.told:
            self.told.add(topic)
            self.log("role.topic_not_stamped", topic=topic, fix=STAMP_FIX)
        return datetime.now(UTC)


def check_login(settings: Settings, role: str, timeout: float = 10.0) -> None:
    """Log in once as `role`, so a refused credential stops a process at start-up in one line
    instead of leaving its clients retrying in the background for ever."""
    refused: list[str] = []

    def on_error(err: KafkaError) -> None:
        if err.code() == KafkaError._AUTHENTICATION:
            refused.append(err.str())

    # No log lines: the refusal is reported below, once; anything else is the role's to report.
    probe = Producer(client_config(settings, role) | {"error_cb": on_error, "log_level": 0})
    deadline = time.monotonic() + timeout
    try:
        while not refused and time.monotonic() < deadline:
            try:
                probe.list_topics(timeout=PROBE_STEP_S)
                return
            except KafkaException:
                probe.poll(0)  # serves error_cb: was it the credential, or is the broker away?
    finally:
        probe.poll(0)
    if refused:
        raise refused_credentials(settings, role, refused[0])
    # An unreachable broker is the caller's ServerUnavailable to report, not a credential's.
