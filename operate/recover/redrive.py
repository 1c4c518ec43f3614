"""`wakeful recover`'s re-drive of the gate (D87): the wakes the gate had read from where the log
vouches for nothing (state/redrive.py) are published again, so that the gate, when the workers
start, applies once more whatever a lost Redis held and the log does not. The inbox marks the
recover rebuilt from the log dedupe what the log already reflects; op keys and the tool's lookup
keep an effect from running twice (crash cases B and C).

Why publish them again rather than move the gate's group back: a re-read of the partition would
take every wake from there, and a purged task's create (D73) would make that task anew, since
nothing of it is left to dedupe it; publishing lets recover leave out the wakes of tasks whose
tombstone ends their history on the log. The copies carry their producers' tags (the tag covers
topic, key and value) and the door's verdict with its time; the gate holds that verdict to the
copy's append as it did to the first (D84). Nothing needs the group to be empty, and what is sent
twice (a recover run again) is deduped by the inbox.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Message, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    OffsetSpec,
)

from wakeful.consumers.kafka.producing import producer_config
from wakeful.consumers.kafka.retention import REDRIVEN
from wakeful.core import kafka_auth, kafka_rights, topics
from wakeful.core.errors import WakefulError
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings
from wakeful.operate import log_reader
from wakeful.state.redrive import Coverage, Start, start

Say = Callable[[str], None]
TIMEOUT_S = 30.0


@dataclass
class Plan:
    """Where each partition of the re-driven topics starts, and what the log said."""

    starts: list[Start] = field(default_factory=list)
    watermarks: int = 0
    sourced: int = 0  # changes on the log that named their input

    @property
    def gone(self) -> list[Start]:
        return [s for s in self.starts if s.gone]

    def as_dict(self) -> dict[str, object]:
        return {
            "watermarks": self.watermarks,
            "changes_with_source": self.sourced,
            "starts": {f"{s.topic}[{s.partition}]": s.why() for s in self.starts},
            "deleted_by_retention": [s.why() for s in self.gone],
        }


def _admin(settings: Settings) -> AdminClient:
    return AdminClient(kafka_auth.client_config(settings, kafka_rights.ADMIN) | librdkafka_config())


def plan(settings: Settings, coverage: Coverage) -> Plan:
    """Each partition's start, from the log's coverage and the topics' and groups' offsets now."""
    admin = _admin(settings)
    floors = coverage.floors()
    found = Plan(watermarks=coverage.watermarks, sourced=coverage.changes)
    for topic, group in REDRIVEN.items():
        meta = admin.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None:
            raise WakefulError(f"cannot read {topic}: {meta.error if meta else 'no such topic'}")
        parts = [TopicPartition(topic, p) for p in sorted(meta.partitions)]
        low = _offsets(admin, parts, OffsetSpec.earliest())  # type: ignore[no-untyped-call]  # untyped in the library
        high = _offsets(admin, parts, OffsetSpec.latest())  # type: ignore[no-untyped-call]  # untyped in the library
        committed = _committed(admin, group, parts)
        found.starts += [
            start(
                (topic, tp.partition),
                floors.get((topic, tp.partition)),
                low[tp.partition],
                high[tp.partition],
                committed.get(tp.partition),
            )
            for tp in parts
        ]
    return found


def _offsets(admin: AdminClient, parts: list[TopicPartition], spec: OffsetSpec) -> dict[int, int]:
    futures = admin.list_offsets({tp: spec for tp in parts}, request_timeout=TIMEOUT_S)
    return {tp.partition: int(f.result(TIMEOUT_S).offset) for tp, f in futures.items()}


def _committed(admin: AdminClient, group: str, parts: list[TopicPartition]) -> dict[int, int]:
    request = [ConsumerGroupTopicPartitions(group, parts)]
    result = next(iter(admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT_S).values()))
    return {tp.partition: tp.offset for tp in result.result(TIMEOUT_S).topic_partitions if tp.offset >= 0}


def _spans(found: Plan) -> list[log_reader.Span]:
    return [(s.partition, *s.again) for s in found.starts if s.topic == topics.WAKE and s.moved]


def _wakes(settings: Settings, spans: list[log_reader.Span]) -> Iterator[Message]:
    consumer = Consumer(
        kafka_auth.client_config(settings, kafka_rights.ADMIN)
        | {"group.id": f"wakeful-redrive-reader-{time.time_ns()}", "enable.auto.commit": False}
    )
    try:
        yield from log_reader.messages(consumer, topics.WAKE, spans)
    finally:
        consumer.close()


def named(settings: Settings, found: Plan) -> set[str]:
    """The tasks the wakes to publish again name (their keys): the only ones whose tombstones the
    fold must note for `republish` (state/rebuild_ends.purged_for_good), a set as large as the
    re-drive, not as the log's purged history."""
    spans = _spans(found)
    return (
        {(msg.key() or b"").decode("utf-8", "replace") for msg in _wakes(settings, spans)} if spans else set()
    )


def republish(settings: Settings, found: Plan, purged: set[str], say: Say) -> list[str]:
    """Publish again, byte for byte with their headers and keys, the wakes the gate had read from
    each partition's start, except those of purged tasks; returns what each partition sent."""
    spans = _spans(found)
    if not spans:
        return []
    producer = Producer(producer_config(settings, kafka_rights.ADMIN))
    failed: list[Any] = []
    sent: dict[int, int] = {}
    left: dict[int, int] = {}
    for msg in _wakes(settings, spans):
        partition, key = msg.partition() or 0, msg.key() or b""
        if key.decode("utf-8", "replace") in purged:
            left[partition] = left.get(partition, 0) + 1
            continue
        raw = msg.headers() or []
        headers: list[tuple[str, str | bytes | None]] = (
            list(raw.items()) if isinstance(raw, dict) else list(raw)
        )
        producer.produce(
            topics.WAKE,
            key=key,
            value=msg.value(),
            headers=headers,
            on_delivery=lambda err, _m: failed.append(err) if err is not None else None,
        )
        producer.poll(0)
        sent[partition] = sent.get(partition, 0) + 1
    if producer.flush(30) != 0 or failed:
        raise WakefulError(
            f"{len(failed) or 'some'} wake(s) were not taken by Kafka again ({failed[:1]}): run "
            "`wakeful recover` again before starting the workers (what it sends twice is deduped)"
        )
    said = [
        f"{topics.WAKE}[{p}]: {n} wake(s) from offset {start} sent again"
        + (f", {left[p]} of purged tasks left out" if left.get(p) else "")
        for p, start, _ in spans
        if (n := sent.get(p, 0)) or left.get(p)
    ]
    for line in said:
        say(f"recover: re-drive {line}")
    return said
