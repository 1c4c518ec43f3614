"""The outbox relay: publishes every Progress change to wakeful.log, then trims it from Redis.

Records are trimmed only after the broker acknowledged them (acks=all, idempotent producer). A
crash between publish and trim republishes the same records on restart: wakeful.log is
at-least-once, and readers dedupe by record_id ("<task_id>:<state_version>").
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import KafkaError, KafkaException, Message, Producer

from wakeful.consumers.kafka import client as kafka_client
from wakeful.consumers.kafka import retention as redrive_retention
from wakeful.consumers.kafka import task_gauges
from wakeful.consumers.kafka.failures import TRANSIENT_IO, forever
from wakeful.consumers.kafka.producing import DEAD_LETTER_MAX_BYTES, producer_config
from wakeful.consumers.relay import batches as relay_batches
from wakeful.consumers.relay import memory_write as relay_memory
from wakeful.consumers.relay import watermark as relay_watermark
from wakeful.core import index_signing, metrics, topics
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.core.log_signing import LogSigner, load_log_signer
from wakeful.core.provenance import RoleSigner, load_signer
from wakeful.core.settings import Settings
from wakeful.core.tracing import inject, publishing
from wakeful.schemas.logs import DeadLetter
from wakeful.state import acl, keys
from wakeful.state.index import Index
from wakeful.state.memory import MemoryStore
from wakeful.state.outbox import Malformed, Outbox, Pending

BATCH_TARGET = 100  # records per claim worth publishing without waiting
# The wait after a claim that found less than BATCH_TARGET: at a trickle a claim gathers this
# long's records into one message per partition. After claims that found nothing it doubles, up
# to IDLE_MAX_S: an idle relay asks Redis twice a second, and the first records after a quiet
# spell reach the log at most that late, never a task's effect (D78).
IDLE_S = 0.1
IDLE_MAX_S = 0.5
_DOUBLINGS = 16  # past IDLE_MAX_S long before: a float power that cannot overflow however long it idles


def idle_wait(empty_in_a_row: int) -> float:
    """How long the relay waits before its next claim, after `empty_in_a_row` claims that found
    nothing (0: the last one found something)."""
    return min(IDLE_MAX_S, IDLE_S * 2.0 ** min(max(0, empty_in_a_row - 1), _DOUBLINGS))


class Relay:
    def __init__(
        self,
        outbox: Outbox,
        producer: Producer,
        log: Log,
        topic: str = topics.LOG,
        signer: RoleSigner | None = None,
        *,
        index: Index | None = None,
        memory: MemoryStore | None = None,
        log_signer: LogSigner | None = None,
        sweep_s: float = keys.OUTBOX_SWEEP_S,
    ) -> None:
        self.outbox = outbox
        self.index = index  # the task index it keeps (state/index.py), if any
        self.memory = memory  # memory's write door (state/memory.py), if it keeps memory
        self.producer = producer
        self.log = log
        self.topic = topic
        self.signer = signer  # a reader of the log can tell the relay's records from anyone's
        self.log_signer = log_signer  # and anyone with its public key can too (D72)
        self.published = 0  # records acknowledged
        self.messages = 0  # wakeful.log messages they went in
        self.partitions: int | None = None  # of the topic, read when first needed and at each sweep
        self.sweep_s = sweep_s
        # Per log partition, the offset after the last message the broker acknowledged (D87).
        self.appended: dict[int, int] = {}
        self.watermarks = relay_watermark.Watermarks(f"{socket.gethostname()}-{os.getpid()}")
        # How long the re-driven topics keep messages (redrive_retention.kept), read at start-up.
        self.kept: dict[str, redrive_retention.Kept | None] = {}

    def run_once(self, flush_timeout: float = 30.0) -> int:
        """Publish what one claim of the index finds; returns the records acknowledged."""
        task_ids = self.outbox.claim()
        if not task_ids:
            return 0
        pending, malformed = self.outbox.read(task_ids)
        messages, unfit = relay_batches.pack(pending, self._partition_of)
        traces = {p.task_id: p.trace for p in pending if p.trace}  # each task's trace, if it has one
        failed: set[str] = set()  # tasks with a message or letter the broker did not acknowledge

        def delivered(tasks: Iterable[str], err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failed.update(tasks)
            else:
                self._appended(msg)

        for bad in [*malformed, *unfit]:
            self._dead_letter(bad, functools.partial(delivered, (bad.task_id,)))
        half = len(messages) // 2
        for sent, message in enumerate(messages, start=1):
            traced = [(t, traces[t]) for t in sorted(message.task_ids) if t in traces] if traces else []
            with publishing("wakeful.relay publish", traced, records=len(message.records)):
                self._produce(message, functools.partial(delivered, message.task_ids))
            if sent == half:
                self.producer.flush(flush_timeout)
                fault("relay.mid_batch")
        if self.producer.flush(flush_timeout) != 0:
            failed.update(task_ids)
        fault("relay.after_publish")
        done = [p for p in pending if p.task_id not in failed]
        self._index(done)  # before the trim: a crash between the two applies them again, harmlessly
        if self.memory is not None:  # the same: a record is written once
            held, written = relay_memory.apply(self.memory, done, self.log)
            if held:  # their records wait: not trimmed, so the next claim tries them again
                failed |= held
                done = [p for p in done if p.task_id not in held]
            if written:
                fault("relay.after_memory")
        self.outbox.trim(done, [m for m in [*malformed, *unfit] if m.task_id not in failed])
        self.outbox.requeue(sorted(failed))
        if failed:
            self.log("relay.publish_failed", tasks=len(failed))
        count = sum(len(m.records) for m in messages if not m.task_ids & failed)
        self.published += count
        metrics.relay_published(count)
        self.messages += len(messages)
        return count

    def _index(self, done: list[Pending]) -> None:
        """Each published task's latest record into its tenant's task index (state/index.py). A
        record that cannot be applied is logged and left: the log has it, and the task's next
        change brings the index up to date."""
        if self.index is None or not done:
            return
        applied = self.index.apply([p.changes[-1] for p in done if p.changes])
        for reason in applied.skipped:
            self.log("relay.index_skipped", reason=reason)

    def _partition_of(self, task_id: str) -> int:
        """The partition of wakeful.log that a message keyed by this task id goes to (murmur2, as
        every producer here hashes keys), so batching keeps each task's records where they were."""
        if self.partitions is None:
            meta = self.producer.list_topics(self.topic, timeout=10).topics[self.topic]
            if meta.error is not None or not meta.partitions:
                raise KafkaException(meta.error or f"{self.topic} has no partitions")
            self.partitions = len(meta.partitions)
        return kafka_client.partition_of(task_id, self.partitions)

    def _appended(self, msg: Message) -> None:
        if msg.topic() == self.topic and msg.offset() is not None:
            partition, end = msg.partition() or 0, (msg.offset() or 0) + 1
            self.appended[partition] = max(end, self.appended.get(partition, 0))

    def sweep(self) -> int:
        """Re-index every outbox that holds records, and put a watermark on the log when every change
        made before an earlier snapshot of the relay's appends is there (relay_watermark, D87)."""
        appended = dict(self.appended)  # read before the clock: every record below was appended before it
        now_ms = self.outbox.time_ms()
        self.watermarks.take(appended, now_ms)
        found = self.outbox.sweep()
        oldest = self.outbox.oldest_ms
        for problem in redrive_retention.problems(
            {t: k for t, k in self.kept.items() if k is not None},
            0.0 if oldest is None else max(0.0, (now_ms - oldest) / 1000),
        ):
            self.log("relay.retention_short", problem=problem)
        mark = self.watermarks.due(oldest)
        if mark is not None:
            message = relay_batches.LogMessage(0, records=[mark.encode()])

            def sent(err: KafkaError | None, _msg: Message) -> None:
                # Not counted in `appended`: a watermark holds no change for a later one to cover,
                # and counting it would make each idle sweep publish one more.
                if err is not None:  # the next sweep's watermark says as much and more
                    self.log("relay.watermark_unsent", error=str(err))

            self._produce(message, sent)
            covers = {str(partition): end for partition, end in mark.covers}
            self.log("relay.watermark", covers=covers, at=mark.watermark_at.isoformat())
        return found

    def run(self, stop: threading.Event) -> None:
        next_sweep = 0.0  # sweep at start, every OUTBOX_SWEEP_S, and after any failed step
        empty = 0  # claims in a row that found nothing

        def step() -> bool:
            nonlocal next_sweep, empty
            if time.monotonic() >= next_sweep:
                if self.index is not None:  # once per Redis (D93): one EXISTS a sweep after that
                    signed = self.index.sign_unsigned()  # a recover without the key clears the mark
                    if signed:
                        self.log("relay.index_signed", summaries=signed)
                self.partitions = None  # read again: partitions may have been added
                found = self.sweep()  # a failure here retries it
                # How many of its messages no watermark of it covers yet (D87).
                unmarked = sum(e - self.watermarks.published.get(p, 0) for p, e in self.appended.items())
                self.log("relay.sweep", found=found, unmarked=unmarked)
                next_sweep = time.monotonic() + self.sweep_s
            try:
                # The log is not on any task's critical path: let small claims grow into batches.
                published = self.run_once()
            except TRANSIENT_IO:
                next_sweep = 0.0  # tasks claimed before the failure are found again by the sweep
                raise
            empty = 0 if published else empty + 1
            return published >= BATCH_TARGET

        forever(step, stop, self.log, lambda: idle_wait(empty))
        self.producer.flush(30)

    def _dead_letter(self, m: Malformed, on_delivery: Callable[[KafkaError | None, Message], None]) -> None:
        raw = orjson.dumps(
            {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in m.fields.items()}
        )
        letter = DeadLetter.fitting(
            DEAD_LETTER_MAX_BYTES,
            source="relay",
            reason=m.reason,
            task_id=m.task_id,
            value=raw,
            at=datetime.now(UTC),
        )
        assert letter is not None  # a bare digest is a few hundred bytes
        self._send(topics.DLQ, letter.encode(), on_delivery, key=m.task_id.encode())
        self.log("relay.dead_letter", task_id=m.task_id, entry_id=m.entry_id.decode(), reason=m.reason)
        metrics.dead_lettered("relay", "outbox", m.reason)

    def _produce(
        self, message: relay_batches.LogMessage, on_delivery: Callable[[KafkaError | None, Message], None]
    ) -> None:
        value = message.value()
        headers = [] if self.signer is None else self.signer.headers(self.topic, b"", value)
        if self.log_signer is not None:
            headers += self.log_signer.headers(self.topic, message.records)
        headers = inject(
            headers
        )  # the trace's headers, after the signatures, which cover topic and value only
        self._send(self.topic, value, on_delivery, partition=message.partition, headers=headers)

    def _send(
        self,
        topic: str,
        value: bytes,
        on_delivery: Callable[[KafkaError | None, Message], None],
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
    ) -> None:
        kwargs: dict[str, Any] = {} if partition is None else {"partition": partition}
        while True:
            try:
                self.producer.produce(
                    topic, key=key, value=value, headers=headers or [], on_delivery=on_delivery, **kwargs
                )
                return
            except BufferError:
                self.producer.poll(0.05)


def relay_for(settings: Settings) -> Relay:
    """A relay as its role runs one, logged in as the relay: what main() runs, and what a bench
    that grows the log through a real relay drives with run_once()."""
    client = acl.connect(settings, "relay")
    # Every producer shares one configuration (acks=all, idempotent, murmur2 keys); the log is off
    # every task's critical path, so the relay lingers longer for bigger batches.
    producer = Producer(producer_config(settings, "relay") | {"linger.ms": 5})
    return Relay(
        Outbox(client),
        producer,
        Log(role="relay"),
        signer=load_signer(settings, "relay"),
        index=Index(client, index_signing.load_signer(settings)),
        memory=MemoryStore(client),
        log_signer=load_log_signer(settings),
        sweep_s=settings.outbox_sweep_s,
    )


def main(settings: Settings, stop: threading.Event) -> None:
    """Run the relay as its own process until stop is set."""
    relay = relay_for(settings)
    relay.log("relay.start", bootstrap=settings.kafka_bootstrap)
    relay.kept = redrive_retention.kept(settings, "relay")
    for problem in redrive_retention.problems(relay.kept):  # said again at each sweep, with the lag
        relay.log("relay.retention_short", problem=problem)
    task_gauges.start(settings, stop, relay.log)
    relay.run(stop)
    relay.log(
        "role.stop",
        records=relay.published,
        messages=relay.messages,
        redis_round_trips=acl.CountingConnection.round_trips,
    )
