"""One start-up for every role that reads a consumer group (inbound, gate, proposer, executor).

A role's `main()` reads its local files first (keys, keyring, passwords: a missing one stops it
before any wait on the broker), then hands `run_role()` how to build its handling object around
the producer. `run_role()` makes the producer (the role's own signing key and Kafka login), the
group consumer and the runner, ties the runner back to the handling object (which dead-letters
through it), and runs until `stop` is set.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from confluent_kafka import Message

from wakeful.consumers.kafka.consuming import group_consumer
from wakeful.consumers.kafka.producing import RunnerProducer, make_producer
from wakeful.consumers.kafka.runner import Runner
from wakeful.core.log import Log
from wakeful.core.settings import Settings


class Handling(Protocol):
    """What a role runs: one message at a time, dead-lettering through its runner."""

    runner: Runner | None

    def handle(self, msg: Message) -> None: ...


H = TypeVar("H", bound=Handling)


@dataclass(frozen=True)
class Hooks:
    """What a role adds to its runner: reads for a whole batch, a step once a batch is durable, a
    step between batches (no handler running), and whom to tell when a message is dead-lettered
    after the role failed on it."""

    before_batch: Callable[[list[Message]], None] | None = None
    pins: Callable[[list[Message]], Mapping[tuple[str, int], int]] | None = None  # D115
    after_batch: Callable[[], None] | None = None
    between_batches: Callable[[], None] | None = None
    on_poison: Callable[[Message, str], None] | None = None


def run_role(
    settings: Settings,
    stop: threading.Event,
    role: str,
    topic: str,
    build: Callable[[RunnerProducer, Log], H],
    *,
    hooks: Callable[[H], Hooks] = lambda _: Hooks(),
    runner: type[Runner] = Runner,
    log: Log | None = None,
) -> None:
    """Run `role` on `topic` in its group (`wakeful-<role>`) until `stop` is set."""
    log = log or Log(role=role)
    producer, failures = make_producer(settings, role)
    handling = build(producer, log)
    consumer = group_consumer(settings, role, f"wakeful-{role}")
    added = hooks(handling)
    running = runner(
        role,
        topic,
        handling.handle,
        consumer(),
        producer,
        log=log,
        threads=settings.threads,
        failures=failures,
        remake=consumer,
        before_batch=added.before_batch,
        pins=added.pins,
        after_batch=added.after_batch,
        between_batches=added.between_batches,
        on_poison=added.on_poison,
    )
    handling.runner = running
    log("role.start")
    running.run(stop)
