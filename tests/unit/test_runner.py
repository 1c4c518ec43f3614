"""The runner's bookkeeping, as pure logic (stand-in consumer and producer objects, no servers):
per-task order, offsets only for durable work, a refused delivery makes the batch run again."""

from __future__ import annotations

import threading
from typing import Any, cast

import pytest
import redis
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from helpers import StandInConsumer, StandInProducer, msg

from wakeful.consumers.kafka.overlap import OverlapRunner
from wakeful.consumers.kafka.producing import DeliveryFailures
from wakeful.consumers.kafka.runner import Runner
from wakeful.core.errors import KafkaClientFailed
from wakeful.core.log import Log
from wakeful.core.process import wait_until
from wakeful.core.retry import Retry, SlotMoved


def runner(handler: Any, failures: DeliveryFailures | None = None) -> tuple[Runner, StandInConsumer]:
    consumer = StandInConsumer()
    r = Runner(
        "test",
        "t",
        handler,
        cast(Consumer, consumer),
        cast(Producer, StandInProducer()),
        log=Log(),
        threads=4,
        failures=failures,
    )
    return r, consumer


def test_messages_of_one_task_run_in_offset_order_and_offsets_follow_the_batch() -> None:
    seen: list[tuple[str, int]] = []
    lock = threading.Lock()

    def handle(m: Message) -> None:
        with lock:
            seen.append(((m.key() or b"").decode(), m.offset() or 0))

    r, consumer = runner(handle)
    batch = [msg("a", 0), msg("b", 1), msg("a", 2), msg("c", 3, partition=1), msg("a", 4)]
    r.run_batch(batch, threading.Event())
    assert [o for k, o in seen if k == "a"] == [0, 2, 4]
    assert sorted(seen) == sorted(((m.key() or b"").decode(), m.offset() or 0) for m in batch)
    assert {(tp.partition, tp.offset) for tp in consumer.stored} == {(0, 5), (1, 4)}


def test_a_refused_delivery_stores_no_offset_and_rewinds_the_batch() -> None:
    failures = DeliveryFailures()
    refused_once: list[int] = []

    def handle(m: Message) -> None:
        if m.offset() == 7 and not refused_once:  # its output is refused by the broker, once
            refused_once.append(7)
            failures.record(KafkaError(KafkaError._MSG_TIMED_OUT), m)

    r, consumer = runner(handle, failures)
    r.run_batch([msg("a", 6), msg("b", 7), msg("a", 8)], threading.Event())
    assert consumer.stored == []
    assert {(tp.partition, tp.offset) for tp in consumer.seeks} == {(0, 6)}
    r.run_batch([msg("a", 6), msg("b", 7), msg("a", 8)], threading.Event())  # the redo, delivered
    assert [(tp.partition, tp.offset) for tp in consumer.stored] == [(0, 9)]


def test_a_transient_failure_is_retried_not_skipped() -> None:
    attempts: list[int] = []

    def handle(m: Message) -> None:
        attempts.append(m.offset() or 0)
        if len(attempts) < 3:
            raise Retry("the lease is busy", after=0.001)

    r, consumer = runner(handle)
    r.run_batch([msg("a", 0)], threading.Event())
    assert attempts == [0, 0, 0]
    assert r.counters.retries == 2 and r.counters.dead_letters == 0
    assert [(tp.partition, tp.offset) for tp in consumer.stored] == [(0, 1)]


@pytest.mark.parametrize(
    "failure",
    [
        SlotMoved(redis.exceptions.MovedError("3999 127.0.0.1:7002")),
        redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down"),
        redis.exceptions.TryAgainError("TRYAGAIN Multiple keys request during rehashing of slot"),
    ],
)
def test_a_redis_cluster_in_flux_is_waited_out_not_taken_for_a_poison_message(failure: Exception) -> None:
    # A reshard or a lost master passes; dead-lettering meanwhile would drop every task of the slot.
    attempts: list[int] = []

    def handle(m: Message) -> None:
        attempts.append(m.offset() or 0)
        if len(attempts) < 2:
            raise failure

    r, consumer = runner(handle)
    r.run_batch([msg("a", 0)], threading.Event())
    assert attempts == [0, 0] and r.counters.dead_letters == 0
    assert [(tp.partition, tp.offset) for tp in consumer.stored] == [(0, 1)]


def test_fatal_consumer_error_makes_the_role_exit_instead_of_idling_alive() -> None:
    # A fenced static member (or any fatal librdkafka error) never consumes again; a role that only
    # logged it would look alive while its partitions stall for good.
    r, _ = runner(lambda _m: None)
    fenced = KafkaError(KafkaError._FATAL, "Static consumer fenced", fatal=True)
    with pytest.raises(KafkaClientFailed, match="Static consumer fenced"):
        r._is_error(Message(topic="t", partition=0, offset=1, error=fenced))
    transient = KafkaError(KafkaError._TRANSPORT, "broker down")
    assert r._is_error(Message(topic="t", partition=0, offset=2, error=transient)) is True


def test_the_sender_of_a_message_the_role_fails_on_is_told_once_it_is_dead_lettered() -> None:
    told: list[tuple[int, str]] = []

    def handle(m: Message) -> None:
        if m.offset() == 1:
            raise ValueError("no room for that")

    r, consumer = runner(handle)
    r.on_poison = lambda m, reason: told.append((m.offset() or 0, reason))
    r.run_batch([msg("a", 0), msg("b", 1)], threading.Event())
    assert told == [(1, "test failed on this message: ValueError('no room for that')")]
    assert r.counters.dead_letters == 1
    assert [(tp.partition, tp.offset) for tp in consumer.stored] == [(0, 2)]


def test_a_failure_to_tell_the_sender_neither_wedges_nor_repeats_the_dead_letter() -> None:
    calls: list[int] = []

    def handle(_m: Message) -> None:
        raise ValueError("poison")

    def tell(m: Message, _reason: str) -> None:
        calls.append(m.offset() or 0)
        raise ConnectionError("redis is away")

    r, consumer = runner(handle)
    r.on_poison = tell
    r.run_batch([msg("a", 0)], threading.Event())
    assert calls == [0] and r.counters.dead_letters == 1
    assert [(tp.partition, tp.offset) for tp in consumer.stored] == [(0, 1)]


def test_the_sender_is_told_when_kafka_refuses_a_messages_output_for_good() -> None:
    failures = DeliveryFailures()
    told: list[int] = []
    refused = msg("a", 3)

    def handle(m: Message) -> None:
        if m.offset() == 3:  # its output is over the topic's size limit: it will never pass
            failures.recorder(m)(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), refused)

    r, consumer = runner(handle, failures)
    r.on_poison = lambda m, _reason: told.append(m.offset() or 0)
    r.run_batch([msg("b", 2), refused], threading.Event())
    assert told == [3] and r.counters.dead_letters == 1
    assert [(tp.partition, tp.offset) for tp in consumer.stored] == [(0, 4)]


def test_a_batch_whose_partitions_were_taken_away_goes_on_to_the_next_batch() -> None:
    """librdkafka refuses to store offsets of partitions a rebalance moved to another process; that
    process redoes the batch, so this one must not die (no role restart, no wedged loop)."""

    class Revoked(StandInConsumer):
        def store_offsets(self, offsets: list[TopicPartition]) -> None:
            raise KafkaException(KafkaError(KafkaError._STATE, "StoreOffsets failed: Local: Erroneous state"))

    handled: list[int] = []
    r = Runner(
        "test",
        "t",
        lambda m: handled.append(m.offset() or 0),
        cast(Consumer, Revoked()),
        cast(Producer, StandInProducer()),
        log=Log(),
        threads=2,
    )
    r.run_batch([msg("a", 3), msg("b", 4)], threading.Event())
    r.run_batch([msg("a", 5)], threading.Event())
    assert sorted(handled) == [3, 4, 5] and r.counters.batches == 2


@pytest.mark.parametrize("kind", [Runner, OverlapRunner])
def test_the_batch_hook_sees_the_whole_batch_before_any_handler_and_its_failure_stops_nothing(
    kind: type[Runner],
) -> None:
    """before_batch reads ahead for a batch (inbound's lookups); a hook that fails is a saving
    missed, never a batch lost: every handler still runs and the offsets still move."""
    seen: list[str] = []
    hooked: list[list[int]] = []

    def hook(msgs: list[Message]) -> None:
        hooked.append([m.offset() or 0 for m in msgs])
        seen.append("hook")
        if len(hooked) == 2:
            raise redis.ConnectionError("dropped")

    consumer = StandInConsumer()
    r = kind(
        "test",
        "t",
        lambda m: seen.append("handle"),
        cast(Consumer, consumer),
        cast(Producer, StandInProducer()),
        log=Log(),
        threads=2,
        before_batch=hook,
    )
    r.run_batch([msg("a", 0), msg("b", 1)], threading.Event())
    r.run_batch([msg("a", 2)], threading.Event())
    assert wait_until(lambda: seen.count("handle") == 3, 10)
    assert hooked == [[0, 1], [2]] and seen[0] == "hook"  # before the first batch's handlers
    if kind is OverlapRunner:  # it stores what is done at its next poll
        r._next_batch = lambda: []  # type: ignore[method-assign]
        cast(OverlapRunner, r)._store_done(threading.Event())
    assert max(tp.offset for tp in consumer.stored) == 3
