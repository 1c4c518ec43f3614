"""A step's outcome is recorded inside the close that advances its task (D48), through the
executor's own handle() against the stack `wakeful dev up` starts: the task is never past a step
its action log does not show as done, an outcome recorded apart by code before D48 still closes its
task without a second call, and an outcome the log refuses parks the task."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from helpers import BankClient, executor_for, refund_proposal, role_message
from test_round_trips import UNDER_LIMIT, handled, warmed

from wakeful.consumers.kafka import wiring
from wakeful.core import topics
from wakeful.examples.refund import app as refund_app
from wakeful.operate.client import REQUESTER
from wakeful.schemas import events
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.state import keys


def ready_task(client: BankClient, gate: Any) -> tuple[str, int, str]:
    """A new task ready for its refund: (task id, state_version, the refund's op key)."""
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    payload = {"amount": UNDER_LIMIT, "currency": "EUR"}
    handled(client, gate, REQUESTER, events.CREATE, payload, task_id=task_id)
    cp = client.store.load(task_id)
    tool = refund_app.tools_at(cp.stage)[0]
    return task_id, cp.state_version, tool.key_for(task_id, cp.business.version)


def propose(client: BankClient, executor: Any, task_id: str, version: int) -> None:
    proposal = refund_proposal(task_id, version, UNDER_LIMIT)
    executor.handle(role_message(client.settings, "proposer", topics.PROPOSALS, task_id, proposal.encode()))


def test_the_close_records_the_steps_outcome_in_its_own_transaction(client: BankClient) -> None:
    gate, executor = warmed(client), executor_for(client.settings, [])
    task_id, version, op = ready_task(client, gate)
    propose(client, executor, task_id, version)
    entry = wiring.actions_for(client.settings, "executor").lookup(task_id, op)
    assert entry is not None and entry.status is ActionStatus.SUCCEEDED
    assert entry.result and len(client.bank.entries(task_id)) == 1
    assert client.store.load(task_id).stage == "closed"


def test_an_outcome_recorded_apart_before_d48_closes_the_task_without_a_second_call(
    client: BankClient,
) -> None:
    gate, executor = warmed(client), executor_for(client.settings, [])
    task_id, version, op = ready_task(client, gate)
    # What code before D48 left when it died between recording the outcome and the close.
    leases, actions = (
        wiring.leases_for(client.settings, "executor"),
        wiring.actions_for(client.settings, "executor"),
    )
    lease = leases.acquire(task_id)
    begun = actions.begin(task_id, op, lease.fence, lease.token, tool="refund", args={})
    actions.complete(task_id, op, lease.fence, {"ledger_entry": "recorded-before"}, begun.entry)
    leases.release(lease)
    propose(client, executor, task_id, version)
    closed = client.store.load(task_id)
    assert closed.stage == "closed" and closed.external_refs["ledger_entry"] == "recorded-before"
    assert client.bank.entries(task_id) == [], "the bank was called for a step already done"


def test_an_outcome_the_action_log_refuses_inside_the_close_parks_the_task(
    client: BankClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, letters = warmed(client), list[str]()
    executor = executor_for(client.settings, letters)
    task_id, version, op = ready_task(client, gate)
    tool = refund_app.tool("refund")
    assert tool is not None
    called = tool.call

    def overtaken(op_key: str, args: Any, fence: int) -> Any:
        made = called(op_key, args, fence)
        # An intent written behind the executor's back while it called, by a newer fence than any
        # lease has held. (Written before the call, it would have kept the minter from making the
        # step its bank user, D120: the call would not have been made.)
        newer = ActionLogEntry(
            op_key=op, task_id=task_id, status=ActionStatus.IN_FLIGHT, fence=10_000,
            started_at=datetime.now(UTC), tool="refund", args={},
        )  # fmt: skip
        client.admin.hset(keys.ops(task_id), op, newer.encode())
        return made

    monkeypatch.setattr(tool, "call", overtaken)
    propose(client, executor, task_id, version)
    assert len(client.bank.entries(task_id)) == 1  # the refund happened, once
    marker = client.admin.get(keys.quarantine(task_id))
    assert marker is not None and b"outcome_not_recorded" in marker, marker
