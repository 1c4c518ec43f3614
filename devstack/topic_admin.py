"""Creating wakeful's topics, as the Kafka admin (`wakeful dev topics`, `wakeful dev up`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__

from wakeful.core import kafka_auth
from wakeful.core.errors import ServerUnavailable
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings
from wakeful.core.topics import ALL, SINGLE_PARTITION, config


def ensure_topics(
    settings: Settings, partitions: int | None = None, names: Iterable[str] = ALL, timeout: float = 30.0
) -> list[str]:
    """Create the topics that do not exist yet, as the admin; returns the names created. Safe to
    run twice. `partitions` defaults to WAKEFUL_PARTITIONS."""
    admin = _admin(settings)
    bootstrap, count = settings.kafka_bootstrap, partitions or settings.partitions
    try:
        return _create_missing(admin, bootstrap, count, names, timeout, log_days=settings.log_retention_days)
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
            config=config(name, log_days),
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
