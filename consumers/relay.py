"""The outbox relay: publishes every Progress change to wakeful.log, then trims it from Redis.

Records are trimmed only after the broker acknowledged them (acks=all, idempotent producer). A
crash between publish and trim republishes the same records on restart: wakeful.log is
at-least-once, and readers dedupe by record_id ("<task_id>:<state_version>").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

import orjson
from confluent_kafka import KafkaError, Message, Producer

from wakeful.consumers.producing import producer_config
from wakeful.core import topics
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.core.provenance import RoleSigner, load_signer
from wakeful.core.retry import TRANSIENT_IO, forever
from wakeful.core.settings import Settings
from wakeful.schemas.logs import DeadLetter
from wakeful.state import acl, keys
from wakeful.state.outbox import Malformed, Outbox

BATCH_TARGET = 100  # records per claim worth publishing without waiting


class Relay:
    def __init__(
        self,
        outbox: Outbox,
        producer: Producer,
        log: Log,
        topic: str = topics.LOG,
        signer: RoleSigner | None = None,
    ) -> None:
        self.outbox = outbox
        self.producer = producer
        self.log = log
        self.topic = topic
        self.signer = signer  # a reader of the log can tell the relay's records from anyone's
        self.published = 0

    def run_once(self, flush_timeout: float = 30.0) -> int:
        """Publish what one claim of the index finds; returns the records acknowledged."""
        task_ids = self.outbox.claim()
        if not task_ids:
            return 0
        pending, malformed = self.outbox.read(task_ids)
        for m in malformed:
            self._dead_letter(m)
        failed: set[str] = set()

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                key = msg.key()
                failed.add(key.decode() if key else "")

        half = sum(len(p.records) for p in pending) // 2
        sent = 0
        for p in pending:
            for record_id, record in zip(p.record_ids, p.records, strict=True):
                self._produce(p.task_id, record_id, record, delivered)
                sent += 1
                if sent == half:
                    self.producer.flush(flush_timeout)
                    fault("relay.mid_batch")
        if self.producer.flush(flush_timeout) != 0:
            failed.update(p.task_id for p in pending)
        fault("relay.after_publish")
        done = [p for p in pending if p.task_id not in failed]
        self.outbox.trim(done, malformed)
        self.outbox.requeue(sorted(failed))
        if failed:
            self.log("relay.publish_failed", tasks=len(failed))
        count = sum(len(p.records) for p in done)
        self.published += count
        return count

    def run(self, stop: threading.Event, idle_sleep: float = 0.02) -> None:
        next_sweep = 0.0  # sweep at start, every OUTBOX_SWEEP_S, and after any failed step

        def step() -> bool:
            nonlocal next_sweep
            if time.monotonic() >= next_sweep:
                self.log("relay.sweep", found=self.outbox.sweep())  # a failure here retries it
                next_sweep = time.monotonic() + keys.OUTBOX_SWEEP_S
            try:
                # The log is not on any task's critical path: let small claims grow into batches.
                return self.run_once() >= BATCH_TARGET
            except TRANSIENT_IO:
                next_sweep = 0.0  # tasks claimed before the failure are found again by the sweep
                raise

        forever(step, stop, self.log, idle_sleep)
        self.producer.flush(30)

    def _dead_letter(self, m: Malformed) -> None:
        raw = orjson.dumps(
            {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in m.fields.items()}
        )
        letter = DeadLetter(
            source="relay",
            reason="malformed outbox entry: it lacks the id or r field every writer sets",
            task_id=m.task_id,
            raw=raw.decode(),
            at=datetime.now(UTC),
        )
        self.producer.produce(topics.DLQ, key=m.task_id.encode(), value=letter.encode())
        self.log("relay.dead_letter", task_id=m.task_id, entry_id=m.entry_id.decode())

    def _produce(
        self,
        task_id: str,
        record_id: str,
        record: bytes,
        on_delivery: Callable[[KafkaError | None, Message], None],
    ) -> None:
        headers: list[tuple[str, str | bytes | None]] = [("record_id", record_id.encode())]
        if self.signer is not None:
            headers += self.signer.headers(self.topic, task_id.encode(), record)
        while True:
            try:
                self.producer.produce(
                    self.topic, key=task_id.encode(), value=record, headers=headers, on_delivery=on_delivery
                )
                return
            except BufferError:
                self.producer.poll(0.05)


def main(settings: Settings, stop: threading.Event) -> None:
    """Run the relay as its own process until stop is set."""
    outbox = Outbox(acl.connect(settings, "relay"))
    # Every producer shares one configuration (acks=all, idempotent, murmur2 keys); the log is off
    # every task's critical path, so the relay lingers longer for bigger batches.
    producer = Producer(producer_config(settings, "relay") | {"linger.ms": 5})
    relay = Relay(outbox, producer, Log(role="relay"), signer=load_signer(settings, "relay"))
    relay.log("relay.start", bootstrap=settings.kafka_bootstrap)
    relay.run(stop)
    relay.log("role.stop", messages=relay.published, redis_round_trips=acl.CountingConnection.round_trips)
