"""Both publisher clients put verifiable events on the broker, keyed so one routing key stays on one
partition in publish order, and refuse bad events before anything reaches the topic."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient
from helpers import kafka_as, kafka_python_as

from wakeful.consumers.kafka import client as kafka_client
from wakeful.core.errors import ConfigError, PublishError, ServerUnavailable
from wakeful.core.settings import Settings
from wakeful.operate.topics import ensure_topics
from wakeful.producers import keys
from wakeful.producers.publish import ConfluentPublisher, KafkaPythonPublisher, Publisher
from wakeful.producers.signing import Ed25519Signer, HmacSigner, sign_event
from wakeful.schemas.events import APPROVE, MAX_EVENT_BYTES, RUN, SignedEvent
from wakeful.schemas.signatures import VerifyKey

PARTITIONS = 3
# What a watermark probe may answer while a just-created topic elects its leaders.
ELECTING = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
}
ED = Ed25519Signer.from_seed("crm-1", bytes(range(32)))
HM = HmacSigner("ui-1", b"shared-secret-of-the-approvals-ui")
VERIFY_KEYS = {
    "crm-1": VerifyKey("crm-1", "ed25519", keys.public_bytes(ED), "system:crm"),
    "ui-1": VerifyKey("ui-1", "hmac-sha256", HM.secret, "system:approvals-ui"),
}
# The tests publish to scratch topics of their own, so the publishers log in as the admin.
CLIENTS: dict[str, Callable[[str, str], Publisher]] = {
    "confluent": lambda bootstrap, topic: ConfluentPublisher(bootstrap, topic, security=kafka_as(bootstrap)),
    "kafka-python": lambda bootstrap, topic: KafkaPythonPublisher(
        bootstrap, topic, security=kafka_python_as(bootstrap)
    ),
}


@pytest.fixture()
def topic(kafka_bootstrap: str, unique: str) -> Iterator[str]:
    name = f"wakeful.test.publish.{unique}"
    ensure_topics(Settings.from_env(), PARTITIONS, names=[name])
    yield name
    admin = AdminClient(kafka_as(kafka_bootstrap))
    admin.delete_topics([name])[name].result()


def end_offsets(bootstrap: str, topic: str) -> list[int]:
    """Each partition's end offset; waits out a new topic's leader election."""
    consumer = Consumer(kafka_as(bootstrap) | {"group.id": "offsets-probe"})
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                return [
                    consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in range(PARTITIONS)
                ]
            except KafkaException as exc:
                if exc.args[0].code() not in ELECTING or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        consumer.close()


def read_back(bootstrap: str, topic: str, want: int) -> list[Message]:
    consumer = Consumer(kafka_as(bootstrap) | {"group.id": f"reader-{topic}"})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    messages: list[Message] = []
    deadline = time.monotonic() + 30
    while len(messages) < want and time.monotonic() < deadline:
        for msg in consumer.consume(want, 0.5):
            assert msg.error() is None, msg.error()
            messages.append(msg)
    consumer.close()
    return messages


def java_partition(key: str) -> int:
    """The partition the Java client's default partitioner picks for a key."""
    return kafka_client.partition_of(key, PARTITIONS)


def signed(
    signer: Ed25519Signer | HmacSigner,
    kind: str,
    payload: dict[str, Any],
    task_id: str,
    correlation_id: str | None = None,
) -> SignedEvent:
    # signing.Signer declares key_id and alg as settable attributes, which the frozen signer
    # dataclasses do not offer, so mypy refuses them as a Signer; the cast goes with that fix.
    return sign_event(signer, kind, payload, task_id=task_id, correlation_id=correlation_id)


def event_for(signer: Ed25519Signer | HmacSigner, key: int, step: int) -> SignedEvent:
    # Even keys are approvals routed by correlation id, odd ones task runs routed by task id.
    if key % 2 == 0:
        return signed(signer, APPROVE, {"version": step}, task_id=f"t-{key}", correlation_id=f"c-{key}")
    return signed(signer, RUN, {"step": step}, task_id=f"t-{key}")


def test_events_from_both_clients_verify_and_each_routing_key_keeps_one_partition_in_publish_order(
    kafka_bootstrap: str, topic: str
) -> None:
    confluent = CLIENTS["confluent"](kafka_bootstrap, topic)
    pure = CLIENTS["kafka-python"](kafka_bootstrap, topic)
    published: list[SignedEvent] = []
    # Each call returns after the broker acknowledged, so alternating clients still fixes the order.
    for step in range(4):
        batch = [event_for(ED, key, step) for key in range(8)]
        confluent.publish_many(batch)
        published += batch
        batch = [event_for(HM, key, step) for key in range(8)]
        pure.publish_many(batch)
        published += batch
    for publisher, signer in ((confluent, HM), (pure, ED)):
        single = event_for(signer, 3, 99)
        publisher.publish(single)
        published.append(single)
    confluent.close()
    pure.close()

    messages = read_back(kafka_bootstrap, topic, len(published))

    assert len(messages) == len(published)
    by_id = {e.event_id: e for e in published}
    order: dict[str, list[tuple[int, int, str]]] = {}
    for msg in messages:
        event = SignedEvent.decode(msg.value() or b"")
        assert event == by_id[event.event_id]
        assert VERIFY_KEYS[event.key_id].verify(event)
        assert dict(msg.headers() or [])["event_id"] == event.event_id.encode()
        assert msg.key() == event.routing_key.encode()
        order.setdefault(event.routing_key, []).append(
            (msg.partition() or 0, msg.offset() or 0, event.event_id)
        )
    assert {e.key_id for e in published} == set(VERIFY_KEYS)
    for routing_key, seen in order.items():
        assert {p for p, _, _ in seen} == {java_partition(routing_key)}, routing_key
        in_offset_order = [event_id for _, _, event_id in sorted(seen)]
        assert in_offset_order == [e.event_id for e in published if e.routing_key == routing_key]
    assert len({java_partition(k) for k in order}) > 1, "keys all hashed to one partition: weak test"


def unsigned(event: SignedEvent) -> SignedEvent:
    return event.model_copy(update={"signature": ""})


def oversize(event: SignedEvent) -> SignedEvent:
    return signed(ED, RUN, {"note": "x" * MAX_EVENT_BYTES}, task_id=event.task_id or "t-big")


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("spoil", [unsigned, oversize], ids=["unsigned", "oversize"])
def test_a_bad_event_is_refused_before_anything_of_its_batch_reaches_the_topic(
    kafka_bootstrap: str, topic: str, client: str, spoil: Callable[[SignedEvent], SignedEvent]
) -> None:
    before = end_offsets(kafka_bootstrap, topic)
    good = [event_for(ED, key, 0) for key in range(4)]
    bad = spoil(event_for(ED, 9, 0))
    publisher = CLIENTS[client](kafka_bootstrap, topic)

    with pytest.raises(PublishError) as single:
        publisher.publish(bad)
    with pytest.raises(PublishError) as batch:
        publisher.publish_many([*good, bad])
    publisher.close()  # flushes anything a faulty publisher might have queued

    for refused in (single.value, batch.value):
        assert refused.event_ids == (bad.event_id,)
        assert not refused.retryable
    assert end_offsets(kafka_bootstrap, topic) == before


@pytest.mark.parametrize("client", [ConfluentPublisher, KafkaPythonPublisher])
def test_a_publisher_for_a_missing_topic_fails_at_start_naming_the_topic(
    kafka_bootstrap: str, unique: str, client: type[ConfluentPublisher | KafkaPythonPublisher]
) -> None:
    missing = f"wakeful.test.missing.{unique}"
    with pytest.raises(ConfigError, match=re.escape(missing)):
        security = (
            kafka_as(kafka_bootstrap) if client is ConfluentPublisher else kafka_python_as(kafka_bootstrap)
        )
        client(kafka_bootstrap, missing, connect_timeout=2.0, security=security)
    admin = AdminClient(kafka_as(kafka_bootstrap))
    assert missing not in admin.list_topics(timeout=10).topics


@pytest.mark.parametrize("client", [ConfluentPublisher, KafkaPythonPublisher])
def test_an_unreachable_broker_fails_at_start_naming_the_address(
    client: type[ConfluentPublisher | KafkaPythonPublisher],
) -> None:
    with pytest.raises(ServerUnavailable, match=re.escape("127.0.0.1:1")):
        client("127.0.0.1:1", "wakeful.events", connect_timeout=1.0)
