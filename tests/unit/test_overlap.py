"""The overlapping runner, as pure logic (stand-in consumer and producer, an in-process slow model):
a slow message holds up only its own task, one message per task is in flight in offset order, and
offsets are stored only for the prefix that is done."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import cast

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from helpers import StandInConsumer, StandInProducer, msg

from wakeful.consumers.kafka.overlap import OverlapRunner
from wakeful.consumers.kafka.producing import DeliveryFailures
from wakeful.core.log import Log

DEADLINE_S = 10.0


def overlap(
    handler: Callable[[Message], None], threads: int = 8, failures: DeliveryFailures | None = None
) -> tuple[OverlapRunner, StandInConsumer]:
    consumer = StandInConsumer()
    r = OverlapRunner(
        "test", "t", handler, cast(Consumer, consumer), cast(Producer, StandInProducer()),
        log=Log(), threads=threads, failures=failures,
    )  # fmt: skip
    return r, consumer


def until(check: Callable[[], bool], what: str) -> None:
    """Wait for an outcome, with a deadline (never a fixed sleep)."""
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S}s: {what}"
        time.sleep(0.005)


def stored(consumer: StandInConsumer) -> list[tuple[int, int]]:
    return [(tp.partition, tp.offset) for tp in consumer.stored]


class SlowModel:
    """A handler that blocks the tasks named slow until released, and records what it saw."""

    def __init__(self, slow: set[str]) -> None:
        self.slow = slow
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.in_flight: Counter[str] = Counter()
        self.most_at_once = 0
        self.most_per_task = 0
        self.done: list[tuple[str, int]] = []

    def handle(self, m: Message) -> None:
        key = (m.key() or b"").decode()
        with self.lock:
            self.in_flight[key] += 1
            self.most_at_once = max(self.most_at_once, sum(self.in_flight.values()))
            self.most_per_task = max(self.most_per_task, self.in_flight[key])
        if key in self.slow or "all" in self.slow:
            assert self.release.wait(DEADLINE_S), "never released"
        with self.lock:
            self.in_flight[key] -= 1
            self.done.append((key, m.offset() or 0))


def test_a_slow_model_call_holds_up_no_task_read_after_it_and_no_offset_passes_it() -> None:
    model = SlowModel(slow={"slow"})
    r, consumer = overlap(model.handle)
    stop = threading.Event()
    r.run_batch([msg("slow", 0)], stop)
    r.run_batch([msg("a", 1), msg("b", 2)], stop)  # later batches, read while the slow call runs
    r.run_batch([msg("c", 3, partition=1)], stop)
    until(lambda: r._busy == {b"slow"}, "the tasks behind the slow one were handled")
    r._store_done(stop)
    assert stored(consumer) == [(1, 4)]  # partition 0 waits: offset 0 is not done
    model.release.set()
    until(lambda: not r._busy, "the slow task finished")
    r._store_done(stop)
    assert stored(consumer) == [(1, 4), (0, 3)]
    r.pool.shutdown()


def test_many_tasks_proposals_are_in_flight_together_across_batches() -> None:
    tasks = 6
    model = SlowModel(slow={"all"})
    r, _ = overlap(model.handle, threads=tasks)
    stop = threading.Event()
    for i in range(tasks):  # one request per batch: the plain runner would hold each behind the last
        r.run_batch([msg(f"t{i}", i)], stop)
    until(lambda: model.most_at_once == tasks, f"{tasks} model calls in flight at once")
    model.release.set()
    until(lambda: len(model.done) == tasks, "every call finished")
    r.pool.shutdown()


def test_one_tasks_messages_run_one_at_a_time_in_offset_order_while_others_overlap() -> None:
    model = SlowModel(slow={"a"})
    r, consumer = overlap(model.handle)
    stop = threading.Event()
    for offset in range(0, 12, 2):
        r.run_batch([msg("a", offset), msg(f"other{offset}", offset + 1)], stop)
    until(lambda: r._busy == {b"a"}, "the other tasks ran while task a waited")
    assert {k for k, _ in model.done} == {f"other{o}" for o in range(0, 12, 2)}
    model.release.set()
    until(lambda: not r._busy, "task a's messages ran")
    assert [o for k, o in model.done if k == "a"] == [0, 2, 4, 6, 8, 10]
    assert model.most_per_task == 1
    r._store_done(stop)
    assert stored(consumer) == [(0, 12)]
    r.pool.shutdown()


def test_a_refused_delivery_stores_nothing_and_reads_again_from_the_lowest_offset_not_stored() -> None:
    failures = DeliveryFailures()
    refused_once: list[int] = []

    def handle(m: Message) -> None:
        if m.offset() == 5 and not refused_once:  # its output is refused by the broker, once
            refused_once.append(5)
            failures.record(KafkaError(KafkaError._MSG_TIMED_OUT), m)

    r, consumer = overlap(handle, failures=failures)
    stop = threading.Event()
    r.run_batch([msg("a", 4), msg("b", 5), msg("a", 6)], stop)
    until(lambda: not r._busy, "the batch was handled")
    r._store_done(stop)
    assert consumer.stored == []
    assert consumer.seeks == [TopicPartition("t", 0, 4)]
    r.run_batch([msg("a", 4), msg("b", 5), msg("a", 6)], stop)  # read again; delivered this time
    until(lambda: not r._busy, "the redo was handled")
    r._store_done(stop)
    assert stored(consumer) == [(0, 7)]
    r.pool.shutdown()
