"""The kill path reaches the model (D117), on worker processes of loop_app whose proposer asks a
scripted chat-completions server that records every request. A tool switched off is not among the
tools any request offers (and a proposal of it is still refused by the executor); a stage whose
every tool is off asks the model nothing and parks its task until a person reopens it. Under
`freeze --all`, a request that was already waiting for the proposer reaches no model and moves no
token counter, nothing is dead-lettered, and after the thaw its task finishes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from cli_run import doc, wakeful
from helpers import topic_marks, wait_letter
from model_server import Scripted, call, scripted_fleet, task_of

from wakeful.core import topics
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.core.process import wait_until
from wakeful.devstack.model_server import Reply, Request
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.state import keys

APP, NAME = "loop_app:app", "loopy"
DESK = "support-desk"
LOOP_TOOLS = ("find_order", "track_parcel", "refund_order", "send_notice")  # what `working` offers
FIRST_RECEIPT_S = 120.0  # the first event also waits for the fresh roles to join their groups
SETTLE_S = 60.0
REJOIN_S = 120.0  # a proposer started again joins its group before it reads
OPS = ("--by", "ops-lead")
pytestmark = pytest.mark.timeout(400)


def next_step(request: Request) -> Reply:
    """The model: the support loop's next call it has not made yet, among the tools it is offered."""
    task_id = task_of(request)
    made = {c["function"]["name"] for m in request.body["messages"] for c in m.get("tool_calls") or ()}
    steps = [
        ("find_order", {"task_id": task_id, "order_id": "o-1"}),
        ("track_parcel", {"task_id": task_id, "parcel": "p-9"}),
        ("refund_order", {"task_id": task_id, "order_id": "o-1", "amount": 40}),
        ("send_notice", {"task_id": task_id, "text": "your parcel was lost: refunded 40"}),
    ]
    left = [step for step in steps if step[0] in offered(request.body) and step[0] not in made]
    return call(*(left or steps)[0])


@pytest.fixture(scope="module")
def looping(client: Client) -> Iterator[Scripted]:
    client.add_signer(DESK, (events.CREATE,))
    with scripted_fleet(next_step, APP) as scripted:
        yield scripted


def ask(client: Client) -> tuple[str, dict[str, Any]]:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    event = client.send(DESK, events.CREATE, {"workflow": "support", "order_id": "o-1"}, task_id=task_id)
    receipt = client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)
    assert receipt["status"] == "accepted", receipt
    return task_id, receipt


def offered(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or ()]


def switched(client: Client, *tools: str, on: bool = False) -> None:
    for tool in tools:
        flip = client.tools.enable if on else client.tools.disable
        flip(NAME, tool, by="ops-lead", reason="test over" if on else f"{tool} misbehaves", known=LOOP_TOOLS)


def test_a_tool_switched_off_is_never_offered_to_the_model_and_its_task_goes_on_without_it(
    client: Client, looping: Scripted
) -> None:
    switched(client, "track_parcel")
    try:
        task_id, _ = ask(client)
        done = client.wait_settled(task_id, SETTLE_S)
    finally:
        switched(client, "track_parcel", on=True)
    asked = looping.asked(task_id)
    assert [offered(body) for body in asked] == [["find_order", "refund_order", "send_notice"]] * 3, asked
    assert done["stage"] == "closed", done
    assert sorted(a["tool"] for a in done["actions"].values()) == [
        "find_order",
        "refund_order",
        "send_notice",
    ]


def test_a_stage_whose_every_tool_is_off_asks_the_model_nothing_and_parks_its_task_until_reopened(
    client: Client, looping: Scripted
) -> None:
    switched(client, *LOOP_TOOLS)
    try:
        task_id, created = ask(client)
        parked = client.wait_settled(task_id, SETTLE_S)
    finally:
        switched(client, *LOOP_TOOLS, on=True)
    assert created["stage"] == "needs_review" and parked["stage"] == "needs_review", (created, parked)
    said = parked["last_refusal"]
    assert said.startswith("every tool of stage working is disabled, so no model was asked"), said
    assert all(f"tool {tool} of app loopy is disabled" in said for tool in LOOP_TOOLS), said
    assert looping.asked(task_id) == [] and parked["actions"] == {}

    assert client.reopen(task_id)["status"] == "accepted"  # the tools are back: a person lets it go on
    done = client.wait_stage(task_id, {"closed"}, SETTLE_S)
    assert done["stage"] == "closed" and len(looping.asked(task_id)) == 4, done


def counted(client: Client, key: str) -> bytes | None:
    """A token counter's top id (state/budget.py), or None when nothing was ever counted there."""
    if not client.admin.exists(key):
        return None
    found: bytes = client.admin.xinfo_stream(key)["last-generated-id"]
    return found


def test_a_frozen_fleet_asks_the_model_nothing_spends_no_tokens_and_its_task_finishes_after_the_thaw(
    client: Client, looping: Scripted
) -> None:
    tenant_counter = keys.tenant_spent(DEFAULT_TENANT)
    since = topic_marks(client.settings.kafka_bootstrap, topics.DLQ)
    looping.fleet.stop_role("proposer")  # the gate's request waits on wakeful.proposals.request
    try:
        task_id, created = ask(client)
        assert created["stage"] == "working", created
        frozen = wakeful("freeze", "--all", *OPS, "--reason", "model bill spike", "--json")
        assert frozen.returncode == 0 and doc(frozen)["not_yet"] == [], frozen.stdout + frozen.stderr
        spent_before = counted(client, tenant_counter)
    finally:
        looping.fleet.start_role("proposer")
    try:
        # The proposer reads the request, withholds the model call and marks the task for the thaw.
        assert wait_until(lambda: bool(client.admin.sismember(keys.HELD_TASKS, task_id)), REJOIN_S)
        assert looping.asked(task_id) == []
        assert counted(client, keys.spent(task_id)) is None
        assert counted(client, tenant_counter) == spent_before
        assert client.show(task_id)["stage"] == "working"
    finally:
        thawed = wakeful("thaw", "--all", *OPS, "--reason", "bill understood", "--json")
    assert thawed.returncode == 0 and doc(thawed)["woken"] >= 1, thawed.stdout + thawed.stderr
    done = client.wait_stage(task_id, {"closed"}, SETTLE_S)
    assert done["stage"] == "closed", done
    assert len(looping.asked(task_id)) == 4  # asked once per step, all after the thaw
    assert counted(client, keys.spent(task_id)) is not None  # these counters do count: the held call was none
    mine = wait_letter(client.settings.kafka_bootstrap, since, lambda d: d.get("task_id") == task_id, 5)
    assert mine is None, mine
