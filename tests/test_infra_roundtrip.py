"""The engines themselves, through the clients wakeful uses: both Kafka clients interoperate on one
topic, and Redis WATCH/MULTI rejects a write that raced it."""

from __future__ import annotations

import time

import pytest
import redis
from confluent_kafka import Consumer, Producer
from helpers import kafka_as, kafka_python_as
from kafka import KafkaConsumer

from wakeful.core.settings import Settings
from wakeful.operate import topics as topic_admin


def test_messages_from_confluent_kafka_reach_a_consumer_group_and_kafka_python(
    kafka_bootstrap: str, unique: str
) -> None:
    topic = f"wakeful.test.roundtrip.{unique}"
    topic_admin.ensure_topics(Settings.from_env(), 3, names=[topic])
    sent = {f"task-{i}".encode(): f"payload-{i}".encode() for i in range(20)}
    producer = Producer(kafka_as(kafka_bootstrap) | {"acks": "all"})
    for key, value in sent.items():
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0

    consumer = Consumer(
        kafka_as(kafka_bootstrap)
        | {
            "group.id": f"g-confluent-{unique}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    got: dict[bytes, bytes] = {}
    deadline = time.monotonic() + 30
    while len(got) < len(sent) and time.monotonic() < deadline:
        for msg in consumer.consume(100, 0.5):
            assert msg.error() is None
            got_key, got_value = msg.key(), msg.value()
            assert got_key is not None and got_value is not None
            got[got_key] = got_value
    consumer.commit(asynchronous=False)
    consumer.close()
    assert got == sent

    reader = KafkaConsumer(
        topic,
        **kafka_python_as(kafka_bootstrap),
        group_id=f"g-kafka-python-{unique}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=15_000,
    )
    also: dict[bytes, bytes] = {}
    for record in reader:
        also[record.key] = record.value
        if len(also) == len(sent):
            break
    reader.close()
    assert also == sent


def test_watch_multi_refuses_a_write_that_raced_it(redis_client: redis.Redis, unique: str) -> None:
    key = f"wk:{{{unique}}}:counter"
    redis_client.set(key, 1)
    with redis_client.pipeline() as pipe:
        pipe.watch(key)  # type: ignore[no-untyped-call]  # redis-py leaves watch() untyped
        seen = int(pipe.get(key) or 0)
        redis_client.set(key, 100)  # another writer wins the race
        pipe.multi()
        pipe.set(key, seen + 1)
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert redis_client.get(key) == b"100"

    with redis_client.pipeline() as pipe:
        pipe.watch(key)  # type: ignore[no-untyped-call]  # redis-py leaves watch() untyped
        seen = int(pipe.get(key) or 0)
        pipe.multi()
        pipe.set(key, seen + 1)
        pipe.execute()
    assert redis_client.get(key) == b"101"
    redis_client.delete(key)
