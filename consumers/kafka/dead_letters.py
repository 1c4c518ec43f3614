"""Dead letters: how a message that can never pass is kept, with its reason, in wakeful.dlq.

The letter holds the input whole when it fits under the dead-letter budget, else a digest (where
it was, size, sha256, a preview). If the DLQ refuses even that for good, the digest goes to the
log: a dead letter always goes somewhere, and the offset moves on (docs/decisions.md D26). What
the log says about a letter is where its input was, its size and digest and the reason; never the
input itself.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from wakeful.consumers.kafka.failures import Verdict, classify, kafka_error
from wakeful.consumers.kafka.producing import (
    KEY_MAX_BYTES,
    DeliveryCallback,
    DeliveryFailures,
    Refusal,
    describe,
)
from wakeful.core import topics
from wakeful.core.log import Log
from wakeful.schemas.base import cut
from wakeful.schemas.logs import DeadLetter

REASON_LOG_CHARS = 500  # of a dead letter's reason in the role's log


def send(
    msg: Message,
    reason: str,
    task_id: str | None,
    *,
    role: str,
    producer: Producer,
    failures: DeliveryFailures,
    budget: int,
    log: Log,
) -> bool:
    """Send msg to wakeful.dlq with the reason: whole if it fits under `budget` bytes, else as a
    digest (where it was, size, sha256, a preview). If the DLQ refuses even that for good, the
    digest goes to the log: a dead letter always goes somewhere, and the offset moves on. Raises
    only what is worth retrying (a full local queue, Kafka away). True when the letter was handed
    to the producer; False when it went to the log instead."""
    value = msg.value() or b""
    about = summary(msg, reason)
    letter = DeadLetter.fitting(
        budget,
        source=role,
        reason=reason,
        task_id=task_id,
        value=value,
        at=datetime.now(UTC),
        topic=msg.topic(),
        partition=msg.partition(),
        offset=msg.offset(),
    )
    if letter is None:
        unsent(log, about, f"not even a digest fits in {budget} bytes")
        return False
    key = msg.key()
    if key is not None and len(key) > KEY_MAX_BYTES:
        key = b"sha256:" + hashlib.sha256(key).hexdigest().encode()
    try:
        producer.produce(
            topics.DLQ, key=key, value=letter.encode(), on_delivery=_delivery(about, failures, log)
        )
    except KafkaException as exc:
        err = kafka_error(exc)
        if err is None or classify(err) is not Verdict.PERMANENT:
            raise
        unsent(log, about, describe(err))
        return False
    log("dead_letter", **about, digest=letter.digest)
    return True


def _delivery(about: dict[str, Any], failures: DeliveryFailures, log: Log) -> DeliveryCallback:
    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is None:
            return
        verdict = classify(err)
        if verdict is Verdict.PERMANENT:
            unsent(log, about, describe(err))
        else:  # transient: the batch is read again and the letter sent again; fatal: exit
            failures.add(Refusal(err, verdict, topics.DLQ))

    return delivered


def unsent(log: Log, about: dict[str, Any], error: str) -> None:
    """A letter that could not be sent goes to the log: its summary and why it was not sent."""
    log("dead_letter.unsent", **about, error=error)


def where(msg: Message) -> tuple[str, int, int]:
    """The input's place: topic, partition, offset."""
    return (msg.topic() or "", msg.partition() or 0, msg.offset() or 0)


def summary(msg: Message, reason: str) -> dict[str, Any]:
    """What the log says about a dead letter: where the input was, its size and digest, the reason
    (cut short); never the input itself."""
    value = msg.value() or b""
    topic, partition, offset = where(msg)
    return {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "size": len(value),
        "sha256": hashlib.sha256(value).hexdigest(),
        "reason": cut(reason, REASON_LOG_CHARS),
    }
