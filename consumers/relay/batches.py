"""How the relay packs outbox records into wakeful.log messages: one message per partition per
claim, not one per record (D47). Pure: no Kafka, no Redis.

A task's records go to the partition its id hashes to (murmur2, as every producer here keys by task
id), so one task's records stay in one partition and in write order, as before batching. A record
that cannot ride in a batch (not a JSON object, or larger than a message may be) is handed back to
be dead-lettered with its reason, never published.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import orjson

from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL
from wakeful.state.outbox import Malformed, Pending

# A message's value stays well under the broker's default message.max.bytes (1 MB).
MESSAGE_BYTES = 512 * 1024


@dataclass
class LogMessage:
    """One wakeful.log message: records of tasks that share a partition, in write order."""

    partition: int
    task_ids: set[str] = field(default_factory=set)
    records: list[bytes] = field(default_factory=list)
    size: int = len(LOG_BATCH_HEAD) + len(LOG_BATCH_TAIL)

    def value(self) -> bytes:
        return LOG_BATCH_HEAD + b",".join(self.records) + LOG_BATCH_TAIL


def unfit(record: bytes, limit: int) -> str | None:
    """Why a stored record may not ride in a batch, or None."""
    if len(record) + len(LOG_BATCH_HEAD) + len(LOG_BATCH_TAIL) > limit:
        return f"outbox record of {len(record)} bytes is over the {limit}-byte message limit"
    try:
        parsed = orjson.loads(record)
    except orjson.JSONDecodeError as exc:
        return f"outbox record is not JSON: {exc}"
    if not isinstance(parsed, dict):
        return "outbox record is not a JSON object"
    return None


def pack(
    pending: Sequence[Pending], partition_of: Callable[[str], int], limit: int = MESSAGE_BYTES
) -> tuple[list[LogMessage], list[Malformed]]:
    """The messages that carry these records, in the order to send them, and the records that
    must be dead-lettered instead. A partition's records fill one message up to `limit` bytes,
    then the next."""
    open_: dict[int, LogMessage] = {}
    messages: list[LogMessage] = []
    refused: list[Malformed] = []
    for p in pending:
        partition = partition_of(p.task_id)
        for entry_id, record_id, record in zip(p.entry_ids, p.record_ids, p.records, strict=True):
            reason = unfit(record, limit)
            if reason is not None:
                refused.append(
                    Malformed(p.task_id, entry_id, {b"id": record_id.encode(), b"r": record}, reason)
                )
                continue
            message = open_.get(partition)
            if message is None or message.size + len(record) + 1 > limit:
                message = open_[partition] = LogMessage(partition)
                messages.append(message)
            message.task_ids.add(p.task_id)
            message.records.append(record)
            message.size += len(record) + 1
    return messages, refused
