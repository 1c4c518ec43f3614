"""Dedupe identities cannot be squatted or forged (docs/decisions.md D29).

An outside event is (key id, event id) at the door, in the task's inbox and in its receipt; ids the
runtime makes for itself live in "rt:", which no outside identity can have; and two messages with
one identity in one batch apply once. End to end against the stack `wakeful dev up` starts; the
identities and keys themselves: tests/unit/test_dedupe_keys.py.
"""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from helpers import (
    kafka_as,
    produce,
    refund_proposal,
    role_message,
    topic_marks,
    wait_dead_letter,
    wait_letter,
)

from wakeful.consumers.inbound.main import Inbound
from wakeful.consumers.kafka.runner import Runner
from wakeful.core import topics
from wakeful.core.log import Log
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.examples.refund import Stage
from wakeful.examples.refund import app as refund_app
from wakeful.operate.client import REQUESTER, Client
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.schemas.events import SignedEvent
from wakeful.state import acl, evidence, keys

SETTLE_S = 90.0


def _receipt(client: Client, event: SignedEvent, task_id: str) -> dict[str, Any]:
    return client.receipt(event.event_id, task_id, timeout=SETTLE_S, key_id=event.key_id)


def test_an_event_id_taken_by_another_signer_does_not_drop_the_genuine_event(
    client: Client, shared_fleet: Fleet
) -> None:
    task_id, created = client.new_task(2500)
    assert created["stage"] == Stage.AWAITING_APPROVAL.value
    genuine = sign_event(client.signer("alice"), events.APPROVE, {"version": 1}, task_id=task_id)
    squat = sign_event(
        client.signer("mallory"), events.APPROVE, {"version": 1}, task_id=task_id, event_id=genuine.event_id
    )
    client.publisher.publish(squat)
    assert _receipt(client, squat, task_id)["reason"] == "not an authorised approver"

    client.publisher.publish(genuine)
    assert _receipt(client, genuine, task_id)["status"] == "accepted"
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == Stage.CLOSED.value and len(shown["ledger"]) == 1
    assert shown["approval"]["approver_ref"] == "alice"
    # Each signer reads her own outcome.
    assert _receipt(client, squat, task_id)["status"] == "rejected"
    assert _receipt(client, genuine, task_id)["status"] == "accepted"


@pytest.mark.parametrize("forged", ["close", "approval"])
def test_a_runtime_message_id_cannot_be_preloaded_into_a_tasks_inbox(
    client: Client, shared_fleet: Fleet, forged: str
) -> None:
    task_id, _ = client.new_task(2500)
    approval = sign_event(client.signer("alice"), events.APPROVE, {"version": 1}, task_id=task_id)
    message_id = f"close:REFUND:{task_id}:v1" if forged == "close" else approval.event_id
    before = client.show(task_id)["state_version"]
    # Even an insider holding the proposer's key: a proposal the gate never asked for (the task
    # awaits its approval) is dropped with its reason and writes nothing, whatever id it carries.
    envelope = refund_proposal(task_id, before, 2500).model_copy(update={"message_id": message_id})
    since = topic_marks(client.settings.kafka_bootstrap, topics.DLQ)
    producer = Producer(kafka_as(client.settings.kafka_bootstrap))
    produce(producer, role_message(client.settings, "proposer", topics.PROPOSALS, task_id, envelope.encode()))
    assert producer.flush(30) == 0
    letter = wait_dead_letter(client.settings.kafka_bootstrap, since, task_id, "executor")
    assert letter is not None and letter["reason"].startswith("no proposal is outstanding")
    assert client.show(task_id)["state_version"] == before

    client.publisher.publish(approval)
    assert _receipt(client, approval, task_id)["status"] == "accepted"
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == Stage.CLOSED.value and len(shown["ledger"]) == 1


def test_two_events_with_one_id_in_one_batch_apply_once_and_the_second_writes_nothing(
    client: Client, shared_fleet: Fleet
) -> None:
    bootstrap = client.settings.kafka_bootstrap
    dlq, requests = topic_marks(bootstrap, topics.DLQ), topic_marks(bootstrap, topics.PROPOSALS_REQUEST)
    task_id, event_id = f"t-{uuid.uuid4().hex[:12]}", f"ev-{uuid.uuid4().hex}"
    first, second = (
        sign_event(
            client.signer(REQUESTER),
            events.CREATE,
            {"amount": 20, "currency": "EUR", "note": note},
            task_id=task_id,
            event_id=event_id,
        )
        for note in (f"first note {task_id}", f"second note {task_id}")
    )
    client.publisher.publish_many([first, second])

    letter = wait_letter(bootstrap, dlq, lambda d: event_id in str(d.get("reason", "")), SETTLE_S)
    assert letter is not None and letter[0]["reason"].startswith(f"duplicate event {event_id}")
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == Stage.CLOSED.value and len(shown["ledger"]) == 1
    stored: dict[bytes, bytes] = client.admin.hgetall(keys.evidence(task_id))  # type: ignore[assignment]
    assert {k: evidence.excerpt(v.decode()) for k, v in stored.items()} == {
        f"evidence:{task_id}:note".encode(): f"first note {task_id}"
    }
    windows = _records(bootstrap, requests, task_id)
    assert windows and all(f"second note {task_id}" not in w for w in windows)
    assert _receipt(client, first, task_id)["state_version"] == 1


def test_a_duplicate_handled_at_the_door_in_one_batch_is_rejected_before_anything_is_written(
    client: Client, settings: Settings
) -> None:
    task_id, event_id = f"t-{uuid.uuid4().hex[:12]}", f"ev-{uuid.uuid4().hex}"
    first, second = (
        sign_event(client.signer(REQUESTER), events.RUN, {"n": n}, task_id=task_id, event_id=event_id)
        for n in (1, 2)
    )
    letters: list[str] = []
    inbound, producer = _inbound(settings, letters)

    def message(event: SignedEvent, offset: int) -> Message:
        value = event.encode()
        return Message(topic=topics.EVENTS, partition=0, offset=offset, key=task_id.encode(), value=value)

    inbound.handle(message(first, 1))
    inbound.handle(message(second, 2))
    inbound.handle(message(first, 1))  # the winner, retried: still the winner
    assert len(letters) == 1 and letters[0].startswith(f"duplicate event {event_id}")
    assert producer.flush(30) == 0
    inbound.after_batch()
    assert client.admin.exists(keys.seen(first.key_id, event_id))
    assert client.admin.get(keys.receipt(event_id, task_id, key_id=first.key_id)) is None
    inbound.handle(message(second, 2))  # a later batch: the seen-set refuses it
    assert len(letters) == 2 and letters[1].startswith(f"duplicate event {event_id}")


def test_the_same_message_read_again_after_its_commit_was_lost_is_not_a_duplicate(
    client: Client, settings: Settings
) -> None:
    task_id, event_id = f"t-{uuid.uuid4().hex[:12]}", f"ev-{uuid.uuid4().hex}"
    event = sign_event(client.signer(REQUESTER), events.RUN, {"n": 1}, task_id=task_id, event_id=event_id)
    letters: list[str] = []
    inbound, producer = _inbound(settings, letters)

    def message(offset: int) -> Message:
        return Message(
            topic=topics.EVENTS, partition=3, offset=offset, key=task_id.encode(), value=event.encode()
        )

    inbound.handle(message(7))
    assert producer.flush(30) == 0
    inbound.after_batch()  # its wake is on Kafka; then the broker went away before the commit
    inbound.handle(message(7))  # the same message, read again by the partition's next owner
    assert letters == []  # nothing dead-lettered for our own lost commit
    inbound.handle(message(8))  # the event sent again: a second copy, at another offset
    assert len(letters) == 1 and letters[0].startswith(f"duplicate event {event_id}")


def _inbound(settings: Settings, letters: list[str]) -> tuple[Inbound, Producer]:
    """An inbound role driven by hand, its dead letters' reasons kept in `letters`, and its producer."""
    producer = Producer(kafka_as(settings.kafka_bootstrap, "inbound"))
    inbound = Inbound(
        acl.connect(settings, "inbound"), producer, Log(), settings.event_max_age, kinds=refund_app.kinds
    )
    inbound.runner = cast(
        Runner, SimpleNamespace(dead_letter=lambda _m, reason, _t=None: letters.append(reason))
    )
    return inbound, producer


def _records(bootstrap: str, since: list[TopicPartition], key: str) -> list[str]:
    """Values of the records keyed `key` between `since` and the topic's end now."""
    consumer = Consumer(
        kafka_as(bootstrap) | {"group.id": f"probe-{uuid.uuid4().hex}", "enable.auto.commit": False}
    )
    try:
        ends = {
            tp.partition: consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition), timeout=10)[
                1
            ]
            for tp in since
        }
        todo = {tp.partition for tp in since if tp.offset < ends[tp.partition]}
        consumer.assign(since)
        found: list[str] = []
        deadline = time.monotonic() + SETTLE_S
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is not None:
                    continue
                if msg.key() == key.encode():
                    found.append((msg.value() or b"").decode())
                if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                    todo.discard(msg.partition() or 0)
        assert not todo, f"partitions {sorted(todo)} not read to their end in {SETTLE_S:.0f}s"
        return found
    finally:
        consumer.close()
