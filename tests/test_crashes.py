"""Crash it on purpose: real worker processes killed with SIGKILL at every named step boundary,
then restarted. After each crash: every approved task has exactly one ledger entry and is closed,
no lease is left stuck, no event is lost."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import start_fleet

from wakeful.cli.client import REQUESTER, Client
from wakeful.core import faults
from wakeful.devstack.fleet import Fleet
from wakeful.examples.refund import Stage
from wakeful.schemas import events
from wakeful.state import keys

LEASE_TTL_MS = 1500  # so a lease held by a killed worker lapses quickly


@pytest.fixture(scope="module")
def fleet(client: Client) -> Iterator[Fleet]:
    fleet = start_fleet(client, lease_ttl_ms=LEASE_TTL_MS)
    yield fleet
    fleet.stop()


def send_tasks(client: Client, with_deadline: bool) -> tuple[list[str], list[str], list[events.SignedEvent]]:
    """Two tasks through an approval and one under the limit, sent without waiting for outcomes."""
    requester, alice = client.signer(REQUESTER), client.signer("alice")
    from wakeful.producers.signing import sign_event

    approved, plain, sent = [], [], []
    for i in range(3):
        task_id = f"c-{os.urandom(6).hex()}"
        amount = 2500 if i < 2 else 300
        sent.append(sign_event(requester, events.CREATE, {"amount": amount}, task_id=task_id))
        if amount > 1000:
            sent.append(sign_event(alice, events.APPROVE, {"version": 1}, task_id=task_id))
            approved.append(task_id)
        else:
            plain.append(task_id)
    if with_deadline:
        task_id = f"c-{os.urandom(6).hex()}"
        sent.append(sign_event(requester, events.CREATE, {"amount": 5000, "wait_s": 1}, task_id=task_id))
    client.publisher.publish_many(sent)
    return approved, plain, sent


def wait_until(check: Any, timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return False


@pytest.mark.parametrize("point", sorted(faults.POINTS))
def test_every_approved_task_is_refunded_exactly_once_after_a_sigkill_at(
    point: str, client: Client, fleet: Fleet
) -> None:
    role = faults.role_of(point)
    proc = fleet.restart(role, fault=point)
    approved, plain, sent = send_tasks(client, with_deadline=role == "timer")
    assert wait_until(lambda: proc.poll() is not None, 60), f"{point} was never reached"
    assert proc.returncode == -signal.SIGKILL
    fleet.start_role(role)

    for task_id in approved + plain:
        shown = client.wait_stage(task_id, {Stage.CLOSED}, timeout=90)
        assert shown["stage"] == "closed", (point, shown)
        assert len(shown["ledger"]) == 1, (point, shown["ledger"])
        assert shown["ledger"][0]["op_key"] == f"REFUND:{task_id}:v1"
    deadline_tasks = [e.task_id or "" for e in sent if e.payload.get("wait_s")]
    for waiting in deadline_tasks:
        shown = client.wait_stage(waiting, {Stage.NEEDS_REVIEW}, timeout=60)
        assert "escalated" in (shown["last_refusal"] or ""), shown
    # no event lost: every one has an outcome, and every accepted one is in its task's inbox
    for event in sent:
        receipt = client.receipt(event.event_id, event.task_id, timeout=30, key_id=event.key_id)
        assert receipt["status"] == "accepted", (point, receipt)
        applied = keys.event_identity(event.key_id, event.event_id)
        assert client.admin.sismember(keys.inbox(receipt["task_id"]), applied)
    # no lease stuck: a lease held by the killed process lapses, every other one was released
    task_ids = approved + plain + deadline_tasks
    assert wait_until(
        lambda: not any(client.admin.exists(keys.lease(t)) for t in task_ids), LEASE_TTL_MS / 1000 + 5
    )
