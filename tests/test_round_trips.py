"""Redis round trips on the hot path, counted where every role counts them, through the roles' own
handle() against the stack `wakeful dev up` starts.

A wake costs the gate two: one WATCHes and reads the task (its lease free) and reads the live
authority; the other writes the change (or, for a wake that changes nothing, the receipt) with the
waits. A proposal costs the executor three besides the
tool's own: its load is WATCHed for the close, whose inbox check rides with the intent, and the
outcome is recorded inside the close.
A batch of events costs inbound one to judge them all and one to mark them seen."""

from __future__ import annotations

import uuid
from typing import Any

import redis
from confluent_kafka import Message
from helpers import BankClient, executor_for, gate_for, inbound_wake, refund_proposal, role_message

from wakeful.consumers.inbound.main import Inbound
from wakeful.consumers.kafka.producing import make_producer
from wakeful.core import topics
from wakeful.core.log import Log
from wakeful.operate.client import REQUESTER
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.state import acl, keys
from wakeful.state.acl import CountingConnection

OVER_LIMIT = 2500  # above the approval limit: the task waits for an approver
UNDER_LIMIT = 300  # under it: the task is ready for a proposal at once


def handled(
    client: BankClient, gate: Any, principal: str, kind: str, payload: dict[str, Any], *, task_id: str
) -> int:
    """Round trips the gate made to take one signed event's wake, as inbound would publish it."""
    event = sign_event(client.signer(principal), kind, payload, task_id=task_id)
    wake = inbound_wake(event, task_id, principal=principal)
    msg = role_message(client.settings, "inbound", topics.WAKE, task_id, wake.encode())
    before = CountingConnection.round_trips
    gate.handle(msg)
    trips = CountingConnection.round_trips - before
    receipt = client.receipt(event.event_id, task_id, 5.0, key_id=event.key_id)
    assert receipt["status"] in ("accepted", "rejected"), receipt
    return trips


def warmed(client: BankClient) -> Any:
    """A gate whose connections are open: a connection's handshake is not the wake's cost."""
    gate = gate_for(client.settings)
    handled(
        client,
        gate,
        REQUESTER,
        events.CREATE,
        {"amount": 1, "currency": "EUR"},
        task_id=f"t-{uuid.uuid4().hex[:12]}",
    )
    return gate


def test_a_wake_that_changes_its_task_costs_the_gate_two_round_trips(client: BankClient) -> None:
    gate, task_id = warmed(client), f"t-{uuid.uuid4().hex[:12]}"
    created = handled(
        client, gate, REQUESTER, events.CREATE, {"amount": OVER_LIMIT, "currency": "EUR"}, task_id=task_id
    )
    waiting = client.store.load(task_id)
    assert waiting.stage == "awaiting_approval" and waiting.execution.pending_waits
    # The wait's deadline went ahead of the transaction; the gate took no lease (D49).
    mine = f"{task_id}|".encode()
    due = [
        m for m in client.admin.zrange(keys.DEADLINES, 0, -1) if isinstance(m, bytes) and m.startswith(mine)
    ]
    assert due and not client.admin.exists(keys.lease(task_id))
    approved = handled(client, gate, "alice", events.APPROVE, {"version": 1}, task_id=task_id)
    assert client.store.load(task_id).stage == "ready"
    assert not client.admin.exists(keys.lease(task_id))
    assert (created, approved) == (2, 2)


def test_a_wake_that_changes_nothing_costs_two_round_trips_and_leaves_no_lease_or_watch(
    client: BankClient,
) -> None:
    gate, task_id = warmed(client), f"t-{uuid.uuid4().hex[:12]}"
    handled(
        client, gate, REQUESTER, events.CREATE, {"amount": OVER_LIMIT, "currency": "EUR"}, task_id=task_id
    )
    version = client.store.load(task_id).state_version
    refused = handled(
        client, gate, "alice", events.APPROVE, {"version": 7}, task_id=task_id
    )  # not its version
    assert refused == 2
    assert client.store.load(task_id).state_version == version
    assert not client.admin.exists(keys.lease(task_id))
    # The connection went back to the pool with no WATCH left on it: the next change on it lands.
    assert handled(client, gate, "alice", events.APPROVE, {"version": 1}, task_id=task_id) == 2
    assert client.store.load(task_id).stage == "ready"


def proposed(client: BankClient, gate: Any, executor: Any) -> int:
    """Round trips the executor made to carry out a refund proposal for a new task, bank included."""
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    handled(
        client, gate, REQUESTER, events.CREATE, {"amount": UNDER_LIMIT, "currency": "EUR"}, task_id=task_id
    )
    version = client.store.load(task_id).state_version
    proposal = refund_proposal(task_id, version, UNDER_LIMIT)
    msg = role_message(client.settings, "proposer", topics.PROPOSALS, task_id, proposal.encode())
    before = CountingConnection.round_trips
    executor.handle(msg)
    trips = CountingConnection.round_trips - before
    assert client.store.load(task_id).stage == "closed" and len(client.bank.entries(task_id)) == 1
    assert not client.admin.exists(keys.lease(task_id))
    return trips


def test_a_proposal_costs_the_executor_three_round_trips_and_the_bank_its_own_with_its_login_inside(
    client: BankClient,
) -> None:
    gate, executor = warmed(client), executor_for(client.settings, [])
    proposed(client, gate, executor)  # its connections opened
    # The lease, the task WATCHed and read, the action log and authority; the intent with the
    # close's inbox check; the bank's refund, with the step's login as its minted bank user (AUTH,
    # D120) in the same write; its logout (RESET, sent: its reply is read when the connection is
    # next taken); the close, with the outcome recorded and the lease given back inside it.
    assert proposed(client, gate, executor) == 5


def inbound_for(client: BankClient, connection: Any = None) -> Any:
    producer, _ = make_producer(client.settings, "inbound")
    return Inbound(
        connection or acl.connect(client.settings, "inbound"),
        producer,
        Log(role="inbound"),
        300,
        kinds=client.app.kinds,
    )


def signed_events(client: BankClient, n: int) -> list[Any]:
    requester = client.signer(REQUESTER)
    return [
        sign_event(requester, events.CREATE, {"amount": UNDER_LIMIT}, task_id=f"t-{uuid.uuid4().hex[:12]}")
        for _ in range(n)
    ]


def as_messages(signed: list[Any]) -> list[Any]:
    return [
        Message(topic=topics.EVENTS, partition=0, offset=i, key=e.task_id.encode(), value=e.encode())
        for i, e in enumerate(signed)
    ]


def test_a_batch_of_events_costs_inbound_one_round_trip_to_judge_and_one_to_mark_seen(
    client: BankClient,
) -> None:
    inbound = inbound_for(client)
    warm = as_messages(signed_events(client, 1))
    inbound.before_batch(warm)
    inbound.handle(warm[0])
    inbound.after_batch()
    signed = signed_events(client, 8)
    msgs = as_messages(signed)
    before = CountingConnection.round_trips
    inbound.before_batch(msgs)
    for m in msgs:
        inbound.handle(m)
    inbound.after_batch()
    assert CountingConnection.round_trips - before == 2  # was one per event, and one more
    assert client.admin.exists(*(keys.seen(e.key_id, e.event_id) for e in signed)) == 8  # all woken
    assert inbound.producer.flush(30) == 0


class FailingPipelines:
    """A client whose first pipeline fails when it runs, as a Redis that drops the connection would."""

    def __init__(self, real: Any) -> None:
        self.real, self.failed = real, False

    def pipeline(self, transaction: bool = True) -> Any:
        pipe = self.real.pipeline(transaction=transaction)
        if not self.failed:
            self.failed = True

            def fail(*_: Any, **__: Any) -> Any:
                raise redis.ConnectionError("dropped")

            pipe.execute = fail
        return pipe

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_an_event_whose_batch_read_failed_reads_for_itself_and_is_judged_all_the_same(
    client: BankClient,
) -> None:
    inbound = inbound_for(client, FailingPipelines(acl.connect(client.settings, "inbound")))
    signed = signed_events(client, 3)
    msgs = as_messages(signed)
    inbound.before_batch(msgs)  # fails: nothing read ahead, and nothing lost
    for m in msgs:
        inbound.handle(m)
    inbound.after_batch()
    assert client.admin.exists(*(keys.seen(e.key_id, e.event_id) for e in signed)) == 3
    assert inbound.producer.flush(30) == 0
