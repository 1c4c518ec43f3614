"""A wake costs the gate two Redis round trips: one takes the task's lease, WATCHes and reads the
task, and reads the live authority under it; the other writes the change (or, for a wake that
changes nothing, the receipt) with the waits and gives the lease back. Driven through the gate's
own handle() against the stack `wakeful dev up` starts, counted where every role counts them."""

from __future__ import annotations

import uuid
from typing import Any

from helpers import gate_for, inbound_wake, role_message

from wakeful.cli.client import REQUESTER, Client
from wakeful.core import topics
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.state import keys
from wakeful.state.acl import CountingConnection

OVER_LIMIT = 2500  # above the approval limit: the task waits for an approver


def handled(
    client: Client, gate: Any, principal: str, kind: str, payload: dict[str, Any], *, task_id: str
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


def warmed(client: Client) -> Any:
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


def test_a_wake_that_changes_its_task_costs_the_gate_two_round_trips(client: Client) -> None:
    gate, task_id = warmed(client), f"t-{uuid.uuid4().hex[:12]}"
    created = handled(
        client, gate, REQUESTER, events.CREATE, {"amount": OVER_LIMIT, "currency": "EUR"}, task_id=task_id
    )
    waiting = client.store.load(task_id)
    assert waiting.stage == "awaiting_approval" and waiting.execution.pending_waits
    # The wait's deadline went ahead of the transaction; the lease went back inside it.
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
    client: Client,
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
