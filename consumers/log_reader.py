"""Reading wakeful.log from its first offset to where it ended when the read began, as the admin:
what `wakeful recover` folds (D70). Every message must carry the relay's channel tag
(core/provenance.py): one that does not is named and skipped, never folded in. Beside the records,
the read notes where each change's input came from and the relay's watermarks (D87,
state/redrive.py); a watermark counts only with a valid log signature too (D72).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from wakeful.core import kafka_auth, kafka_rights, log_signing, provenance, topics
from wakeful.core.errors import DecodeError
from wakeful.core.settings import Settings
from wakeful.schemas.changelog import LogItem, log_items
from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL, OutboxRecord
from wakeful.schemas.redrive import WATERMARK_FIELD, LogWatermark
from wakeful.schemas.tombstone import PurgeRecord
from wakeful.state.redrive import Coverage

Progress = Callable[[int, int], None]  # (messages read, messages to read)
PROGRESS_EVERY_S = 2.0
STALL_S = 60.0  # no message for this long while the partition has more: the read fails, loudly


@dataclass
class Read:
    """What a read of the log found besides its records: messages it skipped, and why."""

    messages: int = 0
    total: int = 0
    refused: list[str] = field(default_factory=list)  # "<partition>:<offset>: why"
    coverage: Coverage = field(default_factory=Coverage)  # how far back to re-drive (D87)
    log_keys: dict[str, bytes] = field(default_factory=dict)  # the relay's public log keys


def read_log(
    settings: Settings, read: Read, progress: Progress | None = None, topic: str = topics.LOG
) -> Iterator[list[LogItem]]:
    """The records of each message of `topic`, partition by partition, in offset order (one task's
    records are in one partition, in commit order). `read` collects what was skipped."""
    role_keys = provenance.load_keys(settings, kafka_rights.ADMIN)
    read.log_keys = log_signing.public_log_keys(settings)
    config = kafka_auth.client_config(settings, kafka_rights.ADMIN) | {
        "group.id": f"wakeful-log-reader-{time.time_ns()}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    consumer = Consumer(config)
    try:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None:
            raise KafkaException(f"cannot read {topic}: {meta.error if meta else 'no such topic'}")
        spans = []
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                spans.append((p, low, high))
        read.total = sum(high - low for _, low, high in spans)
        said = [time.monotonic()]
        for msg in messages(consumer, topic, spans):
            read.messages += 1
            items = _items(role_keys, topic, msg, read)
            if items:
                yield items
            if progress is not None and time.monotonic() - said[0] >= PROGRESS_EVERY_S:
                progress(read.messages, read.total)
                said[0] = time.monotonic()
        if progress is not None:
            progress(read.messages, read.total)
    finally:
        consumer.close()


def partition_messages(
    settings: Settings, partition_of: Callable[[int], int], topic: str = topics.LOG
) -> Iterator[Message]:
    """Every message of one partition of `topic`, as the admin, from its first offset to where it
    ended when the read began: `partition_of(partitions)` names it (wakeful audit, D72)."""
    config = kafka_auth.client_config(settings, kafka_rights.ADMIN) | {
        "group.id": f"wakeful-log-reader-{time.time_ns()}",
        "enable.auto.commit": False,
    }
    consumer = Consumer(config)
    try:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None:
            raise KafkaException(f"cannot read {topic}: {meta.error if meta else 'no such topic'}")
        p = partition_of(len(meta.partitions))
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
        if high > low:
            yield from messages(consumer, topic, [(p, low, high)])
    finally:
        consumer.close()


def messages(consumer: Consumer, topic: str, spans: list[tuple[int, int, int]]) -> Iterator[Message]:
    """Every partition's messages from its `low` up to (not including) its `high`, read together:
    each partition's in offset order (a task's records are in one partition)."""
    consumer.assign([TopicPartition(topic, p, low) for p, low, _ in spans])
    ends = {p: high for p, _, high in spans}
    left = {p: low for p, low, _ in spans}  # the next offset still to read, per partition
    stalled = time.monotonic() + STALL_S
    while any(left[p] < ends[p] for p in ends):
        if time.monotonic() > stalled:
            behind = {p: f"{left[p]}/{ends[p]}" for p in ends if left[p] < ends[p]}
            raise KafkaException(f"{topic} gave nothing for {STALL_S:.0f} s at {behind}: is the broker up?")
        for msg in consumer.consume(500, 0.5):
            if msg.error() is not None:
                raise KafkaException(msg.error())
            stalled = time.monotonic() + STALL_S
            partition, offset = msg.partition() or 0, msg.offset() or 0
            left[partition] = max(left[partition], offset + 1)
            if offset < ends[partition]:
                yield msg


def _items(role_keys: provenance.RoleKeys, topic: str, msg: Message, read: Read) -> list[LogItem]:
    where = f"{msg.partition()}:{msg.offset()}"
    value: bytes = msg.value() or b""
    signer = role_keys.sender(topic, msg.key() or b"", value, msg.headers())
    if isinstance(signer, provenance.Forged) or signer != "relay":
        if not isinstance(signer, provenance.Forged):
            signer = provenance.Forged(f"signed by {signer}, not the relay")
        read.refused.append(f"{where}: {signer.reason}")
        return []
    try:
        items, problems = log_items(value)
    except DecodeError as exc:
        read.refused.append(f"{where}: {exc.reason}")
        return []
    read.refused += [f"{where}: {problem}" for problem in problems]
    partition, offset = msg.partition() or 0, msg.offset() or 0
    for item in items:
        if isinstance(item, PurgeRecord):
            read.coverage.tombstone(item.task_id)
        elif isinstance(item, OutboxRecord):
            read.coverage.lives(item.task_id)
            if item.source is not None:
                read.coverage.change(partition, offset, item.source)
    if WATERMARK_FIELD.encode() in value:
        _watermarks(topic, msg, read, where)
    return items


def _watermarks(topic: str, msg: Message, read: Read, where: str) -> None:
    """The relay's watermarks in a message, each read only from bytes its log signature vouches
    for: a watermark tells recover how little it may re-drive, so a forged one would lose events."""
    value: bytes = msg.value() or b""
    checked = log_signing.check(read.log_keys, topic, value, msg.headers(), (LOG_BATCH_HEAD, LOG_BATCH_TAIL))
    if checked.reason is not None:
        read.refused.append(f"{where}: a watermark not taken: {checked.reason}")
        return
    for _, raw in checked.vouched:
        if WATERMARK_FIELD.encode() not in raw:
            continue
        try:
            read.coverage.watermark(LogWatermark.decode(raw))
        except DecodeError as exc:
            if b'"' + WATERMARK_FIELD.encode() + b'"' in raw and b'"task_id"' not in raw:
                read.refused.append(f"{where}: an unreadable watermark: {exc.reason}")
