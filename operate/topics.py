"""Creating wakeful's topics, as the Kafka admin (`wakeful admin topics`, `wakeful dev up`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from wakeful.core import kafka_auth
from wakeful.core.errors import ServerUnavailable
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings
from wakeful.core.topics import ALL, APPEND_TIME, APPEND_TIMED, SINGLE_PARTITION, config


def ensure_topics(
    settings: Settings, partitions: int | None = None, names: Iterable[str] = ALL, timeout: float = 30.0
) -> list[str]:
    """Create the topics that do not exist yet, as the admin, and have the broker stamp the upstream
    events and wakes of those that do (APPEND_TIMED, D84); returns the names created. Safe to run
    twice. `partitions` defaults to WAKEFUL_PARTITIONS."""
    admin = _admin(settings)
    bootstrap, count = settings.kafka_bootstrap, partitions or settings.partitions
    names = list(names)
    try:
        created = _create_missing(
            admin,
            bootstrap,
            count,
            names,
            timeout,
            log_days=settings.log_retention_days,
            events_hours=settings.events_retention_hours,
        )
        stamp_appends(admin, [n for n in names if n in APPEND_TIMED and n not in created], timeout)
        return created
    finally:
        admin.poll(0)  # an AdminClient's log lines are written only when it is polled


def _admin(settings: Settings) -> AdminClient:
    return AdminClient(kafka_auth.client_config(settings, kafka_auth.ADMIN) | librdkafka_config())


def _create_missing(
    admin: AdminClient,
    bootstrap: str,
    partitions: int,
    names: Iterable[str],
    timeout: float,
    *,
    log_days: int,
    events_hours: int,
) -> list[str]:
    try:
        existing = set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise ServerUnavailable(
            "Kafka", bootstrap, "Start it with `wakeful dev up` or fix WAKEFUL_KAFKA_BOOTSTRAP."
        ) from exc
    wanted = [
        NewTopic(
            name,
            num_partitions=1 if name in SINGLE_PARTITION else partitions,
            replication_factor=1,
            config=config(name, log_days, events_hours),
        )
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


def stamp_appends(admin: AdminClient, names: list[str], timeout: float) -> list[str]:
    """Set message.timestamp.type=LogAppendTime on those of `names` that lack it (topics made before
    D84), leaving every other setting as it is; returns the names changed. Only messages appended
    after it carry the broker's time: the roles judge older ones by their own clock, as before."""
    if not names:
        return []
    ((key, wanted),) = APPEND_TIME.items()
    described = admin.describe_configs([ConfigResource("topic", n) for n in names], request_timeout=timeout)
    stale = [r for r, f in described.items() if f.result(timeout)[key].value != wanted]
    if not stale:
        return []
    entry = [ConfigEntry(key, wanted, incremental_operation=AlterConfigOpType.SET)]
    asked = admin.incremental_alter_configs(
        [ConfigResource("topic", r.name, incremental_configs=entry) for r in stale], request_timeout=timeout
    )
    for future in asked.values():
        future.result(timeout)
    return [r.name for r in stale]


def drop_scratch(
    settings: Settings, topics: Iterable[str], groups: Iterable[str] = (), timeout: float = 30.0
) -> list[str]:
    """Delete a bench's scratch topics, then its consumer groups, as the admin, waiting for the
    broker's answers (an AdminClient dropped before they come sends nothing). Returns what could
    not be deleted, each with the broker's reason (one already gone is not): a bench reports it
    and goes on."""
    admin = _admin(settings)
    failed: list[str] = []
    topics, groups = list(topics), list(groups)
    try:
        if topics:
            asked = admin.delete_topics(topics, operation_timeout=timeout, request_timeout=timeout)
            failed += _refusals("topic", asked, KafkaError.UNKNOWN_TOPIC_OR_PART)
        if groups:
            asked = admin.delete_consumer_groups(groups, request_timeout=timeout)
            failed += _refusals("group", asked, KafkaError.GROUP_ID_NOT_FOUND)
    finally:
        admin.poll(0)
    return failed


def _refusals(kind: str, asked: dict[str, Any], gone: int) -> list[str]:
    """Each request's refusal but `gone`, the broker's word for a name it no longer has."""
    failed = []
    for name, future in asked.items():
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() != gone:
                failed.append(f"{kind} {name}: {exc.args[0]}")
    return failed
