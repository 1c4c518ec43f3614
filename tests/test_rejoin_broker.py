"""A stuck consumer is replaced by a real one that joins its group on the broker and reads on (the
rule and the runner's wiring: tests/unit/test_rejoin.py)."""

from __future__ import annotations

import threading
import uuid
from typing import cast

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__
from helpers import kafka_as
from unit.test_rejoin import LostClient, Recorded

from wakeful.consumers.kafka.consuming import consumer_config
from wakeful.consumers.kafka.producing import make_producer
from wakeful.consumers.kafka.runner import Runner
from wakeful.core.kafka_rights import ADMIN
from wakeful.core.log import Log
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings

DEADLINE_S = 60


def _held_in_group(admin: AdminClient, group: str) -> int:
    """The partitions the group's members hold, as the broker's group coordinator says."""
    described = admin.describe_consumer_groups([group])[group].result(10)
    return sum(len(member.assignment.topic_partitions) for member in described.members)


def made(bootstrap: str, name: str, partitions: int) -> tuple[AdminClient, str, str, str]:
    """A topic of its own with `partitions`, and a group name of its own: (admin, the unique part,
    topic, group)."""
    unique = uuid.uuid4().hex[:8]
    topic, group = f"wakeful-test.{name}-{unique}", f"wakeful-test-{name}-{unique}"
    admin = AdminClient(kafka_as(bootstrap))
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    return admin, unique, topic, group


def test_a_stuck_client_is_replaced_by_one_that_joins_the_group_on_the_broker_and_reads_on(
    settings: Settings, kafka_bootstrap: str
) -> None:
    admin, _, topic, group = made(kafka_bootstrap, "rejoin", partitions=2)
    producer, failures = make_producer(settings, ADMIN)
    for i in range(4):
        producer.produce(topic, key=f"task-{i}".encode(), value=b"v", partition=i % 2)
    assert producer.flush(30) == 0
    handled: list[bytes] = []
    lost = LostClient()
    config = consumer_config(settings, ADMIN, group)
    runner = Runner(
        "rejoin-test",
        topic,
        lambda m: handled.append(m.key() or b""),
        cast(Consumer, lost),
        producer,
        log=Log(role="rejoin-test"),
        threads=2,
        failures=failures,
        remake=lambda: Consumer(config),
        rejoin_s=0.5,
    )
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: sorted(handled) == [f"task-{i}".encode() for i in range(4)], DEADLINE_S)
        assert lost.closed.is_set()
        # The broker's view, from a client of its own: the runner's consumer is polled by its
        # thread, and a call into it from this one can block behind that poll.
        assert wait_until(lambda: _held_in_group(admin, group) == 2, DEADLINE_S)
    finally:
        stop.set()
        thread.join(30)
        admin.delete_topics([topic])
    assert not thread.is_alive()


def test_a_client_fenced_by_a_static_twin_is_replaced_at_once_and_the_runner_reads_on(
    settings: Settings, kafka_bootstrap: str
) -> None:
    """A static member's client that another with its group.instance.id fenced (what a broker
    restart does to one whose rejoin took a new member id) never consumes again. The runner
    replaces it on the fatal error itself, not a rejoin window later."""
    admin, unique, topic, group = made(kafka_bootstrap, "fenced", partitions=1)
    producer, failures = make_producer(settings, ADMIN)
    config = consumer_config(settings, ADMIN, group) | {"group.instance.id": f"static-{unique}"}
    handled: list[bytes] = []
    log = Recorded()
    runner = Runner(
        "fenced-test", topic, lambda m: handled.append(m.key() or b""), Consumer(config), producer,
        log=log, failures=failures, remake=lambda: Consumer(config), rejoin_s=3_600,
    )  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    twin = Consumer(config)
    try:
        producer.produce(topic, key=b"before", value=b"v")
        assert producer.flush(30) == 0
        assert wait_until(lambda: handled == [b"before"], DEADLINE_S)
        twin.subscribe([topic])  # the same identity joins: the runner's client is fenced

        def replaced() -> bool:
            twin.poll(0.2)  # the twin's client joins as it polls
            return any(e == "runner.replacing_ended_client" for e, _ in log.records)

        assert wait_until(replaced, DEADLINE_S), [e for e, _ in log.records]
        producer.produce(topic, key=b"after", value=b"v")
        assert producer.flush(30) == 0
        # "before", whose offset commit was the one fenced, may come again: handlers are idempotent.
        assert wait_until(lambda: handled[-1:] == [b"after"], DEADLINE_S), handled
        assert set(handled) == {b"before", b"after"}
    finally:
        stop.set()
        thread.join(30)
        twin.close()
        admin.delete_topics([topic])
    assert not thread.is_alive()
