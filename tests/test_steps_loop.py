"""Steps within a stage on the real stack: worker processes run loop_app (a stage the model calls
tools at in a loop) with the proposer asking a scripted chat-completions server. The model looks the
order up, reads its parcel's tracking, refunds it, then tells the customer: four proposals, each
shown every earlier call with its result, each step on its own op key, one refund and one notice.
Then the executor is killed (SIGKILL) at each of its fault points in each of the four steps, and
restarted: every step still runs once, each effect once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from helpers import killed_at
from loop_app import booked
from model_server import Scripted, call, scripted_fleet, task_of, tool_messages

from wakeful.consumers.proposer.messages import read_back
from wakeful.core.settings import Settings
from wakeful.devstack.model_server import Reply, Request
from wakeful.operate.client import Client
from wakeful.schemas import events

APP = "loop_app:app"
LEASE_TTL_MS = 1500  # so a lease held by a killed executor lapses quickly
REACH_S = 60.0
# Where the executor may die within a step (core/faults.py); each is armed for each of the 4 steps.
EXECUTOR_POINTS = [
    "executor.after_consume",
    "executor.after_intent",
    "executor.after_downstream_call",
    "executor.after_advance",
    "executor.before_offsets",
]
DESK = "support-desk"
FIRST_RECEIPT_S = 120.0  # the first event also waits for the fresh roles to join their groups
SETTLE_S = 60.0


def next_step(request: Request) -> Reply:
    """The model: the next call, by how many it has already made at the stage (the results shown).
    A payout: post 60 to the ledger, then pay 50, which its approval's plan refuses (100 approved),
    then, told why, pay 40."""
    task_id, made = task_of(request), len(tool_messages(request.body))
    if read_back(request.body)["task_card"].get("stage") == "paying":
        if made == 0:
            return call("post_ledger", {"task_id": task_id, "amount": 60})
        told = any("<<<REFUSED" in str(m.get("content") or "") for m in request.body["messages"])
        return call("pay_bank", {"task_id": task_id, "amount": 40 if told else 50})
    if made == 0:
        return call("find_order", {"task_id": task_id, "order_id": "o-1"})
    if made == 1:
        return call("track_parcel", {"task_id": task_id, "parcel": "p-9"})
    if made == 2:
        return call("refund_order", {"task_id": task_id, "order_id": "o-1", "amount": 40})
    return call("send_notice", {"task_id": task_id, "text": "your parcel was lost: refunded 40"})


@pytest.fixture(scope="module")
def looping(client: Client) -> Iterator[Scripted]:
    client.add_signer(DESK, (events.CREATE,))
    with scripted_fleet(next_step, APP, WAKEFUL_LEASE_TTL_MS=str(LEASE_TTL_MS)) as scripted:
        yield scripted


def ask(client: Client) -> str:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    event = client.send(DESK, events.CREATE, {"workflow": "support", "order_id": "o-1"}, task_id=task_id)
    receipt = client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)
    assert receipt["status"] == "accepted", receipt
    return task_id


def refunded_once(client: Client, settings: Settings, task_id: str) -> None:
    """The task closed after its four steps, each recorded once on its own op key; one refund and
    one notice downstream."""
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed", shown
    keys = [
        f"find_order:{task_id}:v1",
        f"track_parcel:{task_id}:v1:s1",
        f"LOOPREFUND:{task_id}:v1:s2",
        f"send_notice:{task_id}:v1:s3",
    ]
    assert {op: a["status"] for op, a in shown["actions"].items()} == dict.fromkeys(keys, "succeeded")
    assert len(booked(settings, keys[2])) == 1 and len(booked(settings, keys[3])) == 1
    assert shown["external_refs"] == {"refund": keys[2], "notice": keys[3]}


def test_a_three_step_loop_shows_each_result_to_the_next_proposal_and_refunds_once(
    client: Client, settings: Settings, looping: Scripted
) -> None:
    task_id = ask(client)
    refunded_once(client, settings, task_id)

    asked = looping.asked(task_id)
    assert len(asked) == 4, [tool_messages(b) for b in asked]
    assert tool_messages(asked[0]) == []
    [looked_up] = tool_messages(asked[1])
    assert '"parcel": "p-9"' in looked_up and 'trust="untrusted"' in looked_up
    first, tracked = tool_messages(asked[2])
    assert '"parcel": "p-9"' in first and 'tool="find_order"' in first  # each request has its own tag
    assert "lost in transit" in tracked and 'tool="track_parcel" trust="untrusted"' in tracked
    calls = [m["tool_calls"][0]["function"]["name"] for m in asked[3]["messages"] if m["role"] == "assistant"]
    assert calls == ["find_order", "track_parcel", "refund_order"]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("step", [1, 2, 3, 4])
@pytest.mark.parametrize("point", EXECUTOR_POINTS)
def test_every_step_of_a_loop_runs_once_after_a_sigkill_at(
    client: Client, settings: Settings, looping: Scripted, point: str, step: int
) -> None:
    task_id = killed_at(looping.fleet, "executor", f"{point}@{step}", lambda: ask(client), REACH_S)
    refunded_once(client, settings, task_id)
    final = looping.asked(task_id)
    assert any(len(tool_messages(body)) == 3 for body in final)  # the notice was proposed seeing all


def test_two_money_steps_run_under_one_approval_and_the_one_beyond_it_is_refused_then_asked_again(
    client: Client, settings: Settings, looping: Scripted
) -> None:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    event = client.send(DESK, events.CREATE, {"workflow": "payout", "amount": 100}, task_id=task_id)
    created = client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)
    assert (created["status"], created["stage"]) == ("accepted", "awaiting_approval"), created
    assert client.approve(task_id, "alice", 1)["status"] == "accepted"
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed", shown

    keys = [f"post_ledger:{task_id}:v1", f"pay_bank:{task_id}:v1:s1"]
    assert {op: a["status"] for op, a in shown["actions"].items()} == dict.fromkeys(keys, "succeeded")
    assert [r["amount"] for r in booked(settings, keys[0])] == [60]
    assert [r["amount"] for r in booked(settings, keys[1])] == [40]  # the 50 never ran
    approval = shown["approval"]
    assert (approval["spent"], approval["used"], approval["consumed"]) == (
        100,
        ["post_ledger", "pay_bank"],
        True,
    )
    asked = looping.asked(task_id)
    told = [m["content"] for b in asked for m in b["messages"] if "<<<REFUSED" in str(m.get("content") or "")]
    assert told and "pay_bank of 50 would bring the approved plan to 110, beyond the 100 approved" in told[-1]
