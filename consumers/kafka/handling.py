"""What the outcome of a role's handler means for its message, one message at a time.

A handler returns normally when a message is done: applied, refused, or dead-lettered with its
reason. It raises Retry (or a Redis/Kafka connection error) for a transient failure: the same
message is retried with backoff, never skipped, until the role is told to stop. Any other
exception is a poison message: it is dead-lettered with the error and the batch goes on. So is a
message whose output Kafka refuses for good (too large, not authorized, no such topic): retrying
it could never succeed, and waiting on it would stop every partition (docs/decisions.md D26).
The run loops (consumers/kafka/runner.py, consumers/kafka/overlap.py) decide which message is handled when.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Message, Producer

from wakeful.consumers.kafka import dead_letters
from wakeful.consumers.kafka.failures import TRANSIENT_IO, TRANSIENT_REDIS, Verdict, classify, kafka_error
from wakeful.consumers.kafka.producing import (
    DEAD_LETTER_MAX_BYTES,
    DeliveryFailures,
    RunnerProducer,
    current_input,
    describe,
)
from wakeful.core import metrics, sources
from wakeful.core.errors import Contention, KafkaClientFailed, LeaseBusy, LeaseLost, Stopping
from wakeful.core.log import Log
from wakeful.core.retry import Retry, backoff
from wakeful.core.tracing import handling as traced
from wakeful.schemas.base import cut

Handler = Callable[[Message], None]
# LeaseLost, LeaseBusy and Contention are transient too: the next attempt re-takes the lease (or
# finds it free) and re-reads the state. So are a Redis that is loading, read-only (failing over),
# out of memory or busy.
TRANSIENT = (
    Retry,
    LeaseLost,
    LeaseBusy,
    Contention,
    *TRANSIENT_REDIS,
    *TRANSIENT_IO,
)


@dataclass
class Counters:
    messages: int = 0
    batches: int = 0
    retries: int = 0
    dead_letters: int = 0


class Handling:
    """A role's handler and what its outcome means: retried while the failure is transient,
    dead-lettered when it never can pass. The run loops build on it."""

    def __init__(
        self,
        role: str,
        handler: Handler,
        producer: Producer,
        *,
        log: Log,
        failures: DeliveryFailures | None = None,
        dead_letter_bytes: int | None = None,
        on_poison: Callable[[Message, str], None] | None = None,
    ) -> None:
        self.role = role
        self.handler = handler
        self.producer = producer
        self.log = log
        # Tells the sender of a message the handler failed on for good (its receipt), once the
        # message is dead-lettered; a failure to tell is logged, never retried forever.
        self.on_poison = on_poison
        self.failures = failures or DeliveryFailures()
        if dead_letter_bytes is None:
            dead_letter_bytes = (
                producer.dead_letter_bytes if isinstance(producer, RunnerProducer) else DEAD_LETTER_MAX_BYTES
            )
        self.dead_letter_bytes = dead_letter_bytes
        self.counters = Counters()

    def _retrying(self, step: Callable[[], None], stop: threading.Event, what: str) -> None:
        attempt = 0
        while True:
            try:
                step()
                return
            except TRANSIENT as exc:
                if self._verdict(exc) is not Verdict.TRANSIENT:
                    raise
                attempt += 1
                self.log("runner.retry", attempt=attempt, error=repr(exc), step=what)
            if stop.wait(backoff(attempt)):
                raise Stopping(self.role)

    def _handle(self, msg: Message, stop: threading.Event) -> None:
        """Handle msg, or once it is known to be poison, dead-letter it; either is retried while
        the failure is transient, until stop is set."""
        attempt = 0
        base = 0.05
        poison: str | None = None
        while True:
            try:
                if poison is None:
                    with traced(self.role, msg):  # its span, current in the thread that runs the handler
                        self._call(msg)
                else:
                    self.dead_letter(msg, poison)
                    self._tell(msg, poison)
                return
            except (Stopping, KafkaClientFailed):
                raise
            except Exception as exc:
                verdict = self._verdict(exc)
                if verdict is Verdict.PERMANENT and poison is not None:
                    # The letter itself cannot be built or sent: the log is where it goes.
                    dead_letters.unsent(self.log, dead_letters.summary(msg, poison), repr(exc))
                    return
                if verdict is Verdict.PERMANENT:  # a poison message: dead-letter it, never crash
                    err = kafka_error(exc)
                    poison = (
                        f"{self.role} failed on this message: {exc!r}"
                        if err is None
                        else f"Kafka refused this message's output for good: {describe(err)}"
                    )
                    continue
                attempt += 1
                self.counters.retries += 1
                metrics.retried(self.role, exc)
                base = exc.after if isinstance(exc, Retry) and exc.after else 0.05
                if attempt in (1, 10) or attempt % 50 == 0:
                    self.log("runner.retry", attempt=attempt, error=repr(exc), offset=msg.offset())
            if stop.wait(backoff(attempt, base=base)):
                raise Stopping(self.role)

    def _tell(self, msg: Message, reason: str) -> None:
        if self.on_poison is None:
            return
        try:
            self.on_poison(msg, reason)
        except Exception as exc:  # the letter is written; the receipt is a courtesy on top
            self.log("runner.receipt_unsent", error=repr(exc), offset=msg.offset(), reason=cut(reason, 300))

    def _call(self, msg: Message) -> None:
        current_input.message = msg
        started = metrics.clock()
        try:
            with sources.taking(self.taken(msg)):  # what a change it makes carries (D87)
                self.handler(msg)
            metrics.handled(self.role, msg.topic(), started)
        finally:
            current_input.message = None

    def taken(self, msg: Message) -> sources.Taken | None:
        """Where msg was read from and the run loop's floor for its partition, or None when this
        run loop does not track one (a change then carries no source, and recover re-drives its
        partition from what other changes say)."""
        return None

    def _verdict(self, exc: BaseException) -> Verdict:
        """Transient: wait and try again. Permanent: it will never pass (a poison message).
        Fatal: this process's Kafka client is finished."""
        err = kafka_error(exc)
        verdict = classify(err) if err is not None else None
        if verdict is Verdict.FATAL:
            raise KafkaClientFailed(self.role, describe(err)) from exc
        if verdict is not None:
            return verdict
        return Verdict.TRANSIENT if isinstance(exc, TRANSIENT) else Verdict.PERMANENT

    def dead_letter(self, msg: Message, reason: str, task_id: str | None = None) -> None:
        """Send msg to wakeful.dlq with the reason (consumers/kafka/dead_letters.py), and count it if it
        went there. Raises only what is worth retrying (a full local queue, Kafka away)."""
        sent = dead_letters.send(
            msg,
            reason,
            task_id,
            role=self.role,
            producer=self.producer,
            failures=self.failures,
            budget=self.dead_letter_bytes,
            log=self.log,
        )
        if sent:
            self.counters.dead_letters += 1
            metrics.dead_lettered(self.role, msg.topic(), reason)
