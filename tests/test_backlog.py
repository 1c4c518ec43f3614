"""Lateness is ours, never the sender's: an event is judged fresh by when the broker appended it, so
a role down for many times the max age dead-letters nothing the door took (D84); an event signed
long before it reached Kafka is still refused as stale, however fresh its append.

Each test runs a fleet of its own whose roles accept events for MAX_AGE_S seconds, pauses a role
(SIGSTOP) for three times that while creates and approvals are sent straight to Kafka, then lets it
go on and checks every event's receipt, every task's end, and the dead-letter topic.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    ConfigResource,
    NewTopic,
)
from helpers import inbound_wake, kafka_as, process_paused, produce, role_message, topic_marks, wait_letter

from wakeful.core import ids, kafka_auth, topics
from wakeful.core.kafka_rights import UPSTREAM
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate import topics as topic_admin
from wakeful.operate.client import REQUESTER, Client
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.schemas.events import SignedEvent
from wakeful.sdk.workflow import CLOSED
from wakeful.state import keys

# Short, so that three times it is a short wait; still several times what an event takes from its
# signing to its append here (straight to Kafka, well under a second), so only the outage ages one.
MAX_AGE_S = 5
OUTAGE_S = 3 * MAX_AGE_S
TASKS = 6  # of each kind: created during the outage, and approved during it
SETTLE_S = 120.0

pytestmark = pytest.mark.timeout(420)


@pytest.fixture(scope="module")
def fleet(client: Client) -> Iterator[Fleet]:
    running = Fleet({**os.environ, "WAKEFUL_EVENT_MAX_AGE": str(MAX_AGE_S)}).start()
    try:
        yield running
    finally:
        running.stop()


def approval(client: Client, task_id: str) -> SignedEvent:
    """alice's approval of the task's pending wait, sent and not waited for."""
    cp = client.store.load(task_id)
    wait = next(w for w in cp.execution.pending_waits if w.wait_for == "approval")
    named = ids.named_by(cp.security.tenant, task_id)
    return client.send(
        "alice",
        events.APPROVE,
        {"version": cp.state_version},
        task_id=named,
        correlation_id=wait.correlation_id,
    )


def waiting_for_approval(client: Client, n: int) -> list[str]:
    made = []
    for _ in range(n):
        task_id, receipt = client.new_task(2500)
        assert receipt["status"] == "accepted", receipt
        made.append(task_id)
    for task_id in made:
        assert client.wait_stage(task_id, {"awaiting_approval"}, SETTLE_S)["stage"] == "awaiting_approval"
    return made


@pytest.mark.parametrize("paused", [("inbound",), ("gate",), ("inbound", "gate")])
def test_a_role_down_for_three_times_the_max_age_dead_letters_nothing_the_door_took(
    client: Client, fleet: Fleet, kafka_bootstrap: str, paused: tuple[str, ...]
) -> None:
    to_approve = waiting_for_approval(client, TASKS)
    marks = topic_marks(kafka_bootstrap, topics.DLQ)
    procs = [fleet.procs[role] for role in paused]
    sent: list[tuple[SignedEvent, str]] = []
    for proc in procs:
        proc.send_signal(signal.SIGSTOP)
    try:
        assert wait_until(lambda: all(process_paused(p.pid) for p in procs), 30)
        down_at = time.monotonic()
        for _ in range(TASKS):
            named = f"t-late-{uuid.uuid4().hex[:10]}"
            event = client.send(REQUESTER, events.CREATE, {"amount": 10, "currency": "EUR"}, task_id=named)
            sent.append((event, ids.task_in(ids.DEFAULT_TENANT, named)))
        sent += [(approval(client, task_id), task_id) for task_id in to_approve]
        # The outage is the point: the events wait, unread or unapplied, far past their max age.
        assert wait_until(lambda: time.monotonic() - down_at > OUTAGE_S, OUTAGE_S + 10)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGCONT)
    for event, task_id in sent:
        receipt = client.receipt(event.event_id, task_id, SETTLE_S, key_id=event.key_id)
        assert receipt["status"] == "accepted", (event.kind, receipt)
    for _, task_id in sent:
        assert client.wait_settled(task_id, SETTLE_S)["stage"] == CLOSED
    ours = {task_id for _, task_id in sent}
    letter = wait_letter(kafka_bootstrap, marks, lambda d: d.get("task_id") in ours, timeout=5)
    assert letter is None, f"accepted work was dead-lettered after the outage: {letter}"


def signed_long_ago(client: Client, prefix: str) -> tuple[SignedEvent, str]:
    """A create its upstream system signed longer ago than the max age (captured, never delivered),
    and the id of the task it names."""
    named = f"{prefix}-{uuid.uuid4().hex[:10]}"
    signed_at = datetime.now(UTC) - timedelta(seconds=MAX_AGE_S + 3)
    payload = {"amount": 10, "currency": "EUR"}
    event = sign_event(client.signer(REQUESTER), events.CREATE, payload, task_id=named, issued_at=signed_at)
    return event, ids.task_in(ids.DEFAULT_TENANT, named)


def test_a_captured_event_published_after_its_max_age_is_refused_as_stale(
    client: Client, fleet: Fleet
) -> None:
    """Its append is new, its signature old: the broker's time does not make it fresh."""
    captured, task_id = signed_long_ago(client, "t-captured")
    client.publisher.publish(captured)
    receipt = client.receipt(captured.event_id, task_id, SETTLE_S, key_id=captured.key_id)
    assert receipt["status"] == "rejected" and receipt["reason"].startswith("event is too old"), receipt
    assert not client.admin.exists(keys.state(task_id)), "a stale create made its task"


def _described(admin: AdminClient, name: str) -> bool:
    try:
        next(iter(admin.describe_configs([ConfigResource("topic", name)]).values())).result(10)
    except KafkaException:
        return False
    return True


def _config(admin: AdminClient, name: str) -> dict[str, str]:
    found = admin.describe_configs([ConfigResource("topic", name)])
    return {k: str(v.value) for k, v in next(iter(found.values())).result(30).items()}


def test_a_topic_made_before_is_stamped_with_the_brokers_time_and_nothing_else_changes(
    settings: Settings,
) -> None:
    """`wakeful admin topics` (and `dev up`) move a state dir's older topics to the broker's time."""
    name = f"wakeful-test-stamp-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(kafka_auth.client_config(settings, kafka_auth.ADMIN))
    made = {"message.timestamp.type": "CreateTime", "retention.ms": "3600000"}
    admin.create_topics([NewTopic(name, 1, 1, config=made)])[name].result(30)
    try:
        # The controller answers the create before every broker's metadata names the topic.
        assert wait_until(lambda: _described(admin, name), 30), f"{name} never became describable"
        assert topic_admin.stamp_appends(admin, [name], 30) == [name]
        # The controller answers the alter before the broker has replayed it into what it describes.
        assert wait_until(lambda: _config(admin, name)["message.timestamp.type"] == "LogAppendTime", 30)
        assert topic_admin.stamp_appends(admin, [name], 30) == []  # once is enough
        assert _config(admin, name)["retention.ms"] == "3600000"  # the operator's own setting stays
    finally:
        topic_admin.drop_scratch(settings, [name])


def test_a_producer_cannot_choose_the_time_its_event_is_judged_by(client: Client, fleet: Fleet) -> None:
    """A captured event published with its producer's timestamp set to just after it was signed is
    stamped by the broker all the same: it is judged by when it really arrived, and refused."""
    captured, task_id = signed_long_ago(client, "t-backdated")
    producer = Producer(kafka_as(client.settings.kafka_bootstrap, UPSTREAM))
    claimed_ms = int((captured.issued_at + timedelta(seconds=1)).timestamp() * 1000)
    producer.produce(
        topics.EVENTS, key=captured.routing_key.encode(), value=captured.encode(), timestamp=claimed_ms
    )
    assert producer.flush(30) == 0
    receipt = client.receipt(captured.event_id, task_id, SETTLE_S, key_id=captured.key_id)
    assert receipt["status"] == "rejected" and receipt["reason"].startswith("event is too old"), receipt


def test_a_wake_that_waited_days_for_the_gate_is_applied_as_the_door_judged_it(
    client: Client, fleet: Fleet
) -> None:
    """The door judged an approval two days ago, and the gate reads its wake only now: the gate holds
    the wake to the broker's append of it, never to how late it is read (the fixed hour before D84)."""
    [task_id] = waiting_for_approval(client, 1)
    cp = client.store.load(task_id)
    wait = next(w for w in cp.execution.pending_waits if w.wait_for == "approval")
    judged = datetime.now(UTC) - timedelta(days=2)
    approval = sign_event(
        client.signer("alice"),
        events.APPROVE,
        {"version": cp.business.version},
        task_id=task_id,
        correlation_id=wait.correlation_id,
        issued_at=judged - timedelta(seconds=1),
    )
    wake = inbound_wake(approval, task_id)
    wake = wake.model_copy(update={"payload": wake.payload | {"judged_at": judged.isoformat()}})
    producer = Producer(kafka_as(client.settings.kafka_bootstrap, "inbound"))
    produce(producer, role_message(client.settings, "inbound", topics.WAKE, task_id, wake.encode()))
    assert producer.flush(30) == 0
    receipt = client.receipt(approval.event_id, task_id, SETTLE_S, key_id=approval.key_id)
    assert receipt["status"] == "accepted", receipt
    assert client.wait_settled(task_id, SETTLE_S)["stage"] == CLOSED
