"""Proposals the log does not reflect, published again by `wakeful recover` (D87).

An executor's close made in the relay's lag is lost with Redis: the task comes back at the change
that asked for the proposal. Of the proposals on wakeful.proposals from where the log vouches for
nothing (state/redrive.Start.first), each that answers its restored task's outstanding request
(the executor's own check, executor_steps.unanswered) is published again, byte for byte with its
headers: the proposer's channel tag still holds, and the executor carries out the very proposal it
carried out before, under the same op key (the downstream's lookup then finds its first booking).
Such a task is not woken (recovery._wakes): the model is not asked again for what it answered.

The tag is not checked here: the executor, the topic's only reader, holds the proposer's key
(D34), and checks it on every message; a forged one published again is dead-lettered there, as it
was the first time. Two that answer (a proposal read twice) are both published: the first closes
the task, and the second is then behind it, dropped as superseded (D85).

Not every proposal from that point is sent again, as the gate's wakes are (operate/recover/redrive.py):
the others are ahead of their restored task (the re-driven gate asks again, under the same request
id) or behind it, and one read before the gate caught up would be dead-lettered as claiming a newer
version than its task's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer

from wakeful.consumers.kafka.producing import producer_config
from wakeful.core import kafka_auth, kafka_rights, topics
from wakeful.core.errors import DecodeError, WakefulError
from wakeful.core.settings import Settings
from wakeful.operate import log_reader
from wakeful.schemas.events import Envelope
from wakeful.state.redrive import Start

Say = Callable[[str], None]


@dataclass(frozen=True)
class Held:
    """A proposal as it was read: what it answers, and its exact message."""

    env: Envelope
    key: bytes
    value: bytes
    headers: list[tuple[str, str | bytes | None]]
    where: str  # "<partition>:<offset>"


def read(settings: Settings, starts: Iterable[Start]) -> dict[str, list[Held]]:
    """Each task's proposals from each partition's first unvouched offset, in offset order."""
    spans = [
        (s.partition, s.first, s.high) for s in starts if s.topic == topics.PROPOSALS and s.first < s.high
    ]
    if not spans:
        return {}
    config = kafka_auth.client_config(settings, kafka_rights.ADMIN) | {
        "group.id": f"wakeful-redrive-reader-{time.time_ns()}",
        "enable.auto.commit": False,
    }
    consumer = Consumer(config)
    found: dict[str, list[Held]] = {}
    try:
        for msg in log_reader.messages(consumer, topics.PROPOSALS, spans):
            key, value = msg.key() or b"", msg.value() or b""
            raw = msg.headers() or []
            headers: list[tuple[str, str | bytes | None]] = (
                list(raw.items()) if isinstance(raw, dict) else list(raw)
            )
            try:
                env = Envelope.decode(value)
            except DecodeError:
                continue
            where = f"{msg.partition()}:{msg.offset()}"
            found.setdefault(env.task_id, []).append(Held(env, key, value, headers, where))
    finally:
        consumer.close()
    return found


def publish(settings: Settings, held: Iterable[Held], say: Say) -> list[str]:
    """Each proposal published again as it was (its key puts it on its partition again); returns
    where each was read from."""
    held = list(held)
    if not held:
        return []
    producer = Producer(producer_config(settings, kafka_rights.ADMIN))
    failed: list[Any] = []
    for h in held:
        producer.produce(
            topics.PROPOSALS,
            key=h.key,
            value=h.value,
            headers=h.headers,
            on_delivery=lambda err, _m: failed.append(err) if err is not None else None,
        )
    if producer.flush(30) != 0 or failed:
        raise WakefulError(
            f"{len(failed) or 'some'} proposal(s) were not taken by Kafka again ({failed[:1]}): the "
            "timer's sweep wakes their tasks, which nothing else moves, within ten minutes (D85)"
        )
    said = [f"{h.env.task_id} from {topics.PROPOSALS} {h.where}" for h in held]
    for line in said:
        say(f"recover: re-drive proposal of {line}")
    return said
