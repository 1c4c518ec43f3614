"""The gate's changes take no lease (D49): they need the task's lease free, WATCHed from the first
read to EXEC, so a holder's work is never judged mid-way and a lease taken meanwhile aborts them;
they keep the last writer's fence, so fencing still orders the holders."""

from __future__ import annotations

import uuid

import pytest
import redis
from helpers import bump_attempts, gate_for, inbound_wake, new_checkpoint, role_message

from wakeful.core import topics
from wakeful.core.errors import LeaseBusy, LeaseLost
from wakeful.core.retry import Retry
from wakeful.operate.client import REQUESTER, Client
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.state import first_step, keys
from wakeful.state.lease import Leases
from wakeful.state.store import Store


def test_a_lease_free_change_is_refused_while_another_worker_holds_the_lease(
    gate_store: Store, leases: Leases, redis_client: redis.Redis
) -> None:
    cp = gate_store.create(new_checkpoint(), "create-held").checkpoint
    held = leases.acquire(cp.task_id)
    try:
        with pytest.raises(LeaseBusy):
            gate_store.transition(cp.task_id, 1, "m1", bump_attempts, lease=None)
        assert gate_store.load(cp.task_id).state_version == 1
        assert redis_client.get(keys.lease(cp.task_id)) == held.token.encode()
    finally:
        leases.release(held)


def test_a_lease_taken_after_the_first_read_aborts_the_lease_free_change(
    gate_store: Store, leases: Leases
) -> None:
    cp = gate_store.create(new_checkpoint(), "create-race").checkpoint
    with gate_store.pinned(cp.task_id) as pinned:
        first = pinned.batch(first_step.reads(cp.task_id, "m1"))
        assert first_step.watched(first)[2] is None  # free when read
        held = leases.acquire(cp.task_id)  # another worker, before the change's EXEC
        try:
            with pytest.raises(LeaseBusy):
                gate_store.transition(
                    cp.task_id, 1, "m1", bump_attempts, lease=None, pinned=pinned, first=first
                )
        finally:
            leases.release(held)
    assert gate_store.load(cp.task_id).state_version == 1


def test_a_lease_free_change_keeps_the_last_writers_fence(gate_store: Store, leases: Leases) -> None:
    cp = gate_store.create(new_checkpoint(), "create-fence").checkpoint
    older = leases.acquire(cp.task_id)
    leases.release(older)
    newer = leases.acquire(cp.task_id)
    gate_store.transition(cp.task_id, 1, "by-holder", bump_attempts, lease=newer)
    leases.release(newer)
    free = gate_store.transition(cp.task_id, 2, "lease-free", bump_attempts, lease=None)
    assert free.status == "applied" and free.checkpoint.execution.fence == newer.fence
    # A holder older than the last writer is still refused, however the task moved since.
    stale = leases.acquire(cp.task_id)
    stale_token = type(stale)(stale.task_id, stale.owner, older.fence, stale.ttl_ms)
    try:
        with pytest.raises(LeaseLost):
            gate_store.transition(cp.task_id, 3, "late", bump_attempts, lease=stale_token)
    finally:
        leases.release(stale)


def test_the_gate_judges_no_wake_while_the_executor_holds_the_tasks_lease(
    client: Client, leases: Leases
) -> None:
    settings, task_id = client.settings, f"t-{uuid.uuid4().hex[:12]}"
    gate = gate_for(settings)
    create = sign_event(
        client.signer(REQUESTER), events.CREATE, {"amount": 2500, "currency": "EUR"}, task_id=task_id
    )
    created = inbound_wake(create, task_id, REQUESTER).encode()
    gate.handle(role_message(settings, "inbound", topics.WAKE, task_id, created))
    assert not client.admin.exists(keys.lease(task_id))  # the gate wrote the task and no lease
    approve = sign_event(client.signer("alice"), events.APPROVE, {"version": 1}, task_id=task_id)
    msg = role_message(settings, "inbound", topics.WAKE, task_id, inbound_wake(approve, task_id).encode())
    receipt = keys.receipt(approve.event_id, task_id, key_id=approve.key_id)
    held = leases.acquire(task_id)
    try:
        with pytest.raises(Retry, match="lease is held"):
            gate.handle(msg)
        assert not client.admin.exists(receipt)
        assert client.store.load(task_id).state_version == 1
    finally:
        leases.release(held)
    gate.handle(msg)  # the redelivery, once the holder is done
    assert client.store.load(task_id).state_version == 2
    assert client.receipt(approve.event_id, task_id, 5.0, key_id=approve.key_id)["status"] == "accepted"
    gate.producer.flush(10)


def test_a_create_whose_read_a_lease_write_outdated_is_applied_not_refused(
    gate_store: Store, leases: Leases
) -> None:
    """The gate's create WATCHes a lease it does not hold: a lease taken and given back on the new
    id in between aborts its EXEC, which is a race to re-read, not a task that exists."""
    cp = new_checkpoint()
    with gate_store.pinned(cp.task_id) as pinned:
        first = pinned.batch(first_step.reads(cp.task_id, "create-raced"))
        leases.release(leases.acquire(cp.task_id))  # say, an executor for a proposal naming it
        created = gate_store.create(cp, "create-raced", pinned=pinned, first=first)
    assert created.status == "applied" and created.lost_races == 1
    assert gate_store.load(cp.task_id).state_version == 1


def test_a_quarantine_judged_on_a_read_a_holder_outdated_writes_nothing(
    gate_store: Store, leases: Leases, redis_client: redis.Redis
) -> None:
    """The gate parks a task it cannot run only if no holder took the lease since its read: a
    marker written mid-step would strand the holder's outcome (its close could not land)."""
    cp = gate_store.create(new_checkpoint(), "create-park").checkpoint
    marker = keys.quarantine(cp.task_id)
    with gate_store.pinned(cp.task_id) as pinned:
        pinned.batch(first_step.reads(cp.task_id, "park"))
        held = leases.acquire(cp.task_id)
        try:
            assert not gate_store.quarantine_watched(pinned, cp.task_id, "incompatible", "policy v9")
            assert not redis_client.exists(marker)
        finally:
            leases.release(held)
        pinned.batch(first_step.reads(cp.task_id, "park"))
        assert gate_store.quarantine_watched(pinned, cp.task_id, "incompatible", "policy v9")
    assert gate_store.quarantine_reason(cp.task_id)["reason"] == "incompatible"  # type: ignore[index]
