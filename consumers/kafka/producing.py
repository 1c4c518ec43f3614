"""The producing side of a role: the producer its handlers share, and what Kafka finally refused.

Output produced while a handler runs is tied to the input being handled, so that a refusal that
can never pass dead-letters that input instead of making the batch run again forever (docs/
decisions.md D26). Every refusal is collected with its verdict: flush() returning 0 only means
nothing is queued any more, so the run loop asks here whether a batch's output was all delivered
before it stores the batch's offsets. The producer also knows how large a dead letter may be: the
least of wakeful's own budget, its own message.max.bytes and the DLQ topic's max.message.bytes.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]  # re-exported, not in __all__

from wakeful.consumers.kafka.failures import Verdict, classify
from wakeful.core import kafka_auth, topics, tracing
from wakeful.core.kafka_rights import RIGHTS, Rights
from wakeful.core.log import librdkafka_config
from wakeful.core.provenance import SENDERS, SIGNING_ROLES, RoleSigner, load_signer
from wakeful.core.settings import Settings

DeliveryCallback = Callable[[KafkaError | None, Message], None]

# A dead letter's encoded value stays under this, whatever Kafka would take: every input a role
# reads on purpose is far smaller (an event is at most 64 KiB), and wakeful.dlq keeps letters
# forever, so a stranger's megabyte is kept as a digest rather than copied whole.
DEAD_LETTER_MAX_BYTES = 256 * 1024
# What Kafka adds around a value (batch header, record framing, a key of up to KEY_MAX_BYTES):
# a limit counts the whole batch, so a letter must leave room for it.
FRAMING_BYTES = 1024
KEY_MAX_BYTES = 256
LIBRDKAFKA_MESSAGE_MAX = 1_000_000  # librdkafka's default message.max.bytes and batch.size


def producer_config(settings: Settings, role: str) -> dict[str, Any]:
    """A producer logged in as `role`'s principal, which may write only the role's output topics."""
    return (
        kafka_auth.client_config(settings, role)
        | {
            "acks": "all",
            "enable.idempotence": True,
            # Sent at once: a role flushes after each batch it handles, so a linger batches nothing
            # and only waits. At 1 ms a task's wake-to-effect at 50/s was about 1.1 ms slower over
            # its three producing hops, to save about 0.1 ms of CPU a task (D83).
            "linger.ms": 0,
            # The Java client's key hashing, so every producer (any client) puts a task on one partition.
            "partitioner": "murmur2_random",
        }
        | librdkafka_config()
    )


@dataclass(frozen=True)
class Refusal:
    """One produce that Kafka finally refused, what to do about it, and the input it came from."""

    error: KafkaError
    verdict: Verdict
    topic: str  # where the refused output was going
    source: Message | None = None  # the input being handled when it was produced, if known


class DeliveryFailures:
    """Collects produce requests the broker finally refused (after librdkafka's own retries).

    flush() returning 0 only means nothing is queued any more, failed messages included; a batch
    whose output was not all delivered must not have its offsets stored.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._refusals: list[Refusal] = []

    def record(self, err: KafkaError | None, msg: Message) -> None:
        """The producer-wide delivery callback: output whose input is not known."""
        if err is not None:
            self.add(Refusal(err, classify(err), msg.topic() or ""))

    def recorder(self, source: Message) -> DeliveryCallback:
        """A delivery callback for output produced while handling `source`."""

        def record(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self.add(Refusal(err, classify(err), msg.topic() or "", source))

        return record

    def add(self, refusal: Refusal) -> None:
        with self._lock:
            self._refusals.append(refusal)

    def drain(self) -> list[Refusal]:
        with self._lock:
            refusals, self._refusals = self._refusals, []
            return refusals

    def take(self) -> int:
        """How many were refused since the last call."""
        return len(self.drain())


def describe(err: KafkaError | None) -> str:
    """A Kafka error as a reason or a log field says it: its name and its text."""
    return "unknown Kafka error" if err is None else f"{err.name()} ({err.str()})"


# The input message the current thread is handling: its output is tied to it (RunnerProducer).
# Handling._call (consumers/kafka/handling.py) sets `message` around each handler call, and clears it after.
current_input = threading.local()


class RunnerProducer(Producer):
    """The producer a role's handlers share. Output produced while a handler runs is tied to the
    input being handled, so that a refusal that can never pass dead-letters that input instead of
    making the batch run again forever. Knows how large a dead letter may be."""

    def __init__(self, config: dict[str, Any], failures: DeliveryFailures, dead_letter_bytes: int) -> None:
        super().__init__(config)
        self.failures = failures
        self.dead_letter_bytes = dead_letter_bytes
        # The role's own key: everything it sends to another role carries its signature.
        self.signer: RoleSigner | None = None

    def produce(  # noqa: PLR0917  # Producer.produce's own signature, positional arguments and all
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        partition: int = -1,
        callback: DeliveryCallback | None = None,
        on_delivery: DeliveryCallback | None = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        source: Message | None = getattr(current_input, "message", None)
        if source is not None and callback is None and on_delivery is None:
            on_delivery = self.failures.recorder(source)
        report = on_delivery or callback
        if headers is None and self.signer is not None and topic in SENDERS:
            headers = self.signer.headers(topic, _bytes(key), _bytes(value))
        headers = tracing.inject(headers)  # after the tag: a set `headers` means "sign nothing" above
        extra: dict[str, Any] = {"headers": headers} if headers is not None else {}
        if report is not None:
            extra["on_delivery"] = report
        super().produce(topic, value, key, partition=partition, timestamp=timestamp, **extra)


def _bytes(data: str | bytes | None) -> bytes:
    return data.encode() if isinstance(data, str) else data or b""


def make_producer(settings: Settings, role: str) -> tuple[RunnerProducer, DeliveryFailures]:
    failures = DeliveryFailures()
    # The role's own key before any round trip to the broker: a missing one stops it at once.
    signer = load_signer(settings, role) if role in SIGNING_ROLES else None
    config = producer_config(settings, role) | {
        "on_delivery": failures.record,
        "delivery.report.only.error": True,
    }
    limits = [
        DEAD_LETTER_MAX_BYTES,
        int(config.get("message.max.bytes", LIBRDKAFKA_MESSAGE_MAX)) - FRAMING_BYTES,
    ]
    # Only a role that dead-letters may read the dlq's limit (core/kafka_rights.py); asking without
    # the right would only be refused.
    reads_limit = topics.DLQ in RIGHTS.get(role, Rights()).reads_config
    topic_limit = topic_max_message_bytes(settings, role, topics.DLQ) if reads_limit else None
    if topic_limit is not None:
        limits.append(topic_limit - FRAMING_BYTES)
        # The broker's limit counts a whole batch: letters batched together must stay under it too.
        config["batch.size"] = max(1, min(topic_limit, int(config.get("batch.size", LIBRDKAFKA_MESSAGE_MAX))))
    producer = RunnerProducer(config, failures, min(limits))
    producer.signer = signer  # what it sends to another role carries its signature
    return producer, failures


def topic_max_message_bytes(settings: Settings, role: str, topic: str, timeout: float = 10.0) -> int | None:
    """The topic's max.message.bytes (the broker's message.max.bytes unless the topic overrides
    it), read as `role` (which needs DescribeConfigs on it), or None if it cannot be read: dead
    letters then stay under DEAD_LETTER_MAX_BYTES, far below any default."""
    admin = AdminClient(kafka_auth.client_config(settings, role) | librdkafka_config())
    try:
        futures = admin.describe_configs([ConfigResource("topic", topic)], request_timeout=timeout)
        entries = next(iter(futures.values())).result(timeout)
        return int(entries["max.message.bytes"].value)
    except (KafkaException, KeyError, ValueError, TypeError, concurrent.futures.TimeoutError):
        return None
    finally:
        admin.poll(0)  # an AdminClient's log lines are written only when it is polled
