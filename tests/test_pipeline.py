"""The pipeline end to end: real worker processes, real Kafka and Redis, every refusal recorded."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from helpers import (
    BankClient,
    kafka_as,
    kafka_python_as,
    produce,
    refund_proposal,
    role_message,
    start_fleet,
    wait_logged,
)

from wakeful.consumers.gate.main import Gate
from wakeful.consumers.kafka import wiring
from wakeful.core import provenance, topics
from wakeful.core.kafka_rights import UPSTREAM
from wakeful.core.log import Log
from wakeful.core.retry import Retry
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.examples.refund import Stage
from wakeful.examples.refund import app as refund_app
from wakeful.examples.refund_story import INJECTION
from wakeful.operate.client import REQUESTER, Client
from wakeful.producers.publish import KafkaPythonPublisher
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import Envelope

LEASE_TTL_MS = 1500  # a lease held by a killed executor lapses quickly, not in the default 15 s


@pytest.fixture(scope="module")
def workers(client: Client) -> Iterator[Fleet]:
    fleet = start_fleet(client, model="gullible", lease_ttl_ms=LEASE_TTL_MS)
    yield fleet
    fleet.stop()


def end_offsets(bootstrap: str, topic: str) -> list[TopicPartition]:
    consumer = Consumer(kafka_as(bootstrap) | {"group.id": "offsets-probe"})
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    marks = [
        TopicPartition(topic, p, consumer.get_watermark_offsets(TopicPartition(topic, p))[1]) for p in parts
    ]
    consumer.close()
    return marks


def dead_letters(
    bootstrap: str, start: list[TopicPartition], needle: str, want: int, timeout: float = 20
) -> list[dict[str, Any]]:
    """DLQ records since `start` whose raw input mentions `needle`."""
    consumer = Consumer(kafka_as(bootstrap) | {"group.id": f"dlq-{uuid.uuid4().hex}"})
    consumer.assign(start)
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(found) < want and time.monotonic() < deadline:
        for msg in consumer.consume(500, 0.3):
            letter = orjson.loads(msg.value() or b"{}")
            if needle in letter.get("raw", "") or needle == letter.get("task_id"):
                found.append(letter)
    consumer.close()
    return found


def publish_raw(bootstrap: str, key: str, value: bytes, copies: int = 1) -> None:
    producer = Producer(kafka_as(bootstrap, UPSTREAM) | {"acks": "all"})
    for _ in range(copies):
        producer.produce(topics.EVENTS, key=key.encode(), value=value)
    assert producer.flush(10) == 0


# ---- the demo's story, one test per step ----------------------------------------------------


def test_task_that_needs_approval_is_refused_before_approval(client: Client, workers: Fleet) -> None:
    task_id, created = client.new_task(2500)
    assert created["stage"] == "awaiting_approval"
    before = client.show(task_id)
    ran = client.run(task_id)
    assert ran["status"] == "rejected" and "needs an approval for version 1" in ran["reason"]
    shown = client.show(task_id)
    assert shown["stage"] == "awaiting_approval" and shown["ledger"] == []
    assert shown["state_version"] == before["state_version"]  # a refused event writes nothing


def test_wrong_approver_is_rejected(client: Client, workers: Fleet) -> None:
    task_id, _ = client.new_task(2500)
    receipt = client.approve(task_id, "mallory", 1)
    assert (receipt["status"], receipt["reason"]) == ("rejected", "not an authorised approver")
    assert client.show(task_id)["stage"] == "awaiting_approval"


def test_right_approval_runs_the_task_once(client: Client, workers: Fleet) -> None:
    task_id, _ = client.new_task(2500)
    assert client.approve(task_id, "alice", 1)["status"] == "accepted"
    shown = client.wait_settled(task_id)
    assert shown["stage"] == "closed"
    assert [(e["amount"], e["op_key"]) for e in shown["ledger"]] == [(2500, f"REFUND:{task_id}:v1")]
    assert shown["approval"]["consumed"] is True and shown["approval"]["approver_ref"] == "alice"


def test_no_duplicate_refund_when_executor_dies_after_downstream_call(
    client: BankClient, workers: Fleet
) -> None:
    executor = workers.restart("executor", fault="executor.after_downstream_call")
    try:
        task_id, _ = client.new_task(400)
        executor.wait(timeout=60)
        assert executor.returncode == -9
        assert client.show(task_id)["stage"] == "ready" and len(client.bank.entries(task_id)) == 1
    finally:
        workers.start_role("executor")
    shown = client.wait_settled(task_id, 60)
    assert shown["stage"] == "closed" and len(shown["ledger"]) == 1
    assert shown["external_refs"]["ledger_entry"] == shown["ledger"][0]["entry_id"]


def test_amended_task_rejects_its_stale_approval(client: Client, workers: Fleet) -> None:
    task_id, _ = client.new_task(2500)
    assert client.amend(task_id, 3000)["version"] == 2
    receipt = client.approve(task_id, "alice", 1)
    assert receipt["status"] == "rejected"
    assert receipt["reason"] == "approval is for version 1, task is now version 2"
    assert client.show(task_id)["ledger"] == []
    assert client.approve(task_id, "alice", 2)["status"] == "accepted"
    assert [e["amount"] for e in client.wait_settled(task_id)["ledger"]] == [3000]


def test_instruction_planted_in_evidence_is_blocked_into_needs_review(client: Client, workers: Fleet) -> None:
    task_id, _ = client.new_task(300, note=INJECTION)
    shown = client.wait_settled(task_id)
    assert shown["stage"] == "needs_review"
    assert "5000" in shown["last_refusal"] and "300 EUR" in shown["last_refusal"]
    assert shown["ledger"] == []


# ---- the door ------------------------------------------------------------------------------


def test_forged_expired_unknown_key_and_malformed_events_go_to_dlq_and_cause_no_transition(
    client: Client, workers: Fleet, kafka_bootstrap: str
) -> None:
    start = end_offsets(kafka_bootstrap, topics.DLQ)
    requester = client.signer(REQUESTER)
    cases: dict[str, tuple[str, bytes]] = {}

    valid = sign_event(requester, events.CREATE, {"amount": 10}, task_id=f"t-forged-{uuid.uuid4().hex[:8]}")
    forged = orjson.loads(valid.encode())
    forged["payload"]["amount"] = 999_999  # changed after signing
    cases["bad signature"] = (valid.task_id or "", orjson.dumps(forged))

    old = sign_event(
        requester,
        events.CREATE,
        {"amount": 10},
        task_id=f"t-old-{uuid.uuid4().hex[:8]}",
        issued_at=datetime.now(UTC) - timedelta(hours=1),
    )
    cases["too old"] = (old.task_id or "", old.encode())

    stranger = Ed25519Signer("key-stranger", Ed25519PrivateKey.generate())
    unknown = sign_event(stranger, events.CREATE, {"amount": 10}, task_id=f"t-unknown-{uuid.uuid4().hex[:8]}")
    cases["unknown key id"] = (unknown.task_id or "", unknown.encode())

    wrong_kind = sign_event(
        client.signer("mallory"), events.CREATE, {"amount": 10}, task_id=f"t-kind-{uuid.uuid4().hex[:8]}"
    )
    cases["may not send"] = (wrong_kind.task_id or "", wrong_kind.encode())

    garbage_id = f"t-garbage-{uuid.uuid4().hex[:8]}"
    cases["malformed event"] = (garbage_id, b"\xff\x00 not json " + garbage_id.encode())
    missing_id = f"t-missing-{uuid.uuid4().hex[:8]}"
    cases["malformed event: "] = (missing_id, orjson.dumps({"schema_version": 1, "task_id": missing_id}))

    for key, value in cases.values():
        publish_raw(kafka_bootstrap, key, value)
    for reason, (task_id, _) in cases.items():
        letters = dead_letters(kafka_bootstrap, start, task_id, 1)
        assert letters, f"no dead letter for the {reason} case"
        assert reason.split(":")[0] in letters[0]["reason"], letters[0]
        assert letters[0]["source"] == "inbound"
        assert client.store.client.exists(f"wk:{{{task_id}}}:state") == 0
    receipt = client.receipt(old.event_id, old.task_id, key_id=old.key_id)
    assert receipt["status"] == "rejected" and receipt["reason"].startswith("event is too old")


def test_same_event_delivered_ten_times_causes_one_transition(
    client: Client, workers: Fleet, kafka_bootstrap: str
) -> None:
    task_id, _ = client.new_task(2500)
    before = client.show(task_id)["state_version"]
    amend = sign_event(client.signer(REQUESTER), events.AMEND, {"amount": 2600}, task_id=task_id)
    publish_raw(kafka_bootstrap, task_id, amend.encode(), copies=10)
    sentinel = client.run(task_id)  # same key, so it is handled after all ten copies
    assert sentinel["status"] == "rejected"
    shown = client.show(task_id)
    # one transition for the amendment; the refused sentinel writes nothing
    assert shown["state_version"] == before + 1
    assert (shown["version"], shown["amount"]) == (2, 2600)


def test_events_from_the_pure_python_publisher_reach_the_same_consumer(
    client: Client, workers: Fleet
) -> None:
    bootstrap = client.settings.kafka_bootstrap
    publisher = KafkaPythonPublisher(bootstrap, security=kafka_python_as(bootstrap, UPSTREAM))
    try:
        task_id = f"t-kp-{uuid.uuid4().hex[:8]}"
        event = sign_event(client.signer(REQUESTER), events.CREATE, {"amount": 20}, task_id=task_id)
        publisher.publish(event)
    finally:
        publisher.close()
    receipt = client.receipt(event.event_id, task_id, key_id=event.key_id)
    assert receipt["status"] == "accepted" and receipt["task_id"] == task_id


# ---- authority read live, waits that end ----------------------------------------------------


def test_approval_for_an_old_version_is_refused(client: Client, workers: Fleet) -> None:
    task_id, _ = client.new_task(5000)
    client.amend(task_id, 4000)
    client.amend(task_id, 4500)
    receipt = client.approve(task_id, "bob", 2)
    assert receipt["reason"] == "approval is for version 2, task is now version 3"


def test_approver_revoked_while_the_task_waits_is_refused_at_resume(client: Client, workers: Fleet) -> None:
    task_id, _ = client.new_task(2500)
    client.authority.remove_approver("bob")
    try:
        receipt = client.approve(task_id, "bob", 1)
    finally:
        client.authority.add_approver("bob")
    assert (receipt["status"], receipt["reason"]) == ("rejected", "not an authorised approver")


def test_approver_revoked_after_approving_is_refused_by_the_executor(client: Client, workers: Fleet) -> None:
    workers.stop_role("executor")
    try:
        task_id, _ = client.new_task(2500)
        assert client.approve(task_id, "bob", 1)["status"] == "accepted"
        client.authority.remove_approver("bob")
    finally:
        workers.start_role("executor")
    try:
        shown = client.wait_settled(task_id, 60)
    finally:
        client.authority.add_approver("bob")
    assert shown["stage"] == "needs_review" and "bob is no longer authorised" in shown["last_refusal"]
    assert shown["ledger"] == []


def test_passed_deadline_escalates(client: Client, workers: Fleet) -> None:
    task_id, _ = client.new_task(2500, wait_s=1)
    shown = client.wait_stage(task_id, {Stage.NEEDS_REVIEW}, timeout=30)
    assert shown["stage"] == "needs_review"
    assert "escalated to ops-lead" in shown["last_refusal"]
    assert shown["pending_waits"] == []


# ---- concurrency and staleness ----------------------------------------------------------------


def test_two_gates_woken_for_the_same_task_apply_the_event_once(
    client: Client, workers: Fleet, settings: Settings
) -> None:
    task_id, _ = client.new_task(2500)
    # Without an executor the task stays where the gates leave it, however long their clients take
    # to connect: the version read below is the gates' doing alone.
    workers.stop_role("executor")
    before = client.show(task_id)["state_version"]
    cp = client.store.load(task_id)
    corr = cp.execution.pending_waits[0].correlation_id
    event = sign_event(client.signer("alice"), events.APPROVE, {"version": 1}, correlation_id=corr)
    wake = Envelope(
        message_id=event.event_id,
        task_id=task_id,
        task_version=1,
        kind="wake",
        created_at=datetime.now(UTC),
        trace_id=event.event_id,
        payload={
            "reason": "event",
            "principal": "alice",
            "event": event.encode().decode(),
            "judged_at": datetime.now(UTC).isoformat(),
        },
    )
    msg = role_message(settings, "inbound", topics.WAKE, task_id, wake.encode())

    def gate_worker(name: str) -> None:
        producer = Producer(kafka_as(settings.kafka_bootstrap, "gate"))
        gate = Gate(
            wiring.store_for(settings, "gate"),
            producer,
            Log(),
            keys=provenance.load_keys(settings, "gate"),
            app=refund_app,
        )
        while True:
            try:
                gate.handle(msg)
                break
            except Retry:
                time.sleep(0.01)
        producer.flush(10)

    threads = [threading.Thread(target=gate_worker, args=(f"gate-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    try:
        assert client.store.load(task_id).state_version == before + 1
    finally:
        workers.start_role("executor")


def test_a_proposal_for_a_superseded_version_is_dropped_not_dead_lettered(
    client: Client, workers: Fleet, kafka_bootstrap: str
) -> None:
    task_id, _ = client.new_task(2500)
    client.amend(task_id, 2400)
    shown = client.show(task_id)
    start = end_offsets(kafka_bootstrap, topics.DLQ)
    log = workers.dir / "executor.log"
    since = log.stat().st_size if log.exists() else 0
    proposal = refund_proposal(task_id, 1, 2500)
    producer = Producer(kafka_as(kafka_bootstrap) | {"acks": "all"})
    produce(producer, role_message(client.settings, "proposer", topics.PROPOSALS, task_id, proposal.encode()))
    assert producer.flush(10) == 0
    dropped = wait_logged(log, "executor.superseded", task_id, since)
    assert dropped is not None and dropped["why"].startswith("stale proposal"), dropped
    assert dead_letters(kafka_bootstrap, start, task_id, 1, timeout=3) == []
    after = client.show(task_id)
    assert after["state_version"] == shown["state_version"] and after["ledger"] == []
