"""A tool whose answer comes later, on the real stack: worker processes run async_app, the model
(a scripted chat-completions server) asks the bank to pay an invoice, the bank books it once and
answers with a handle, and the task sleeps until the bank's settlement hook sends `tool.completed`.
A completion for a handle the task does not wait on is refused with a receipt, the right one moves
the task on (the next proposal is shown the settlement), and the same completion sent again is
refused: one payment. An executor killed around the call (SIGKILL) still books it once. A task whose
completion's deadline escalated and that a person reopened waits on the same call again, and the
original handle's completion then closes it, the payment booked once and the model not asked in
between."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from async_app import HOOK, QUEUED, QUEUED_WITHIN, handle_of
from helpers import killed_at
from loop_app import booked
from model_server import Scripted, call, scripted_fleet, task_of, tool_messages

from wakeful.consumers.proposer.messages import read_back
from wakeful.core.settings import Settings
from wakeful.devstack.model_server import Reply, Request
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.state import keys

DESK = "payables-desk"
OTHER_HOOK = "other-bank-hook"
FIRST_RECEIPT_S = 120.0  # the first event also waits for the fresh roles to join their groups
SETTLE_S = 60.0
LEASE_TTL_MS = 1500  # so a lease held by a killed executor lapses quickly

pytestmark = pytest.mark.timeout(300)


def next_step(request: Request) -> Reply:
    """The model: pay the invoice its task card shows, then, once its settlement is shown, tell
    the supplier."""
    task_id, invoice = task_of(request), read_back(request.body)["task_card"]["invoice"]
    if not tool_messages(request.body):
        return call("pay_invoice", {"task_id": task_id, "invoice": invoice, "amount": 120})
    return call("send_notice", {"task_id": task_id, "text": f"your invoice {invoice} is paid"})


@pytest.fixture(scope="module")
def settling(client: Client) -> Iterator[Scripted]:
    client.add_signer(DESK, (events.CREATE,))
    client.add_signer(HOOK, (events.COMPLETE,))
    client.add_signer(OTHER_HOOK, (events.COMPLETE,))
    with scripted_fleet(next_step, "async_app:app", WAKEFUL_LEASE_TTL_MS=str(LEASE_TTL_MS)) as scripted:
        yield scripted


def order(client: Client, invoice: str = "inv-7") -> str:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    payload = {"invoice": invoice, "amount": 120}
    event = client.send(DESK, events.CREATE, payload, task_id=task_id)
    receipt = client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)
    assert receipt["status"] == "accepted", receipt
    return task_id


def asleep(client: Client, task_id: str) -> dict[str, Any]:
    """The task once it waits for the payment's completion."""
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        shown = client.show(task_id)
        if any(w["wait_for"] == events.COMPLETE for w in shown["pending_waits"]):
            return shown
        time.sleep(0.05)
    raise AssertionError(f"task {task_id} never waited for a completion: {client.show(task_id)}")


def complete(client: Client, task_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    return client.event(task_id, events.COMPLETE, payload, HOOK)


def test_a_completion_applies_once_and_one_for_another_handle_is_refused_with_a_receipt(
    client: Client, settings: Settings, settling: Scripted
) -> None:
    task_id = order(client)
    op_key = f"pay_invoice:{task_id}:v1"
    shown = asleep(client, task_id)
    assert shown["stage"] == "paying" and len(booked(settings, op_key)) == 1
    # the wait the executor's close made is indexed as the gate's are: the timer's and the door's
    [wait] = shown["pending_waits"]
    due_ms = int(datetime.fromisoformat(wait["deadline"]).timestamp() * 1000)
    assert client.admin.zscore(keys.DEADLINES, f"{task_id}|{due_ms}") == due_ms
    assert client.admin.get(keys.corr(wait["correlation_id"])) == keys.corr_value("default", task_id).encode()

    unknown = complete(client, task_id, {"handle": "pay-0000", "result": {"settlement": "set-x"}})
    assert unknown["status"] == "rejected" and "waits under handle 'pay-0000'" in unknown["reason"], unknown
    settled = {"handle": handle_of(op_key), "result": {"settlement": "set-1"}}
    # a signer the door lets send completions, but not the one this tool names
    forged = client.event(task_id, events.COMPLETE, settled, OTHER_HOOK)
    assert forged["status"] == "rejected" and "may not complete" in forged["reason"], forged
    first = complete(client, task_id, settled)
    assert first["status"] == "accepted", first
    again = complete(client, task_id, settled)  # the hook fires twice: a new event, the same news
    # Refused either way: the wait it answered is gone, or (the notice sent by now) the task closed.
    told = ("no tool call of it waits", "it accepts no more events")
    assert again["status"] == "rejected" and any(why in again["reason"] for why in told), again

    closed = client.wait_settled(task_id, SETTLE_S)
    assert closed["stage"] == "closed", closed
    assert closed["external_refs"] == {"settlement": "set-1"}
    assert len(booked(settings, op_key)) == 1
    assert len(booked(settings, f"send_notice:{task_id}:v1:s1")) == 1
    asked = settling.asked(task_id)
    assert len(asked) == 2, [tool_messages(b) for b in asked]
    [settlement] = tool_messages(asked[1])
    assert '"settlement": "set-1"' in settlement and 'tool="pay_invoice"' in settlement


@pytest.mark.parametrize(
    "point", ["executor.after_intent", "executor.after_downstream_call", "executor.after_advance"]
)
def test_an_asynchronous_call_is_made_once_across_an_executor_killed_at(
    point: str, client: Client, settings: Settings, settling: Scripted
) -> None:
    task_id = killed_at(settling.fleet, "executor", f"{point}@1", lambda: order(client), SETTLE_S)
    op_key = f"pay_invoice:{task_id}:v1"
    asleep(client, task_id)
    assert (
        complete(client, task_id, {"handle": handle_of(op_key), "result": {"settlement": "s"}})["status"]
        == "accepted"
    )
    assert client.wait_settled(task_id, SETTLE_S)["stage"] == "closed"
    assert len(booked(settings, op_key)) == 1


def test_a_reopen_after_the_completions_deadline_waits_on_the_same_call_and_its_completion_closes_the_task(
    client: Client, settings: Settings, settling: Scripted
) -> None:
    task_id = order(client, f"{QUEUED}inv-8")  # the bank promises it within QUEUED_WITHIN
    op_key = f"pay_invoice:{task_id}:v1"
    [first] = asleep(client, task_id)["pending_waits"]
    parked = client.wait_stage(task_id, {"needs_review"}, QUEUED_WITHIN.total_seconds() + SETTLE_S)
    assert parked["stage"] == "needs_review" and parked["pending_waits"] == [], parked
    assert f"completion of pay_invoice (handle {handle_of(op_key)}) deadline" in parked["last_refusal"]
    assert complete(client, task_id, {"handle": handle_of(op_key), "result": {}})["status"] == "rejected"

    reopened = client.reopen(task_id)
    assert reopened["status"] == "accepted" and reopened["stage"] == "paying", reopened
    [wait] = asleep(client, task_id)["pending_waits"]  # the same call's: no new proposal, no new call
    assert wait["correlation_id"] == first["correlation_id"] and wait["deadline"] > first["deadline"]
    settled = complete(client, task_id, {"handle": handle_of(op_key), "result": {"settlement": "set-8"}})
    assert settled["status"] == "accepted", settled

    closed = client.wait_settled(task_id, SETTLE_S)
    assert closed["stage"] == "closed" and closed["external_refs"] == {"settlement": "set-8"}, closed
    assert len(booked(settings, op_key)) == 1
    assert len(booked(settings, f"send_notice:{task_id}:v1:s1")) == 1
    paid = [entry for op, entry in closed["actions"].items() if op.startswith("pay_invoice:")]
    assert [(e["op_key"], e["status"]) for e in paid] == [(op_key, "succeeded")]
    asked = settling.asked(task_id)  # once to pay, once shown the settlement: none after the reopen
    assert len(asked) == 2, [tool_messages(b) for b in asked]
    [settlement] = tool_messages(asked[1])
    assert '"settlement": "set-8"' in settlement
