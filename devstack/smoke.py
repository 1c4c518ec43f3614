"""A smoke round trip through the running stack: one Kafka message and one Redis CAS."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, Producer

from wakeful.core import kafka_auth
from wakeful.core.errors import StackError
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings
from wakeful.operate import topics as topic_admin
from wakeful.state import acl

SMOKE_TOPIC = "wakeful.smoke"


def run(settings: Settings, timeout: float = 30.0) -> dict[str, float]:
    """Returns the round-trip times in milliseconds; raises StackError when a leg fails."""
    topic_admin.ensure_topics(settings, 1, names=[SMOKE_TOPIC])
    marker = uuid.uuid4().hex
    started = time.perf_counter()
    # The smoke topic is nobody's output: only the admin may write and read it.
    admin = kafka_auth.client_config(settings, kafka_auth.ADMIN)
    producer = Producer(admin | {"acks": "all"} | librdkafka_config())
    producer.produce(SMOKE_TOPIC, key=marker, value=marker.encode())
    if producer.flush(timeout) != 0:
        raise StackError("kafka", f"the smoke message was not acknowledged within {timeout:.0f}s")
    consumer = Consumer(
        admin
        | {
            "group.id": f"wakeful-smoke-{marker}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        | librdkafka_config()
    )
    consumer.subscribe([SMOKE_TOPIC])
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None and msg.value() == marker.encode():
                break
        else:
            raise StackError("kafka", f"the smoke message did not come back within {timeout:.0f}s")
    finally:
        consumer.close()
    kafka_ms = (time.perf_counter() - started) * 1000

    started = time.perf_counter()
    client = acl.connect(settings, "admin")
    key = f"wk:{{smoke}}:{marker}"
    with client.pipeline(transaction=True) as pipe:
        pipe.watch(key)  # type: ignore[no-untyped-call]  # redis-py leaves watch() untyped
        before = pipe.get(key)
        pipe.multi()
        pipe.set(key, b"1" if before is None else b"2", px=60_000)
        pipe.execute()
    if client.get(key) != b"1":
        raise StackError("redis", "the smoke compare-and-swap did not stick")
    client.delete(key)
    redis_ms = (time.perf_counter() - started) * 1000
    return {"kafka_round_trip_ms": round(kafka_ms, 1), "redis_cas_ms": round(redis_ms, 2)}
