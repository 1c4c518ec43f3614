"""The key-ordered parallel consumer every role runs in.

Consume a batch; split it into one queue per key (task id), in offset order; run the queues'
heads in parallel on a thread pool, wave by wave, so each task has at most one message in flight
while many tasks proceed at once. When the whole batch is handled and everything the handlers
produced is acknowledged by Kafka, store the batch's offsets (enable.auto.offset.store=false):
offsets never run ahead of the work they cover. What a handler's outcome means for its message
(done, retried, or dead-lettered as poison) is consumers/kafka/handling.py; a message whose output
Kafka refuses for good is dead-lettered here, once the batch's output has settled (D26).
"""

from __future__ import annotations

import functools
import gc
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from wakeful.consumers.kafka import dead_letters
from wakeful.consumers.kafka.consuming import REJOIN_S, Membership, why_waiting
from wakeful.consumers.kafka.failures import Verdict, is_fatal
from wakeful.consumers.kafka.handling import Handler, Handling
from wakeful.consumers.kafka.producing import DeliveryFailures, describe
from wakeful.core import sources
from wakeful.core.errors import KafkaClientFailed, Stopping
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.state.acl import CountingConnection

FLUSH_STEP_S = 1.0
# How long an idle loop waits for a message before it runs its between-batches step (a switch's
# acknowledgement is read at most this often: switch_acks.TICK_S) and looks at `stop` again. A
# message that arrives ends the wait at once.
POLL_S = 0.2
CLOSE_S = 30  # how long a client being replaced may take to close (Runner._replace_client)
BATCH = 500  # the most messages a loop takes at once


class Runner(Handling):
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
        batch: int = BATCH,
        before_batch: Callable[[list[Message]], None] | None = None,
        pins: Callable[[list[Message]], Mapping[tuple[str, int], int]] | None = None,
        after_batch: Callable[[], None] | None = None,
        between_batches: Callable[[], None] | None = None,
        failures: DeliveryFailures | None = None,
        dead_letter_bytes: int | None = None,
        on_poison: Callable[[Message, str], None] | None = None,
        remake: Callable[[], Consumer] | None = None,
        rejoin_s: float = REJOIN_S,
    ) -> None:
        super().__init__(
            role,
            handler,
            producer,
            log=log,
            failures=failures,
            dead_letter_bytes=dead_letter_bytes,
            on_poison=on_poison,
        )
        self.topic = topic
        self.consumer = consumer
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix=role)
        self.batch = batch
        self.before_batch = before_batch  # reads for the whole batch at once, before its handlers
        # Per partition, an offset below which something read is still kept undone (a held wake,
        # D115): the floor a change carries goes no higher, so a lost Redis re-drives it.
        self.pins = pins
        self.after_batch = after_batch  # runs once the batch's output is durable, before offsets
        self.between_batches = between_batches  # runs before each poll, no handler running
        self.remake = remake  # a fresh client like `consumer`, for one that never got back in
        self.membership = Membership(rejoin_s, started_at=time.monotonic())
        # Per partition, the lowest offset of the batch being handled: nothing below it is left
        # undone, so it is what a commit would record now (the floor a change carries, D87).
        self.floors: dict[tuple[str, int], int] = {}

    def run(self, stop: threading.Event) -> None:
        # Start-up objects never die: keep them out of the collector's way, and collect young
        # objects less often, so a full collection does not stall a batch for tens of ms.
        gc.freeze()
        gc.set_threshold(20_000, 20, 20)
        self._subscribe()
        try:
            while not stop.is_set():
                now = time.monotonic()
                if self.remake is not None and self.membership.stuck(now, self._holds_any):
                    self._rejoin()
                if (waited := self.membership.waited(now)) is not None:
                    self.log("runner.waiting", role=self.role, why=why_waiting(self.role, self.topic, waited))
                if self.between_batches is not None:
                    self.between_batches()
                msgs = self._next_batch()
                try:
                    good = [m for m in msgs if not self._is_error(m)]
                except KafkaClientFailed as ended:
                    self._client_ended(ended)
                    continue  # the batch is dropped: its offsets were never stored, so it comes again
                if good:
                    fault(f"{self.role}.after_consume")
                    self.run_batch(good, stop)
                self.producer.poll(0)
        except Stopping:
            self.log("runner.stopped_mid_batch", role=self.role)
        finally:
            self.pool.shutdown(wait=True, cancel_futures=True)
            # Only an unfinished batch can have output still queued, and its offsets are not stored:
            # the next process handles it again, so a long wait here would only delay the stop.
            self.producer.flush(5)
            self.consumer.close()
            # End librdkafka's threads now. Left to the interpreter's exit (the role's objects form
            # cycles, and gc.freeze() above keeps them from the collector), they ran on while the
            # process tore down OpenSSL under their SASL connections: a segfault at every stop.
            close = getattr(self.producer, "close", None)  # not in older confluent-kafka releases
            if close is not None:
                close()
            self.log(
                "role.stop",
                messages=self.counters.messages,
                batches=self.counters.batches,
                retries=self.counters.retries,
                dead_letters=self.counters.dead_letters,
                redis_round_trips=CountingConnection.round_trips,
            )

    def _subscribe(self) -> None:
        self.consumer.subscribe(
            [self.topic],
            on_assign=self._rebalanced("runner.assigned", self.membership.assigned),
            on_revoke=self._rebalanced("runner.revoked"),
            on_lost=self._rebalanced("runner.lost", lambda: self.membership.lost(time.monotonic())),
        )

    def _rebalanced(
        self, event: str, then: Callable[[], None] | None = None
    ) -> Callable[[Consumer, list[TopicPartition]], None]:
        """A rebalance callback that logs which partitions came or went (librdkafka applies the
        change itself once it returns): who holds what, for operators and for tests that need a
        process to hold partitions before they send it work."""

        def record(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self.log(event, role=self.role, partitions=sorted(tp.partition for tp in partitions))
            if then is not None:
                then()

        return record

    def _holds_any(self) -> bool:
        return bool(self.consumer.assignment())

    def _rejoin(self) -> None:
        """Replace a client that lost its partitions and never got back into its group
        (consuming.Membership) with a fresh one under the same identity."""
        lost_at = self.membership.lost_at or time.monotonic()
        self.log("runner.rejoining", role=self.role, lost_for_s=round(time.monotonic() - lost_at, 1))
        self._replace_client()

    def _client_ended(self, ended: KafkaClientFailed) -> None:
        """A fatal error ended the client: it will never consume again, though it may still say it
        holds its partitions. After a broker restart a static member's offset commit is fenced so
        (its rejoin gave it a new member id), and that client would sit on its partitions for good.
        Replaced at once by a fresh client under the same identity, which takes them back; a runner
        handed one client and no maker exits instead, to be restarted."""
        if self.remake is None:
            raise ended
        self.log("runner.replacing_ended_client", role=self.role, error=str(ended))
        self._replace_client()

    def _replace_client(self) -> None:
        """A fresh client in place of this one. Nothing is in flight between batches, and no offset
        stored but not committed counts: the partitions' next owner, maybe this process again,
        reads on from the last committed one (a message handled twice is one the handlers'
        idempotence already covers)."""
        assert self.remake is not None
        old, self.consumer = self.consumer, self.remake()
        closing = threading.Thread(target=old.close, name=f"{self.role}-close", daemon=True)
        closing.start()
        closing.join(CLOSE_S)
        if closing.is_alive():  # a client that wedged is not trusted to stay quiet: start over clean
            raise KafkaClientFailed(self.role, f"a client being replaced did not close in {CLOSE_S} s")
        self.membership.assigned()  # the fresh client starts its own membership
        self._subscribe()

    def _next_batch(self) -> list[Message]:
        """Wait for one message, then take whatever else is already fetched, without waiting:
        low latency when idle, large batches under load."""
        first = self.consumer.poll(POLL_S)
        if first is None:
            return []
        return [first, *self.consumer.consume(self.batch - 1, 0)]

    def run_batch(self, msgs: list[Message], stop: threading.Event) -> None:
        self._before(msgs)
        self.floors = {(tp.topic, tp.partition): tp.offset for tp in _first_offsets(msgs)}
        if self.pins is not None:
            for where, pinned in self.pins(msgs).items():
                if where in self.floors:
                    self.floors[where] = min(self.floors[where], pinned)
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
        if not self._settle(stop):
            # Some output never reached Kafka but can: do not store these offsets; read the batch again.
            for tp in _first_offsets(msgs):
                self.consumer.seek(tp)
            return
        if self.after_batch is not None:
            self._retrying(self.after_batch, stop, "after_batch")
        fault(f"{self.role}.before_offsets")
        try:
            self.consumer.store_offsets(offsets=_next_offsets(msgs))
        except KafkaException as exc:
            # Every partition of the batch was taken away meanwhile (a process joined or left the
            # group): their new owner reads on from the last stored offsets and redoes the batch.
            self.log("runner.offsets_not_stored", role=self.role, error=repr(exc))
        self.counters.batches += 1
        self.counters.messages += len(msgs)

    def taken(self, msg: Message) -> sources.Taken | None:
        topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
        floor = self.floors.get((topic, partition))
        return None if floor is None else sources.Taken(topic, partition, offset, min(floor, offset))

    def _before(self, msgs: list[Message]) -> None:
        """The before_batch hook, for a batch about to be handed to its handlers."""
        if self.before_batch is None:
            return
        try:
            self.before_batch(msgs)
        except Exception as exc:  # only a saving: each handler can still read for itself
            self.log("runner.before_batch_failed", role=self.role, error=repr(exc))

    def _settle(self, stop: threading.Event) -> bool:
        """Wait until the batch's output is acknowledged or refused. True when the batch is done;
        False when a refusal that can pass means it must be read again (D21). An input whose
        output was refused for good is dead-lettered, and that letter waited for in turn (D26)."""
        while True:
            while self.producer.flush(FLUSH_STEP_S) > 0:
                if stop.is_set():
                    raise Stopping(self.role)
                self.log("runner.flush_waiting", role=self.role)
            refusals = self.failures.drain()
            condemned: dict[tuple[str, int, int], tuple[Message, str]] = {}
            for r in refusals:
                if r.verdict is Verdict.FATAL:
                    raise KafkaClientFailed(self.role, describe(r.error))
                if r.verdict is Verdict.PERMANENT and r.source is not None:
                    why = f"Kafka refused this message's output to {r.topic} for good: {describe(r.error)}"
                    condemned.setdefault(dead_letters.where(r.source), (r.source, why))
                elif r.verdict is Verdict.PERMANENT:  # no input to blame, and nothing a redo can fix
                    self.log("runner.output_refused", error=describe(r.error), topic=r.topic)
            transient = [r for r in refusals if r.verdict is Verdict.TRANSIENT]
            if transient:  # the redo meets any permanent refusal again, and dead-letters it then
                self.log("runner.redo_batch", failed=len(transient), error=describe(transient[-1].error))
                return False
            if not condemned:
                return True
            for source, why in condemned.values():
                self._retrying(functools.partial(self.dead_letter, source, why), stop, "dead_letter")
                self._tell(source, why)

    def _is_error(self, msg: Message) -> bool:
        err = msg.error()
        if err is None:
            return False
        if err.code() != KafkaError._PARTITION_EOF:
            self.log("runner.consume_error", error=str(err))
        if is_fatal(err):  # the client is finished: the loop replaces it (_client_ended)
            raise KafkaClientFailed(self.role, str(err))
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
