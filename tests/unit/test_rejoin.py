"""A consumer that lost its partitions and never got back into its group is replaced, and the role
consumes again: after a broker restart a static member has been seen to log the loss and never
rejoin, alive and idle while its partitions waited (consumers/kafka/consuming.py, Membership).

The rule, as a table; then the runner's wiring with stand-in clients. tests/test_rejoin_broker.py
replaces a stuck client by a real one that reads on from a real broker."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from helpers import StandInProducer, msg

from wakeful.consumers.kafka.consuming import CLASSIC_SESSION_S, TELL_WAIT_S, Membership, why_waiting
from wakeful.consumers.kafka.failures import Verdict, classify, is_fatal
from wakeful.consumers.kafka.overlap import OverlapRunner
from wakeful.consumers.kafka.runner import Runner
from wakeful.core.errors import KafkaClientFailed
from wakeful.core.log import Log
from wakeful.core.process import wait_until

Rebalance = Callable[[Any, list[TopicPartition]], None]


@pytest.mark.parametrize(
    ("events", "now", "holds", "stuck"),
    [
        ([], 1_000.0, False, False),  # never lost anything: holding nothing is a spare process
        ([("lost", 0.0)], 59.0, False, False),  # lost, still within the rejoin window
        ([("lost", 0.0)], 60.0, False, True),  # lost, nothing back a whole window later
        ([("lost", 0.0)], 60.0, True, False),  # lost, holds partitions again (no callback seen)
        ([("lost", 0.0), ("assigned", 5.0)], 100.0, False, False),  # back in, even with nothing
        ([("lost", 0.0), ("lost", 50.0)], 60.0, False, True),  # the first loss starts the clock
        ([("lost", 0.0), ("assigned", 5.0), ("lost", 50.0)], 100.0, False, False),
        ([("lost", 0.0), ("assigned", 5.0), ("lost", 50.0)], 110.0, False, True),
    ],
)
def test_only_a_member_that_lost_its_partitions_and_got_nothing_back_is_stuck(
    events: list[tuple[str, float]], now: float, holds: bool, stuck: bool
) -> None:
    m = Membership(rejoin_s=60)
    for event, at in events:
        m.lost(at) if event == "lost" else m.assigned()
    assert m.stuck(now, lambda: holds) is stuck


def test_the_client_is_asked_what_it_holds_only_about_a_loss_past_the_window() -> None:
    def never() -> bool:
        raise AssertionError("asked the client with no loss to account for")

    m = Membership(rejoin_s=60)
    assert not m.stuck(1e9, never)
    m.lost(0.0)
    assert not m.stuck(59.0, never)


class LostClient:
    """A client whose membership is lost at subscribe and never comes back."""

    def __init__(self) -> None:
        self.closed = threading.Event()

    def subscribe(
        self, topics: list[str], on_assign: Rebalance, on_revoke: Rebalance, on_lost: Rebalance
    ) -> None:
        on_lost(self, [TopicPartition(topics[0], 0)])

    def poll(self, timeout: float) -> Message | None:
        self.closed.wait(min(timeout, 0.01))
        return None

    def consume(self, n: int, timeout: float) -> list[Message]:
        return []

    def assignment(self) -> list[TopicPartition]:
        return []

    def store_offsets(self, offsets: list[TopicPartition]) -> None:
        raise AssertionError("nothing was read through a lost client")

    def close(self) -> None:
        self.closed.set()


class FreshClient(LostClient):
    """A client that is assigned partition 0 at subscribe and then reads one message."""

    def __init__(self) -> None:
        super().__init__()
        self.pending = [msg("task-1", 0)]
        self.stored: list[TopicPartition] = []

    def subscribe(
        self, topics: list[str], on_assign: Rebalance, on_revoke: Rebalance, on_lost: Rebalance
    ) -> None:
        on_assign(self, [TopicPartition(topics[0], 0)])

    def poll(self, timeout: float) -> Message | None:
        return self.pending.pop() if self.pending else super().poll(timeout)

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("t", 0)]

    def store_offsets(self, offsets: list[TopicPartition]) -> None:
        self.stored += offsets


@contextmanager
def replacing(
    kind: type[Runner], first: LostClient, fresh: FreshClient, rejoin_s: float
) -> Iterator[tuple[Runner, list[bytes]]]:
    """A runner of `kind` on `first`, whose maker hands out `fresh`, running in a thread of its own
    until the block ends; with the keys of what it handled."""
    handled: list[bytes] = []
    runner = kind(
        "test",
        "t",
        lambda m: handled.append(m.key() or b""),
        cast(Consumer, first),
        cast(Producer, StandInProducer()),
        log=Log(),
        threads=2,
        remake=lambda: cast(Consumer, fresh),
        rejoin_s=rejoin_s,
    )
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield runner, handled
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


@pytest.mark.parametrize("kind", [Runner, OverlapRunner])
def test_a_client_that_never_got_back_into_its_group_is_replaced_and_reading_goes_on(
    kind: type[Runner],
) -> None:
    lost, fresh = LostClient(), FreshClient()
    with replacing(kind, lost, fresh, rejoin_s=0.2) as (runner, handled):
        assert wait_until(lambda: handled == [b"task-1"] and bool(fresh.stored), 10)
        assert lost.closed.is_set() and runner.consumer is cast(Consumer, fresh)
        assert [(tp.partition, tp.offset) for tp in fresh.stored] == [(0, 1)]


def test_a_role_that_was_never_assigned_says_once_why_it_waits() -> None:
    m = Membership(rejoin_s=60, started_at=100.0)
    assert m.waited(100.0 + TELL_WAIT_S - 0.1) is None
    assert m.waited(100.0 + TELL_WAIT_S) == TELL_WAIT_S
    assert m.waited(500.0) is None  # said once
    assigned = Membership(started_at=0.0)
    assigned.assigned()
    assert assigned.waited(500.0) is None  # a role that reads says nothing
    why = why_waiting("executor", "wakeful.proposals", 21.4)
    assert why.startswith("executor holds no partition of wakeful.proposals 21 s after it started")
    assert "kill -9" in why and f"up to {CLASSIC_SESSION_S} s" in why


class Recorded(Log):
    """A log whose records a test reads."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, event: str, **fields: Any) -> None:
        self.records.append((event, fields))


class Unassigned(LostClient):
    """A client whose group never hands it a partition (and never took one away)."""

    def subscribe(
        self, topics: list[str], on_assign: Rebalance, on_revoke: Rebalance, on_lost: Rebalance
    ) -> None:
        return None


def test_a_runner_that_reads_nothing_yet_logs_why() -> None:
    log = Recorded()
    runner = Runner(
        "executor", "wakeful.proposals", lambda m: None, cast(Consumer, Unassigned()),
        cast(Producer, StandInProducer()), log=log,
    )  # fmt: skip
    runner.membership.tell_after_s = 0.0
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: any(e == "runner.waiting" for e, _ in log.records), 10)
    finally:
        stop.set()
        thread.join(10)
    [told] = [fields for e, fields in log.records if e == "runner.waiting"]
    assert told["role"] == "executor" and "holds no partition of wakeful.proposals" in told["why"]


def test_a_runner_without_a_maker_keeps_its_client() -> None:
    """Tests and tools that hand the runner one client get no replacement behind their back."""
    lost = LostClient()
    runner = Runner(
        "test", "t", lambda m: None, cast(Consumer, lost), cast(Producer, StandInProducer()), log=Log()
    )
    runner.membership.rejoin_s = 0.0
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: runner.membership.lost_at is not None, 10)
        assert not lost.closed.is_set() and runner.consumer is cast(Consumer, lost)
    finally:
        stop.set()
        thread.join(10)
    assert lost.closed.is_set()  # by the runner's own stop


FENCED = KafkaError(
    KafkaError._FATAL,
    "Fatal error: Broker: Static consumer fenced by other consumer with same group.instance.id: "
    "OffsetCommit failed",
)


class EndedClient(FreshClient):
    """A client that still says it holds partition 0, and whose poll hands over one message with
    the fatal error librdkafka raises when a static member's commit is fenced after a broker
    restart; it never consumes again."""

    def __init__(self) -> None:
        super().__init__()
        self.pending = [msg("task-0", 0), Message(topic="t", partition=0, offset=-1, error=FENCED)]

    def consume(self, n: int, timeout: float) -> list[Message]:
        taken, self.pending = self.pending, []
        return taken

    def store_offsets(self, offsets: list[TopicPartition]) -> None:
        raise AssertionError("a batch read with a fatal error was handled on an ended client")


def test_the_fatal_error_event_is_fatal_though_its_flag_says_not() -> None:
    assert not FENCED.fatal()  # librdkafka's event as confluent-kafka hands it over
    assert is_fatal(FENCED) and classify(FENCED) is Verdict.FATAL


@pytest.mark.parametrize("kind", [Runner, OverlapRunner])
def test_a_client_ended_by_a_fatal_error_is_replaced_at_once_though_it_says_it_holds_partitions(
    kind: type[Runner],
) -> None:
    ended, fresh = EndedClient(), FreshClient()
    # No loss to wait out: the fatal error alone replaces the client.
    with replacing(kind, ended, fresh, rejoin_s=3_600) as (runner, handled):
        assert wait_until(lambda: handled == [b"task-1"] and bool(fresh.stored), 10), handled
        assert ended.closed.is_set() and runner.consumer is cast(Consumer, fresh)


def test_a_runner_without_a_maker_exits_on_a_fatal_error_to_be_restarted() -> None:
    runner = Runner(
        "test", "t", lambda m: None, cast(Consumer, EndedClient()), cast(Producer, StandInProducer()),
        log=Log(),
    )  # fmt: skip
    with pytest.raises(KafkaClientFailed, match="fenced"):
        runner.run(threading.Event())
