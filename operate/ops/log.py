"""What the ops page reads from Kafka (D76): the tails of wakeful.log and wakeful.dlq, bounded.

Each read takes at most TAIL messages per partition, from the end back, as the admin, in a group of
its own that commits nothing. The log's records carry what Redis no longer holds once a task has
moved on: when a wait for an approval began and when the approval came (each change's `at`), and
each effect's action record (its intent, finish and the calls that found its tool unavailable).
`activity()` turns them into approval latency, wake-to-effect latency and retries: pure, tested
without Kafka. A log message without the relay's channel tag is skipped, as `wakeful recover` does.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from wakeful.core import kafka_auth, kafka_rights, provenance, topics
from wakeful.core.errors import DecodeError, WakefulError
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings
from wakeful.operate.dlq.read import Letter, letter_of
from wakeful.schemas.changelog import ActionRecord, LogItem, log_items
from wakeful.schemas.logs import ActionLogEntry, ActionStatus, OutboxRecord

TAIL = 2000  # messages per partition, at most, in one read of a tail
TIMEOUT_S = 5.0
APPROVAL = "approval"


def tail(settings: Settings, topic: str, per_partition: int = TAIL) -> Iterator[Message]:
    """The last `per_partition` messages of each partition of `topic`, as of now."""
    config = kafka_auth.client_config(settings, kafka_rights.ADMIN) | librdkafka_config()
    consumer = Consumer(
        config | {"group.id": f"wakeful-ops-{uuid.uuid4().hex[:12]}", "enable.auto.commit": False}
    )
    try:
        meta = consumer.list_topics(topic, timeout=TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None:
            raise WakefulError(f"topic {topic} is not there: `wakeful dev up` creates it")
        spans = {}
        for p in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)
            if high > low:
                spans[p] = (max(low, high - per_partition), high)
        if not spans:
            return
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in spans.items()])
        left = {p: start for p, (start, _) in spans.items()}
        deadline = time.monotonic() + TIMEOUT_S
        while any(left[p] < spans[p][1] for p in spans) and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                if msg.error() is not None:
                    continue
                p, offset = msg.partition() or 0, msg.offset() or 0
                if p in spans and offset < spans[p][1]:
                    left[p] = max(left[p], offset + 1)
                    yield msg
    except KafkaException as exc:
        raise WakefulError(f"cannot read {topic}: {exc.args[0]}") from exc
    finally:
        consumer.close()


def dead_letters(settings: Settings, newest: int = 50) -> list[Letter]:
    """The newest `newest` letters of wakeful.dlq, newest first."""
    letters = [letter_of(msg) for msg in tail(settings, topics.DLQ, newest)]
    letters.sort(
        key=lambda letter: (letter.written.timestamp() if letter.written else 0.0, letter.offset),
        reverse=True,
    )
    return letters[:newest]


def log_tail(settings: Settings, per_partition: int = TAIL) -> tuple[list[LogItem], int]:
    """The records of the log's tail, each partition's in commit order, and how many messages were
    skipped (no relay channel tag, or unreadable)."""
    keys = provenance.load_keys(settings, kafka_rights.ADMIN)
    items: list[LogItem] = []
    skipped = 0
    for msg in tail(settings, topics.LOG, per_partition):
        value = msg.value() or b""
        if keys.sender(topics.LOG, msg.key() or b"", value, msg.headers()) != "relay":
            skipped += 1
            continue
        try:
            items += log_items(value)[0]
        except DecodeError:
            skipped += 1
    return items, skipped


class LogTail:
    """The activity of the log's tail, read again by `refresh()` (the page's sweep thread calls it),
    so that no page waits on Kafka for it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.activity = Activity()
        self.skipped = 0
        self.at: datetime | None = None
        self.error = ""

    def refresh(self) -> None:
        try:
            items, skipped = log_tail(self.settings)
        except WakefulError as exc:
            self.error = str(exc)
            return
        self.activity, self.skipped, self.at, self.error = activity(items), skipped, datetime.now(UTC), ""


@dataclass
class Activity:
    """What the log's tail says about approvals, effects and retries (durations in ms)."""

    approvals: list[tuple[datetime, float]] = field(default_factory=list)  # (approved at, waited)
    effects: list[tuple[datetime, float]] = field(default_factory=list)  # (finished at, wake to effect)
    retried: list[tuple[str, str, int]] = field(default_factory=list)  # (task, op key, unavailable calls)
    failed: list[tuple[str, str, str]] = field(default_factory=list)  # (task, op key, reason)


def activity(items: Iterable[LogItem]) -> Activity:
    """Approval latency: from the change that began a task's approval wait to the change that bound
    the approval. Wake to effect: from the last change of the task before the effect's intent (the
    wake that led to it) to the effect's finish. Retries: effects whose tool was found unavailable,
    and effects that failed. Only what the tail holds is counted:
    a wait that began before it is not."""
    out = Activity()
    waiting: dict[str, datetime] = {}  # task -> when its approval wait began
    changes: dict[str, list[datetime]] = {}  # task -> when each of its changes in the tail was made
    counted: set[tuple[str, str]] = set()
    for item in items:
        if isinstance(item, OutboxRecord):
            task = item.task_id
            if item.approval is not None and task in waiting:
                out.approvals.append((item.at, _ms(item.at - waiting.pop(task))))
            if any(w.wait_for == APPROVAL for w in item.waits):
                waiting.setdefault(task, item.at)
            else:
                waiting.pop(task, None)
            changes.setdefault(task, []).append(item.at)
        elif isinstance(item, ActionRecord):
            _action(out, item.action, changes.get(item.task_id, []), counted)
    return out


def _action(
    out: Activity, entry: ActionLogEntry, changes: list[datetime], counted: set[tuple[str, str]]
) -> None:
    key = (entry.task_id, entry.op_key)
    if entry.attempts and key not in counted:
        counted.add(key)
        out.retried.append((entry.task_id, entry.op_key, entry.attempts))
    if entry.status == ActionStatus.FAILED:
        out.failed.append((entry.task_id, entry.op_key, entry.reason or ""))
    if entry.status != ActionStatus.SUCCEEDED or entry.finished_at is None:
        return
    # The change that woke the task for this step: its last one before the step's intent (the
    # change that closes the step is on the log before the action's outcome: the same transaction).
    woke = max((at for at in changes if at <= entry.started_at), default=None)
    if woke is not None:
        out.effects.append((entry.finished_at, _ms(entry.finished_at - woke)))


def _ms(delta: object) -> float:
    return float(delta.total_seconds() * 1000)  # type: ignore[attr-defined]


def per_minute_median(
    points: list[tuple[datetime, float]], now: datetime, minutes: int = 60
) -> list[float | None]:
    """The median of the values that fall in each of the last `minutes` minutes, oldest first."""
    buckets: list[list[float]] = [[] for _ in range(minutes)]
    for at, value in points:
        ago = int((now - at).total_seconds() // 60)
        if 0 <= ago < minutes:
            buckets[minutes - 1 - ago].append(value)
    return [sorted(b)[len(b) // 2] if b else None for b in buckets]


def percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
