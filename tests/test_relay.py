"""The outbox relay puts every transition's record on wakeful.log, and a relay killed with SIGKILL
mid-batch loses none of them: readers that dedupe by record id see each exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import redis
from confluent_kafka import Consumer, TopicPartition
from helpers import bump_attempts, kafka_as, new_checkpoint, topic_marks, wait_letter

from wakeful.consumers.kafka import client as kafka_client
from wakeful.core import kafka_rights, provenance, topics
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.schemas.logs import log_records
from wakeful.state import acl, functions, keys
from wakeful.state.lease import Leases
from wakeful.state.outbox import TRIM, Outbox
from wakeful.state.store import Store


def start_relay(fault: str | None = None) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "wakeful.cli.main", "worker", "relay"]
    if fault:
        argv += ["--fault", fault]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def log_end_offsets(bootstrap: str) -> list[TopicPartition]:
    consumer = Consumer(kafka_as(bootstrap) | {"group.id": "offsets-probe"})
    parts = consumer.list_topics(topics.LOG, timeout=10).topics[topics.LOG].partitions
    marks = [
        TopicPartition(topics.LOG, p, consumer.get_watermark_offsets(TopicPartition(topics.LOG, p))[1])
        for p in parts
    ]
    consumer.close()
    return marks


def read_log(bootstrap: str, start: list[TopicPartition], task_ids: set[str], want: int) -> list[str]:
    """Record ids on wakeful.log for these tasks, from the given offsets on, duplicates included;
    every message signed by the relay, and every record in the partition its task id hashes to."""
    role_keys = provenance.load_keys(Settings.from_env(), kafka_rights.ADMIN)
    consumer = Consumer(kafka_as(bootstrap) | {"group.id": f"reader-{os.getpid()}-{time.time()}"})
    consumer.assign(start)
    seen: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.5):
            assert msg.error() is None
            records, problems = log_records(msg.value() or b"")
            assert problems == []
            mine = [r for r in records if r.task_id in task_ids]
            if mine:
                signer = role_keys.sender(topics.LOG, msg.key() or b"", msg.value() or b"", msg.headers())
                assert signer == "relay", signer
                assert {kafka_client.partition_of(r.task_id, len(start)) for r in mine} == {msg.partition()}
                seen += [r.record_id for r in mine]
        if len(set(seen)) >= want:
            break
    consumer.close()
    return seen


def messages_since(bootstrap: str, start: list[TopicPartition]) -> int:
    return sum(
        end.offset - begin.offset for begin, end in zip(start, log_end_offsets(bootstrap), strict=True)
    )


def outbox_drained(settings: Settings, task_ids: set[str]) -> bool:
    admin = acl.connect(settings, "admin")
    return all(admin.xlen(keys.outbox(t)) == 0 for t in task_ids)


def written(gate_store: Store, leases: Leases, *, tasks: int, steps: int) -> set[str]:
    """The record ids of `tasks` new tasks, each created and then moved `steps` times."""
    expected: set[str] = set()
    for _ in range(tasks):
        cp = gate_store.create(new_checkpoint(), "create").checkpoint
        lease = leases.acquire(cp.task_id)
        for step in range(steps):
            gate_store.transition(cp.task_id, None, f"step-{step}", bump_attempts, lease=lease)
        expected |= {f"{cp.task_id}:{v}" for v in range(1, steps + 2)}
    return expected


def relay_until_drained(settings: Settings, task_ids: set[str]) -> int | None:
    """Run a relay until these tasks' outboxes are empty (asserted, within 60 s); its exit code
    after SIGTERM."""
    relay = start_relay()
    try:
        assert wait_until(lambda: outbox_drained(settings, task_ids), 60, interval=0.2)
    finally:
        relay.send_signal(signal.SIGTERM)
        relay.wait(timeout=30)
    return relay.returncode


@pytest.mark.parametrize("fault", ["relay.mid_batch", "relay.after_publish"])
def test_every_record_reaches_the_log_once_per_id_across_a_relay_sigkill(
    settings: Settings, kafka_bootstrap: str, gate_store: Store, leases: Leases, fault: str
) -> None:
    start = log_end_offsets(kafka_bootstrap)
    expected = written(gate_store, leases, tasks=40, steps=5)
    task_ids = {r.split(":")[0] for r in expected}

    crashed = start_relay(fault)
    _, err = crashed.communicate(timeout=60)
    assert crashed.returncode == -signal.SIGKILL, err.decode()
    assert f"fault point {fault} reached".encode() in err
    assert not outbox_drained(settings, task_ids), "the crashed relay trimmed records it never finished"

    assert relay_until_drained(settings, task_ids) == 0

    seen = read_log(kafka_bootstrap, start, task_ids, len(expected))
    assert set(seen) == expected  # nothing lost; readers dedupe by record id
    duplicates = sum(n - 1 for n in Counter(seen).values())
    assert duplicates > 0, "the SIGKILL should have forced a republish (at-least-once, deduped by id)"


def test_a_claims_records_ride_in_one_message_per_partition_and_a_planted_entry_is_dead_lettered(
    settings: Settings, kafka_bootstrap: str, gate_store: Store, leases: Leases
) -> None:
    start, letters_since = log_end_offsets(kafka_bootstrap), topic_marks(kafka_bootstrap, topics.DLQ)
    expected = written(gate_store, leases, tasks=30, steps=3)
    task_ids = {r.split(":")[0] for r in expected}
    # Entries no writer of this code makes, planted by someone who can write a task's outbox.
    planted = sorted(task_ids)[0]
    admin = acl.connect(settings, "admin")
    admin.xadd(keys.outbox(planted), {"id": f"{planted}:99", "r": b"\xffnot json"})
    admin.xadd(keys.outbox(planted), {"stray": "field"})

    relay_until_drained(settings, task_ids)

    seen = read_log(kafka_bootstrap, start, task_ids, len(expected))
    assert set(seen) == expected
    assert messages_since(kafka_bootstrap, start) < len(expected) / 4, "one message per record is back"
    for reason in ("not JSON", "lacks the id or r field"):
        letter = wait_letter(
            kafka_bootstrap,
            letters_since,
            lambda d, reason=reason: d.get("source") == "relay" and reason in d.get("reason", ""),  # type: ignore[misc]
        )
        assert letter is not None and letter[0]["task_id"] == planted, reason


def test_an_outbox_the_relay_empties_goes_and_one_written_meanwhile_stays(
    settings: Settings, gate_store: Store, leases: Leases
) -> None:
    """The relay's trim deletes the stream with its last record, in one function: a record added
    between its read and its trim keeps the stream. Its FCALL reaches outboxes only."""
    admin, relay_client = acl.connect(settings, "admin"), acl.connect(settings, "relay")
    relay = Outbox(relay_client)
    cp = gate_store.create(new_checkpoint(), "create").checkpoint
    key = keys.outbox(cp.task_id)
    read, _ = relay.read([cp.task_id])
    gate_store.transition(cp.task_id, None, "step", bump_attempts, lease=leases.acquire(cp.task_id))
    relay.trim(read)
    assert admin.xlen(key) == 1
    read, _ = relay.read([cp.task_id])
    relay.trim(read)
    assert admin.exists(key) == 0
    with pytest.raises(redis.exceptions.NoPermissionError):
        functions.call(relay_client, TRIM, [keys.state(cp.task_id)], ["0-1"])
    assert admin.exists(keys.state(cp.task_id)) == 1


def test_the_sweep_deletes_an_empty_outbox_an_older_relay_left(settings: Settings, unique: str) -> None:
    admin = acl.connect(settings, "admin")
    empty, holding = keys.outbox(f"t-empty-{unique}"), keys.outbox(f"t-holding-{unique}")
    entry = admin.xadd(empty, {"id": "x", "r": "{}"})
    admin.xdel(empty, entry)  # an outbox drained by a relay from before the trim deleted it
    admin.xadd(holding, {"id": "y", "r": "{}"})
    try:
        Outbox(acl.connect(settings, "relay")).sweep()
        assert (admin.exists(empty), admin.xlen(holding)) == (0, 1)
    finally:
        admin.delete(empty, holding)
        admin.srem(keys.OUTBOX_DIRTY, f"t-holding-{unique}")
