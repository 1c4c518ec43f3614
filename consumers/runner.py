"""The key-ordered parallel consumer every role runs in.

Consume a batch; split it into one queue per key (task id), in offset order; run the queues'
heads in parallel on a thread pool, wave by wave, so each task has at most one message in flight
while many tasks proceed at once. When the whole batch is handled and everything the handlers
produced is acknowledged by Kafka, store the batch's offsets (enable.auto.offset.store=false):
offsets never run ahead of the work they cover.

A handler returns normally when a message is done: applied, refused, or dead-lettered with its
reason. It raises Retry (or a Redis/Kafka connection error) for a transient failure: the same
message is retried with backoff, never skipped. Any other exception is a poison message: it is
dead-lettered with the error and the batch goes on.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import redis
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from wakeful.core import topics
from wakeful.core.errors import Contention, LeaseLost
from wakeful.core.faults import fault
from wakeful.core.log import Log, librdkafka_config
from wakeful.core.retry import TRANSIENT_IO, Retry, backoff
from wakeful.core.settings import Settings
from wakeful.schemas.logs import DeadLetter
from wakeful.state.acl import CountingConnection

Handler = Callable[[Message], None]
# LeaseLost and Contention are transient too: the next attempt re-takes the lease and re-reads the
# state. So are a Redis that is loading, read-only (failing over), out of memory or busy.
TRANSIENT = (
    Retry,
    LeaseLost,
    Contention,
    redis.exceptions.ReadOnlyError,
    redis.exceptions.OutOfMemoryError,
    redis.exceptions.TryAgainError,
    redis.exceptions.MasterDownError,
    *TRANSIENT_IO,
)


def consumer_config(settings: Settings, group: str) -> dict[str, Any]:
    static = {}
    if settings.instance_id:
        # Static membership: a restarted process with the same identity takes its partitions back
        # at once instead of waiting out the dead member's session.
        static = {"group.instance.id": f"{settings.instance_id}-{group}"}
    return (
        static
        | librdkafka_config()
        | {
            "bootstrap.servers": settings.kafka_bootstrap,
            "group.id": group,
            # Names the role in kafka.log records and in the broker's client lists.
            "client.id": group,
            "enable.auto.commit": True,
            "enable.auto.offset.store": False,
            "auto.commit.interval.ms": 200,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 5,
            "fetch.min.bytes": 1,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 1_000,
        }
    )


def producer_config(settings: Settings) -> dict[str, Any]:
    return {
        "bootstrap.servers": settings.kafka_bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 1,
        # The Java client's key hashing, so every producer (any client) puts a task on one partition.
        "partitioner": "murmur2_random",
    } | librdkafka_config()


class DeliveryFailures:
    """Counts produce requests the broker finally refused (after librdkafka's own retries).

    flush() returning 0 only means nothing is queued any more, failed messages included; a batch
    whose output was not all delivered must not have its offsets stored.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self.last: str = ""

    def record(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            with self._lock:
                self._count += 1
                self.last = str(err)

    def take(self) -> int:
        with self._lock:
            count, self._count = self._count, 0
            return count


def make_producer(settings: Settings) -> tuple[Producer, DeliveryFailures]:
    failures = DeliveryFailures()
    config = producer_config(settings) | {"on_delivery": failures.record, "delivery.report.only.error": True}
    return Producer(config), failures


@dataclass
class Counters:
    messages: int = 0
    batches: int = 0
    retries: int = 0
    dead_letters: int = 0


class Runner:
    def __init__(
        self,
        role: str,
        topic: str,
        handler: Handler,
        consumer: Consumer,
        producer: Producer,
        *,
        log: Log,
        threads: int = 16,
        batch: int = 500,
        after_batch: Callable[[], None] | None = None,
        failures: DeliveryFailures | None = None,
    ) -> None:
        self.role = role
        self.topic = topic
        self.handler = handler
        self.consumer = consumer
        self.producer = producer
        self.log = log
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix=role)
        self.batch = batch
        self.after_batch = after_batch  # runs once the batch's output is durable, before offsets
        self.failures = failures or DeliveryFailures()
        self.counters = Counters()

    def run(self, stop: threading.Event) -> None:
        # Start-up objects never die: keep them out of the collector's way, and collect young
        # objects less often, so a full collection does not stall a batch for tens of ms.
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)
        self.consumer.subscribe([self.topic])
        try:
            while not stop.is_set():
                msgs = self._next_batch()
                good = [m for m in msgs if not self._is_error(m)]
                if good:
                    fault(f"{self.role}.after_consume")
                    self.run_batch(good, stop)
                self.producer.poll(0)
        finally:
            self.pool.shutdown(wait=True)
            self.producer.flush(30)
            self.consumer.close()
            self.log(
                "role.stop",
                messages=self.counters.messages,
                batches=self.counters.batches,
                retries=self.counters.retries,
                dead_letters=self.counters.dead_letters,
                redis_round_trips=CountingConnection.round_trips,
            )

    def _next_batch(self) -> list[Message]:
        """Wait for one message, then take whatever else is already fetched, without waiting:
        low latency when idle, large batches under load."""
        first = self.consumer.poll(0.05)
        if first is None:
            return []
        return [first, *self.consumer.consume(self.batch - 1, 0)]

    def run_batch(self, msgs: list[Message], stop: threading.Event) -> None:
        queues: OrderedDict[bytes, deque[Message]] = OrderedDict()
        for m in msgs:
            queues.setdefault(m.key() or b"", deque()).append(m)
        while queues:
            heads = [q.popleft() for q in queues.values()]
            if len(heads) == 1:  # no thread hand-off for a lone message: it only adds latency
                self._handle(heads[0], stop)
            else:
                list(self.pool.map(lambda m: self._handle(m, stop), heads))
            for key in [k for k, q in queues.items() if not q]:
                del queues[key]
        # Everything the handlers produced must be durable before the offsets say "done".
        while self.producer.flush(5) > 0:
            self.log("runner.flush_waiting", role=self.role)
        failed = self.failures.take()
        if failed:
            # Some output never reached Kafka: do not store these offsets; read the batch again.
            self.log("runner.redo_batch", failed=failed, error=self.failures.last, messages=len(msgs))
            for tp in _first_offsets(msgs):
                self.consumer.seek(tp)
            return
        if self.after_batch is not None:
            self._retrying(self.after_batch, stop)
        fault(f"{self.role}.before_offsets")
        self.consumer.store_offsets(offsets=_next_offsets(msgs))
        self.counters.batches += 1
        self.counters.messages += len(msgs)

    def _retrying(self, step: Callable[[], None], stop: threading.Event) -> None:
        attempt = 0
        while True:
            try:
                step()
                return
            except TRANSIENT as exc:
                attempt += 1
                self.log("runner.retry", attempt=attempt, error=repr(exc), step="after_batch")
                time.sleep(backoff(attempt))

    def _handle(self, msg: Message, stop: threading.Event) -> None:
        attempt = 0
        while True:
            try:
                self.handler(msg)
                return
            except TRANSIENT as exc:
                attempt += 1
                self.counters.retries += 1
                base = exc.after if isinstance(exc, Retry) and exc.after else 0.05
                wait = backoff(attempt, base=base)
                if attempt in (1, 10) or attempt % 50 == 0:
                    self.log("runner.retry", attempt=attempt, error=repr(exc), offset=msg.offset())
                time.sleep(wait)
            except Exception as exc:  # a poison message: dead-letter it, never crash the consumer
                self.dead_letter(msg, f"{self.role} failed on this message: {exc!r}")
                return

    def dead_letter(self, msg: Message, reason: str, task_id: str | None = None) -> None:
        value = msg.value() or b""
        letter = DeadLetter(
            source=self.role,
            reason=reason,
            task_id=task_id,
            raw=value.decode("utf-8", "replace"),
            at=datetime.now(UTC),
        )
        self.producer.produce(topics.DLQ, key=msg.key(), value=letter.encode())
        self.counters.dead_letters += 1
        self.log("dead_letter", reason=reason, topic=msg.topic(), offset=msg.offset())

    def _is_error(self, msg: Message) -> bool:
        err = msg.error()
        if err is None:
            return False
        if err.code() != KafkaError._PARTITION_EOF:
            self.log("runner.consume_error", error=str(err))
        return True


def _first_offsets(msgs: list[Message]) -> list[TopicPartition]:
    """Per partition, the lowest offset in the batch (where to read it again from)."""
    low: dict[tuple[str, int], int] = {}
    for m in msgs:
        key = (m.topic() or "", m.partition() or 0)
        low[key] = min(low.get(key, m.offset() or 0), m.offset() or 0)
    return [TopicPartition(topic, partition, offset) for (topic, partition), offset in low.items()]


def _next_offsets(msgs: list[Message]) -> list[TopicPartition]:
    """Per partition, the offset after the highest one handled (what a commit records)."""
    top: dict[tuple[str, int], int] = {}
    for m in msgs:
        key = (m.topic() or "", m.partition() or 0)
        top[key] = max(top.get(key, -1), m.offset() or 0)
    return [TopicPartition(topic, partition, offset + 1) for (topic, partition), offset in top.items()]
