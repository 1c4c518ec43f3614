"""A dead letter always goes somewhere, and the offset moves on.

A message too large or too broken to dead-letter whole is dead-lettered as a digest under the DLQ's
size limit; an error that can never succeed is never retried as if it could; a role stuck retrying
still stops when told to. These tests drive the real pipeline from outside (a raw confluent-kafka
producer, then kcat); the rules without servers are in tests/unit/test_dead_letter_rules.py.
"""

from __future__ import annotations

import hashlib
import signal
import subprocess
import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]  # re-exported, not in __all__
from helpers import kafka_as, kcat, kcat_sasl, topic_marks, wait_letter

from wakeful.consumers.kafka.consuming import consumer_config
from wakeful.consumers.kafka.producing import make_producer
from wakeful.consumers.kafka.runner import Runner
from wakeful.core import topics
from wakeful.core.kafka_rights import ADMIN, UPSTREAM
from wakeful.core.log import Log
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import REQUESTER, Client
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.schemas.events import SignedEvent

GARBAGE_BYTES = 400 * 1024
DEADLINE_S = 90.0  # a shared 2-core machine: outcomes are waited for, generously


def create_event(client: Client) -> SignedEvent:
    task_id = f"t-dlq-{uuid.uuid4().hex[:10]}"
    return sign_event(
        client.signer(REQUESTER), events.CREATE, {"amount": 10, "currency": "EUR"}, task_id=task_id
    )


def publish(bootstrap: str, partition: int, key: bytes, value: bytes) -> int:
    """Publish one message with a plain confluent-kafka producer (no wakeful code); its offset."""
    offsets: list[int] = []
    producer = Producer(
        kafka_as(bootstrap, UPSTREAM) | {"acks": "all", "message.max.bytes": 2 * GARBAGE_BYTES}
    )
    producer.produce(
        topics.EVENTS,
        value=value,
        key=key,
        partition=partition,
        on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset() or 0),
    )
    assert producer.flush(30) == 0 and offsets and offsets[0] >= 0, "the broker did not take the message"
    return offsets[0]


def partitions(bootstrap: str, topic: str) -> int:
    return len(topic_marks(bootstrap, topic))


def end_offset(bootstrap: str, topic: str, partition: int) -> int:
    return next(tp.offset for tp in topic_marks(bootstrap, topic) if tp.partition == partition)


def assert_digest(letter: dict[str, Any] | None, garbage: bytes, partition: int, offset: int) -> None:
    assert letter is not None, "no dead letter for the garbage: intake is stuck on it"
    assert letter["digest"] is True and letter["source"] == "inbound"
    assert letter["sha256"] == hashlib.sha256(garbage).hexdigest() and letter["size"] == len(garbage)
    assert (letter["topic"], letter["partition"], letter["offset"]) == (topics.EVENTS, partition, offset)
    assert "over the" in letter["reason"] and "byte limit" in letter["reason"]
    assert len(letter["raw"].encode()) < 4 * 1024 and letter.get("raw_base64") is None


# ---- the real pipeline, attacked from outside ------------------------------------------------


def test_oversize_garbage_on_events_is_dead_lettered_as_a_digest_and_intake_continues(
    client: Client, shared_fleet: Fleet, kafka_bootstrap: str
) -> None:
    garbage = b"\xff" * GARBAGE_BYTES
    # The premise: the broker takes it (the topic's limit is the broker's 1 MiB default), and as
    # UTF-8 text with replacement characters it would triple past every limit.
    events_limit = _topic_limit(kafka_bootstrap, topics.EVENTS)
    assert len(garbage) < events_limit < 3 * len(garbage)
    since = topic_marks(kafka_bootstrap, topics.DLQ)
    poisoned, other = 0, partitions(kafka_bootstrap, topics.EVENTS) - 1
    same, elsewhere = create_event(client), create_event(client)

    offset = publish(kafka_bootstrap, poisoned, b"garbage", garbage)
    publish(kafka_bootstrap, poisoned, (same.task_id or "").encode(), same.encode())
    publish(kafka_bootstrap, other, (elsewhere.task_id or "").encode(), elsewhere.encode())

    for event in (same, elsewhere):
        receipt = client.receipt(event.event_id, event.task_id, timeout=DEADLINE_S, key_id=event.key_id)
        assert receipt["status"] == "accepted", receipt
    found = wait_letter(kafka_bootstrap, since, lambda d: d.get("sha256") == _sha(garbage), DEADLINE_S)
    assert_digest(found[0] if found else None, garbage, poisoned, offset)
    assert found is not None and found[1] <= 256 * 1024


def test_garbage_sent_by_kcat_is_dead_lettered_and_the_partition_reads_on(
    client: Client, shared_fleet: Fleet, kafka_bootstrap: str, tmp_path: Path
) -> None:
    garbage = b"\xff" * GARBAGE_BYTES + uuid.uuid4().hex.encode()  # a digest of its own
    (tmp_path / "garbage").write_bytes(garbage)
    since = topic_marks(kafka_bootstrap, topics.DLQ)
    poisoned = 1 % partitions(kafka_bootstrap, topics.EVENTS)
    offset = end_offset(kafka_bootstrap, topics.EVENTS, poisoned)
    # kcat sends each file named on its command line as one message; it logs in as upstream systems do.
    argv = ["-P", "-b", kafka_bootstrap, *kcat_sasl(UPSTREAM), "-t", topics.EVENTS, "-p", str(poisoned)]
    sent = kcat(*argv, "-k", "kcat", str(tmp_path / "garbage"))
    assert sent.returncode == 0, sent.stderr.decode()
    after = create_event(client)
    publish(kafka_bootstrap, poisoned, (after.task_id or "").encode(), after.encode())

    assert (
        client.receipt(after.event_id, after.task_id, timeout=DEADLINE_S, key_id=after.key_id)["status"]
        == "accepted"
    )
    found = wait_letter(kafka_bootstrap, since, lambda d: d.get("sha256") == _sha(garbage), DEADLINE_S)
    assert_digest(found[0] if found else None, garbage, poisoned, offset)


def test_an_input_whose_output_kafka_refuses_for_good_is_dead_lettered_and_the_next_one_runs(
    settings: Settings, kafka_bootstrap: str
) -> None:
    """A handler's normal output that the broker can never take (over the output topic's
    max.message.bytes): its input goes to the DLQ with the reason and the offset moves on."""
    unique = uuid.uuid4().hex[:8]
    source, sink, group, role = (
        f"wakeful-test.refusal-in-{unique}",
        f"wakeful-test.refusal-out-{unique}",
        f"wakeful-test-refusal-{unique}",
        f"refusal-{unique}",
    )
    admin = AdminClient(kafka_as(kafka_bootstrap))
    created = admin.create_topics(
        [NewTopic(source, 1, 1), NewTopic(sink, 2, 1, config={"max.message.bytes": "4096"})]
    )
    for future in created.values():
        future.result(30)
    since = topic_marks(kafka_bootstrap, topics.DLQ)
    publish_to(kafka_bootstrap, source, [b"big", b"small"])
    # A test role on scratch topics: it runs as the admin, which may write and read them.
    producer, failures = make_producer(settings, ADMIN)
    handled: list[bytes] = []

    def handle(msg: Message) -> None:
        # On partitions of their own: a batch over the limit is refused whole, small records included.
        big = msg.value() == b"big"
        producer.produce(sink, key=msg.key(), value=b"o" * (20_000 if big else 10), partition=0 if big else 1)
        handled.append(msg.value() or b"")

    runner = Runner(
        role,
        source,
        handle,
        Consumer(consumer_config(settings, ADMIN, group)),
        producer,
        log=Log(role=role),
        threads=2,
        failures=failures,
    )
    stop = threading.Event()
    thread = threading.Thread(target=runner.run, args=(stop,), daemon=True)
    thread.start()
    try:
        found = wait_letter(kafka_bootstrap, since, lambda d: d.get("source") == role, DEADLINE_S)
        assert found is not None, "the refused output wedged the runner: its input was never dead-lettered"
        letter = found[0]
        assert letter["sha256"] == _sha(b"big") and letter["raw"] == "big"
        assert "MSG_SIZE_TOO_LARGE" in letter["reason"] and sink in letter["reason"]
        assert wait_until(lambda: _committed(kafka_bootstrap, group, source) == 2, DEADLINE_S)
        assert b"small" in handled
    finally:
        stop.set()
        thread.join(30)
        admin.delete_topics([source, sink])
    assert not thread.is_alive()


def test_a_role_stuck_retrying_stops_on_sigterm_and_loses_nothing(
    client: Client, shared_fleet: Fleet, kafka_bootstrap: str
) -> None:
    """Redis refuses writes (out of memory): inbound retries the rejection's receipt. SIGTERM still
    stops it at once; the restarted role reads the batch again and writes the receipt."""
    old = sign_event(
        client.signer(REQUESTER),
        events.CREATE,
        {"amount": 10, "currency": "EUR"},
        task_id=f"t-dlq-old-{uuid.uuid4().hex[:8]}",
        issued_at=datetime.now(UTC) - timedelta(hours=2),
    )
    log = shared_fleet.dir / "inbound.log"
    seen = log.stat().st_size if log.exists() else 0
    admin = client.admin
    limit = str(admin.config_get("maxmemory")["maxmemory"])
    proc = shared_fleet.procs["inbound"]
    try:
        admin.config_set("maxmemory", 1)
        publish(kafka_bootstrap, 0, (old.task_id or "").encode(), old.encode())
        assert wait_until(lambda: b"OutOfMemoryError" in log.read_bytes()[seen:], DEADLINE_S), (
            "inbound never retried the refused write"
        )
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail("inbound ignored SIGTERM while it was retrying")
        assert code == 0
    finally:
        admin.config_set("maxmemory", limit)
        if proc.poll() is not None:
            shared_fleet.start_role("inbound")
    receipt = client.receipt(old.event_id, old.task_id, timeout=DEADLINE_S, key_id=old.key_id)
    assert receipt["status"] == "rejected" and receipt["reason"].startswith("event is too old")


def publish_to(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer(kafka_as(bootstrap) | {"acks": "all"})
    for value in values:
        producer.produce(topic, key=b"k", value=value)
    assert producer.flush(30) == 0


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer(kafka_as(bootstrap) | {"group.id": group})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    finally:
        consumer.close()


def _topic_limit(bootstrap: str, topic: str) -> int:
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]  # re-exported

    admin = AdminClient(kafka_as(bootstrap))
    futures = admin.describe_configs([ConfigResource("topic", topic)])
    return int(next(iter(futures.values())).result(30)["max.message.bytes"].value)


def _sha(value: bytes) -> str:
    return hashlib.sha256(value).hexdigest()
