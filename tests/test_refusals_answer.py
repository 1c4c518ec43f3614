"""Every refusal answers, and nothing refused writes: a verified sender gets a rejected receipt at
once, whatever the event made a role do, instead of waiting for one that never comes.
End to end against the stack `wakeful dev up` starts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Message, Producer
from helpers import gate_for, inbound_wake, raw_kafka, role_message

from wakeful.consumers.inbound.main import Inbound
from wakeful.core import topics
from wakeful.core.log import Log
from wakeful.devstack.fleet import Fleet
from wakeful.examples.refund import app as refund_app
from wakeful.operate.client import REQUESTER, Client
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.schemas.events import Envelope
from wakeful.state import acl, keys

ANSWER_S = 20.0  # far below the 30 s a sender waited before


@pytest.mark.parametrize("amount", [2**64, 10**30, 10**4000])
def test_a_create_with_an_amount_past_64_bits_is_answered_and_makes_no_task(
    client: Client, shared_fleet: Fleet, amount: int
) -> None:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    event = client.send(REQUESTER, events.CREATE, {"amount": amount, "currency": "EUR"}, task_id=task_id)
    receipt = client.receipt(event.event_id, task_id, ANSWER_S, key_id=event.key_id)
    assert receipt["status"] == "rejected"
    assert receipt["reason"].startswith("amount must be a whole number from 1 to")
    assert len(receipt["reason"]) < 200
    assert not client.admin.exists(keys.state(task_id))


def test_an_amend_or_approval_carrying_a_huge_number_is_answered_and_changes_nothing(
    client: Client, shared_fleet: Fleet
) -> None:
    task_id, _ = client.new_task(2500)
    before = client.show(task_id)
    amend = client.send(REQUESTER, events.AMEND, {"amount": 10**30}, task_id=task_id)
    approve = client.send("alice", events.APPROVE, {"version": 10**30}, task_id=task_id)
    for event in (amend, approve):
        receipt = client.receipt(event.event_id, task_id, ANSWER_S, key_id=event.key_id)
        assert receipt["status"] == "rejected", receipt
    after = client.show(task_id)
    assert after["state_version"] == before["state_version"] and after["ledger"] == []
    assert (after["stage"], after["amount"]) == ("awaiting_approval", 2500)


def test_the_sender_of_an_event_the_gate_failed_on_gets_a_rejected_receipt(client: Client) -> None:
    task_id, _ = client.new_task(2500)
    event = sign_event(client.signer("alice"), events.APPROVE, {"version": 1}, task_id=task_id)
    wake = inbound_wake(event, task_id)
    settings = client.settings
    gate = gate_for(settings)
    msg = role_message(settings, "inbound", topics.WAKE, task_id, wake.encode())
    gate.poisoned(msg, "gate failed on this message: ValueError('out of range')")
    receipt = client.receipt(event.event_id, task_id, 1.0, key_id=event.key_id)
    assert receipt["status"] == "rejected"
    assert (
        receipt["reason"]
        == "the gate could not apply this event: gate failed on this message: ValueError('out of range')"
    )


def test_a_forged_wake_the_gate_failed_on_fills_no_receipt(client: Client) -> None:
    task_id, _ = client.new_task(2500)
    event = sign_event(client.signer("alice"), events.APPROVE, {"version": 1}, task_id=task_id)
    wake = Envelope(
        message_id=event.event_id,
        task_id=task_id,
        task_version=0,
        kind="wake",
        created_at=datetime.now(UTC),
        trace_id=event.event_id,
        payload={"reason": "event", "event": event.encode().decode()},
    )
    settings = client.settings
    gate = gate_for(settings)
    # Signed by the wrong role: it says nothing about alice's event, so her receipt stays hers to get.
    msg = role_message(settings, "gate", topics.WAKE, task_id, wake.encode())
    gate.poisoned(msg, "gate failed on this message: ValueError('x')")
    assert not client.admin.exists(keys.receipt(event.event_id, task_id, key_id=event.key_id))


def test_the_sender_of_an_event_inbound_failed_on_gets_a_rejected_receipt_and_a_forger_none(
    client: Client,
) -> None:
    settings = client.settings
    inbound = Inbound(
        acl.connect(settings, "inbound"),
        Producer(raw_kafka(settings)),
        Log(),
        settings.event_max_age,
        kinds=refund_app.kinds,
    )
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    genuine = sign_event(client.signer(REQUESTER), events.CREATE, {"amount": 5}, task_id=task_id)
    forged = genuine.model_copy(update={"event_id": f"ev-{uuid.uuid4().hex}"})  # its signature no longer fits
    for event in (genuine, forged):
        msg = Message(topic=topics.EVENTS, partition=0, offset=0, key=task_id.encode(), value=event.encode())
        inbound.poisoned(msg, "inbound failed on this message: ValueError('x')")
    receipt = client.receipt(genuine.event_id, task_id, 1.0, key_id=genuine.key_id)
    assert receipt["status"] == "rejected" and receipt["reason"].startswith(
        "inbound could not take this event"
    )
    assert not client.admin.exists(keys.receipt(forged.event_id, task_id, key_id=forged.key_id))


def test_a_refused_approval_delivered_again_later_is_not_decided_again(
    client: Client, shared_fleet: Fleet
) -> None:
    # Refused because it names version 2 while the task is at version 1; after an amendment makes
    # the task version 2, the same signed wake (redelivered, or replayed by whoever can write to
    # wakeful.wake) must not approve it: a refusal leaves nothing on the task but its receipt.
    task_id, _ = client.new_task(2500)
    event = sign_event(client.signer("alice"), events.APPROVE, {"version": 2}, task_id=task_id)
    wake = inbound_wake(event, task_id)
    settings = client.settings
    gate = gate_for(settings)
    msg = role_message(settings, "inbound", topics.WAKE, task_id, wake.encode())
    gate.handle(msg)
    first = client.receipt(event.event_id, task_id, 1.0, key_id=event.key_id)
    assert first["status"] == "rejected" and "approval is for version 2" in first["reason"]
    assert client.amend(task_id, 2600)["status"] == "accepted"
    before = client.show(task_id)
    assert (before["version"], before["stage"]) == (2, "awaiting_approval")
    gate.handle(msg)
    assert client.receipt(event.event_id, task_id, 1.0, key_id=event.key_id) == first
    after = client.show(task_id)
    assert (after["stage"], after["state_version"], after["ledger"]) == (
        "awaiting_approval",
        before["state_version"],
        [],
    )
