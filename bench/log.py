"""What wakeful.log costs per task, for `wakeful bench` (D70): the bytes, messages and records the
relay published for a run, read back from the topic between two sets of offsets.
"""

from __future__ import annotations

import time
from typing import Any, cast

import redis
from confluent_kafka import Consumer, TopicPartition

from wakeful.core import kafka_auth, topics
from wakeful.core.log import librdkafka_config
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.schemas.logs import ACTION_FIELD, QUARANTINE_FIELD, batch_items
from wakeful.state import keys

Marks = dict[int, int]


def _consumer(settings: Settings) -> Consumer:
    config = kafka_auth.client_config(settings, kafka_auth.ADMIN) | librdkafka_config()
    return Consumer(config | {"group.id": f"bench-log-{time.time_ns()}", "enable.auto.commit": False})


def marks(settings: Settings) -> Marks:
    """Each partition's end offset of wakeful.log now."""
    consumer = _consumer(settings)
    try:
        parts = consumer.list_topics(topics.LOG, timeout=10).topics[topics.LOG].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topics.LOG, p), timeout=10)[1] for p in parts
        }
    finally:
        consumer.close()


def drained(admin: redis.Redis, timeout: float = 60.0) -> bool:
    """Wait until the relay has published every change (the log is off the tasks' critical path)."""

    def empty() -> bool:
        if admin.scard(keys.OUTBOX_DIRTY):
            return False
        return not any(admin.xlen(k) for k in admin.scan_iter(match=keys.PATTERN_OUTBOX, count=1000))

    return wait_until(empty, timeout, interval=0.2)


def cost(settings: Settings, admin: redis.Redis, since: Marks, tasks: int) -> dict[str, Any]:
    """Bytes (values, keys and headers), messages and records of each kind on wakeful.log from
    `since` to its end once the relay has published every change, per task."""
    drained(admin)  # the log is off the tasks' critical path: it may lag the last effects a little
    until = marks(settings)
    consumer = _consumer(settings)
    size = messages = changes = actions = others = 0
    try:
        spans = {p: (since.get(p, 0), end) for p, end in until.items() if end > since.get(p, 0)}
        consumer.assign([TopicPartition(topics.LOG, p, low) for p, (low, _) in spans.items()])
        left = {p: low for p, (low, _) in spans.items()}
        deadline = time.monotonic() + 120
        while any(left[p] < spans[p][1] for p in spans) and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.5):
                p, offset = msg.partition() or 0, msg.offset() or 0
                if msg.error() is not None or offset >= spans[p][1]:
                    continue
                left[p] = offset + 1
                value = msg.value() or b""
                size += len(value) + len(msg.key() or b"")
                headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
                size += sum(len(name) + len(raw or b"") for name, raw in headers)
                messages += 1
                for item in batch_items(value):
                    if ACTION_FIELD in item:
                        actions += 1
                    elif QUARANTINE_FIELD in item:
                        others += 1
                    else:
                        changes += 1
    finally:
        consumer.close()
    per = max(1, tasks)
    return {
        "bytes": round(size / per),
        "messages": round(messages / per, 2),
        "changes": round(changes / per, 2),
        "action_records": round(actions / per, 2),
        "other_records": round(others / per, 2),
    }
