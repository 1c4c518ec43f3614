"""The Kafka topics wakeful uses and the idempotent admin step that creates them.

Every topic is keyed by task id (wakeful.events by correlation id or task id), so one task's
messages stay ordered on one partition. wakeful.log's messages carry many tasks' records each, sent
to the partition partition_of() names for those tasks (D47).
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__
from kafka.partitioner.default import murmur2

from wakeful.core import kafka_auth
from wakeful.core.errors import ServerUnavailable
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings

EVENTS = "wakeful.events"
WAKE = "wakeful.wake"
PROPOSALS_REQUEST = "wakeful.proposals.request"
PROPOSALS = "wakeful.proposals"
LOG = "wakeful.log"
DLQ = "wakeful.dlq"

ALL = (EVENTS, WAKE, PROPOSALS_REQUEST, PROPOSALS, LOG, DLQ)

# The audit/recovery log and the dead letters are evidence: keep them until an operator trims them.
_KEEP_FOREVER = {"retention.ms": "-1", "retention.bytes": "-1"}
TOPIC_CONFIG: dict[str, dict[str, str]] = {LOG: _KEEP_FOREVER, DLQ: _KEEP_FOREVER}


def partition_of(key: str, partitions: int) -> int:
    """The partition a message keyed `key` goes to: murmur2, the Java client's hash, which every
    producer here is configured with, so one key lands on one partition whichever client sent it."""
    return int((murmur2(key.encode()) & 0x7FFFFFFF) % partitions)


def ensure_topics(
    settings: Settings, partitions: int | None = None, names: Iterable[str] = ALL, timeout: float = 30.0
) -> list[str]:
    """Create the topics that do not exist yet, as the admin; returns the names created. Safe to
    run twice. `partitions` defaults to WAKEFUL_PARTITIONS."""
    admin = AdminClient(kafka_auth.client_config(settings, kafka_auth.ADMIN) | librdkafka_config())
    bootstrap, count = settings.kafka_bootstrap, partitions or settings.partitions
    try:
        return _create_missing(admin, bootstrap, count, names, timeout)
    finally:
        admin.poll(0)  # an AdminClient's log lines are written only when it is polled


def _create_missing(
    admin: AdminClient, bootstrap: str, partitions: int, names: Iterable[str], timeout: float
) -> list[str]:
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise ServerUnavailable(
            "Kafka", bootstrap, "Start it with `wakeful dev up` or fix WAKEFUL_KAFKA_BOOTSTRAP."
        ) from exc
    wanted = [
        NewTopic(name, num_partitions=partitions, replication_factor=1, config=TOPIC_CONFIG.get(name, {}))
        for name in names
        if name not in existing
    ]
    if not wanted:
        return []
    created = []
    for name, future in admin.create_topics(wanted, operation_timeout=timeout).items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    return created
