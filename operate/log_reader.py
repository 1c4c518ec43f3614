"""Reading wakeful.log from its first offset to where it ended when the read began, as the admin:
what `wakeful recover` folds (D70). Every message must carry the relay's channel tag
(core/provenance.py) and its Ed25519 log signature (D72), checked by the code `wakeful audit
--verify` checks it with (core/log_signing.check): a message either does not hold is named and
skipped, never folded in (D92: the channel key is a secret every relay login holds, the log key's
private half is in the relay's process alone). Beside the records, the read notes where each
change's input came from and the relay's watermarks (D87, state/redrive.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from wakeful.core import kafka_auth, kafka_rights, log_signing, provenance, topics
from wakeful.core.errors import DecodeError
from wakeful.core.settings import Settings
from wakeful.schemas.changelog import LogItem, Mark, Wanted, log_items, log_marks
from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL
from wakeful.schemas.redrive import WATERMARK_FIELD, LogWatermark, MessageSource
from wakeful.state.redrive import Coverage

Progress = Callable[[int, int], None]  # (messages read, messages to read)
T = TypeVar("T")
# A message's value -> its records, why any could not be read, how many were passed over.
Decode = Callable[[bytes], tuple[list[T], list[str], int]]
# What one message's records tell the re-drive's coverage (D87): (partition, offset, records).
Cover = Callable[[int, int, list[T]], None]
PROGRESS_EVERY_S = 2.0
STALL_S = 60.0  # no message for this long while the partition has more: the read fails, loudly
UNSIGNED_NAMED = 20  # messages whose log signature fails, named one by one; the rest counted


@dataclass
class Read:
    """What a read of the log found besides its records: messages it skipped, and why."""

    messages: int = 0
    total: int = 0
    refused: list[str] = field(default_factory=list)  # "<partition>:<offset>: why"
    passed_over: int = 0  # records not decoded: of tasks the reader did not want
    coverage: Coverage = field(default_factory=Coverage)  # how far back to re-drive (D87)
    log_keys: dict[str, bytes] = field(default_factory=dict)  # the relay's public log keys
    unvouched: list[str] = field(default_factory=list)  # "<partition>:<offset>: why" of watermarks not taken
    # Messages whose log signature does not hold (D92): how many, and the first UNSIGNED_NAMED.
    unsigned: int = 0
    unsigned_named: list[str] = field(default_factory=list)  # "<partition>:<offset>: why"
    # Partitions where a message with a valid log signature was read; unsigned messages before the
    # first were written before the relay signed the log (D72): not folded either, but no forgery,
    # since nothing can be appended before a message already there.
    signed_in: set[int] = field(default_factory=set)
    unsigned_before_d72: int = 0

    def not_signed(self, partition: int, where: str, why: str) -> None:
        if partition not in self.signed_in:
            self.unsigned_before_d72 += 1
            return
        self.unsigned += 1
        if len(self.unsigned_named) < UNSIGNED_NAMED:
            self.unsigned_named.append(f"{where}: {why}")


# The consumer's read-ahead, bounded (D86): librdkafka queues up to 64 MiB and 100,000 messages
# ahead of the reader by default, which a fold of the log never needs; a fetch of 16 MiB from one
# partition keeps a read of one partition at a time as fast as reading them together.
READ_AHEAD = {
    "queued.max.messages.kbytes": 32768,
    "queued.min.messages": 1000,
    "fetch.max.bytes": 32 << 20,
    "max.partition.fetch.bytes": 16 << 20,
}
Span = tuple[int, int, int]  # a partition, its first offset, and its end (not read) when the read began


def read_log(
    settings: Settings, read: Read, progress: Progress | None = None, topic: str = topics.LOG
) -> Iterator[list[LogItem]]:
    """The records of each message of `topic`, partition by partition, in offset order (one task's
    records are in one partition, in commit order). `read` collects what was skipped."""
    decode: Decode[LogItem] = log_items
    for _, _, items in _read(
        settings, read, spans(settings, topic), progress, one_by_one=False, decode=decode, topic=topic
    ):
        yield items


def spans(settings: Settings, topic: str = topics.LOG) -> list[Span]:
    """Each partition of `topic` that holds messages, with its first offset and its end now."""
    consumer = Consumer(_config(settings))
    try:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None:
            raise KafkaException(f"cannot read {topic}: {meta.error if meta else 'no such topic'}")
        found = []
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            if high > low:
                found.append((p, low, high))
        return found
    finally:
        consumer.close()


def read_positioned(
    settings: Settings,
    read: Read,
    spans: list[Span],
    progress: Progress | None = None,
    *,
    one_by_one: bool = False,
    wanted: Wanted | None = None,
) -> Iterator[tuple[int, int, list[LogItem]]]:
    """(partition, offset, records) of each message of wakeful.log in `spans`, each partition in
    offset order: the partitions read together, or `one_by_one` in the order given. Records of a
    task `wanted` refuses are passed over undecoded (counted in `read.passed_over`). `read` counts
    the messages and collects what was skipped."""
    decode: Decode[LogItem] = lambda value: log_items(value, wanted)  # noqa: E731
    yield from _read(settings, read, spans, progress, one_by_one=one_by_one, decode=decode)


def read_marks(
    settings: Settings, read: Read, spans: list[Span], progress: Progress | None = None
) -> Iterator[tuple[int, int, list[Mark]]]:
    """(partition, offset, marks) of each message of wakeful.log in `spans`: each record's task id
    and each tombstone, the rest not decoded (the first read of `wakeful recover`). It alone feeds
    `read.coverage` (D87): each change's source and the relay's watermarks, each message's once,
    before the second read restores any task."""
    sources: list[MessageSource] = []

    def decode(value: bytes) -> tuple[list[Mark], list[str], int]:
        sources.clear()
        return log_marks(value, sources)

    def cover(partition: int, offset: int, _: list[Mark]) -> None:
        for source in sources:
            read.coverage.change(partition, offset, source)

    yield from _read(settings, read, spans, progress, one_by_one=False, decode=decode, cover=cover)


def _read(
    settings: Settings,
    read: Read,
    spans: list[Span],
    progress: Progress | None,
    *,
    one_by_one: bool,
    decode: Decode[T],
    topic: str = topics.LOG,
    cover: Cover[T] | None = None,
) -> Iterator[tuple[int, int, list[T]]]:
    role_keys = provenance.load_keys(settings, kafka_rights.ADMIN)
    read.log_keys = read.log_keys or log_signing.public_log_keys(settings)
    consumer = Consumer(_config(settings))
    try:
        read.total += sum(high - low for _, low, high in spans)
        said = [time.monotonic()]
        groups = [[span] for span in spans] if one_by_one else [spans]
        stream = (msg for group in groups for msg in messages(consumer, topic, group))
        for msg in stream:
            read.messages += 1
            items = _decoded(role_keys, topic, msg, read, decode, cover=cover)
            if items:
                yield msg.partition() or 0, msg.offset() or 0, items
            if progress is not None and time.monotonic() - said[0] >= PROGRESS_EVERY_S:
                progress(read.messages, read.total)
                said[0] = time.monotonic()
        if progress is not None:
            progress(read.messages, read.total)
    finally:
        consumer.close()


def _config(settings: Settings) -> dict[str, Any]:
    return (
        kafka_auth.client_config(settings, kafka_rights.ADMIN)
        | READ_AHEAD
        | {
            "group.id": f"wakeful-log-reader-{time.time_ns()}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


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
        # One message at a time: a batch waits for its count or its time-out, whichever is first,
        # and these messages are up to 512 KiB each (relay_batches): a few fill the read-ahead.
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            raise KafkaException(msg.error())
        stalled = time.monotonic() + STALL_S
        partition, offset = msg.partition() or 0, msg.offset() or 0
        if partition not in ends:  # fetched for an assignment read before this one
            continue
        left[partition] = max(left[partition], offset + 1)
        if offset < ends[partition]:
            yield msg


def _items(role_keys: provenance.RoleKeys, topic: str, msg: Message, read: Read) -> list[LogItem]:
    decode: Decode[LogItem] = log_items
    return _decoded(role_keys, topic, msg, read, decode)


def _decoded(
    role_keys: provenance.RoleKeys,
    topic: str,
    msg: Message,
    read: Read,
    decode: Decode[T],
    *,
    cover: Cover[T] | None = None,
) -> list[T]:
    where = f"{msg.partition()}:{msg.offset()}"
    value: bytes = msg.value() or b""
    signer = role_keys.sender(topic, msg.key() or b"", value, msg.headers())
    if isinstance(signer, provenance.Forged) or signer != "relay":
        if not isinstance(signer, provenance.Forged):
            signer = provenance.Forged(f"signed by {signer}, not the relay")
        read.refused.append(f"{where}: {signer.reason}")
        return []
    try:
        items, problems, passed = decode(value)
    except DecodeError as exc:
        items, problems, passed = [], [exc.reason], 0
    # Whatever the read takes from the message (a record, a problem to name, a watermark) only
    # from bytes the relay signed (D92). A message whose records the read passes over, all of tasks
    # purged for good, gives nothing: its signature is not worth its cost (half the second read's).
    watermarked = cover is not None and WATERMARK_FIELD.encode() in value
    if not items and not problems and not watermarked:
        read.passed_over += passed
        return []
    checked = log_signing.check(read.log_keys, topic, value, msg.headers(), (LOG_BATCH_HEAD, LOG_BATCH_TAIL))
    if checked.reason is not None:  # not the relay's signed bytes: none of its records is read
        at = f" (record(s) at {', '.join(map(str, checked.changed[:10]))})" if checked.changed else ""
        read.not_signed(msg.partition() or 0, where, checked.reason + at)
        return []
    read.signed_in.add(msg.partition() or 0)
    read.refused += [f"{where}: {problem}" for problem in problems]
    read.passed_over += passed
    if cover is not None:
        cover(msg.partition() or 0, msg.offset() or 0, items)
        if watermarked:
            _watermarks(checked, read, where)
    return items


def _watermarks(checked: log_signing.Checked, read: Read, where: str) -> None:
    """The relay's watermarks in a message whose log signature holds, each read from the bytes it
    vouches for: a watermark tells recover how little it may re-drive, so a forged one would lose
    events."""
    for _, raw in checked.vouched:
        if WATERMARK_FIELD.encode() not in raw:
            continue
        try:
            read.coverage.watermark(LogWatermark.decode(raw))
        except DecodeError as exc:
            if b'"' + WATERMARK_FIELD.encode() + b'"' in raw and b'"task_id"' not in raw:
                read.unvouched.append(f"{where}: an unreadable watermark: {exc.reason}")
