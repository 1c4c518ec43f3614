"""`wakeful dev bench-infra`: the raw ceiling of this Kafka and Redis on this machine.

Later stages are compared against these figures, so they measure the engines alone: no wakeful
code runs between the client calls.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer

from wakeful.core import kafka_auth
from wakeful.core.log import librdkafka_config
from wakeful.core.process import Say
from wakeful.core.settings import Settings
from wakeful.operate import topics as topic_admin
from wakeful.state import acl

PAYLOAD_BYTES = 200


def run(settings: Settings, messages: int, say: Say) -> dict[str, Any]:
    result: dict[str, Any] = {"messages": messages, "payload_bytes": PAYLOAD_BYTES}
    result.update(_kafka(settings, messages, say))
    say("redis: PINGs and WATCH-CAS operations from one client ...")
    result.update(redis_figures(settings))
    return result


def _kafka(settings: Settings, messages: int, say: Say) -> dict[str, float]:
    topic = f"wakeful.bench.{uuid.uuid4().hex[:8]}"
    try:
        topic_admin.ensure_topics(settings, names=[topic])
        return _produce_consume(settings, topic, messages, say)
    finally:
        for failed in topic_admin.drop_scratch(settings, [topic], [f"bench-{topic}"]):
            say(f"left behind: {failed}")


def _produce_consume(settings: Settings, topic: str, messages: int, say: Say) -> dict[str, float]:
    admin = kafka_auth.client_config(settings, kafka_auth.ADMIN)  # a scratch topic: the admin's
    payload = os.urandom(PAYLOAD_BYTES // 2).hex().encode()
    producer = Producer(
        admin
        | {
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "batch.num.messages": 10_000,
            "compression.type": "none",
        }
        | librdkafka_config()
    )
    say(f"kafka: producing {messages} x {PAYLOAD_BYTES} B messages to {topic} ...")
    started = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, key=str(i % 1024).encode(), value=payload)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    producer.flush(60)
    produce_s = time.perf_counter() - started

    consumer = Consumer(
        admin
        | {
            "group.id": f"bench-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
        | librdkafka_config()
    )
    consumer.subscribe([topic])
    say("kafka: consuming them back ...")
    seen = 0
    started = 0.0
    deadline = time.monotonic() + 120
    while seen < messages and time.monotonic() < deadline:
        batch = consumer.consume(10_000, 0.5)
        if batch and not started:
            started = time.perf_counter()
        seen += sum(1 for m in batch if m.error() is None)
    consume_s = time.perf_counter() - started if started else float("inf")
    consumer.close()
    return {
        "kafka_produce_msgs_per_s": round(messages / produce_s),
        "kafka_consume_msgs_per_s": round(seen / consume_s),
        "kafka_consumed": seen,
    }


def redis_figures(settings: Settings, pings: int = 5_000, cas_ops: int = 5_000) -> dict[str, float]:
    client = acl.connect(settings, "admin")
    latencies = []
    for _ in range(pings):
        t0 = time.perf_counter()
        client.ping()
        latencies.append((time.perf_counter() - t0) * 1e6)
    latencies.sort()
    key = f"wk:{{bench}}:{uuid.uuid4().hex}"
    client.set(key, 0)
    started = time.perf_counter()
    with client.pipeline(transaction=True) as pipe:
        for _ in range(cas_ops):
            pipe.watch(key)  # type: ignore[no-untyped-call]  # redis-py leaves watch() untyped
            value = int(pipe.get(key) or 0)
            pipe.multi()
            pipe.set(key, value + 1)
            pipe.execute()
    cas_s = time.perf_counter() - started
    final = int(client.get(key) or 0)
    client.delete(key)
    return {
        "redis_rtt_p50_us": round(statistics.median(latencies), 1),
        "redis_rtt_p99_us": round(latencies[int(len(latencies) * 0.99) - 1], 1),
        "redis_watch_cas_ops_per_s": round(cas_ops / cas_s),
        "redis_watch_cas_final": final,
    }


def render(result: dict[str, Any]) -> str:
    sent = f"{result['messages']:,} x {result['payload_bytes']} B, acks=all, idempotent"
    return "\n".join(
        [
            f"kafka produce  : {result['kafka_produce_msgs_per_s']:>10,} msgs/s ({sent})",
            f"kafka consume  : {result['kafka_consume_msgs_per_s']:>10,} msgs/s "
            f"({result['kafka_consumed']:,} read back)",
            f"redis RTT      : p50 {result['redis_rtt_p50_us']} us, "
            f"p99 {result['redis_rtt_p99_us']} us (PING)",
            f"redis WATCH-CAS: {result['redis_watch_cas_ops_per_s']:>10,} ops/s "
            "(one client, WATCH-GET-MULTI-SET-EXEC)",
        ]
    )
