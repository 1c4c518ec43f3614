"""Nothing sticks silently, on the real stack with the OpenAI-compatible client and a scripted
chat-completions server: a reply with no tool call, then a proposal the workflow refuses, then the
right one, and the task books once, the model having been shown each earlier refusal's reason; a
model that keeps proposing the wrong booking parks the task in needs_review after the workflow's
limit, each refusal on the task's history (wakeful.log), and `task reopen` puts it back. An app's
own change request is refused once the booking has begun (ctx.started), and `task list --stuck`
names a task that nothing will move on. And a tool held to a number of calls a second (D109) is
called no faster, every task still booking once."""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import date, datetime, timedelta
from typing import Any

import orjson
import pytest
from cli_run import doc, wakeful, with_tests_on_path
from confluent_kafka import Consumer, TopicPartition
from helpers import kafka_as, new_checkpoint
from model_server import call, text
from retry_app import CHANGE
from retry_app import app as retry_app
from test_demo import LEASE_TTL_MS
from test_relay import log_end_offsets
from test_tutorial_stack import DESK, calendar, free_day

from wakeful.consumers.proposer import messages as model_messages
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.devstack.model_server import ChatServer, Reply, Request, scripted
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.schemas.logs import OutboxRecord, log_records
from wakeful.sdk import MAX_REPROPOSALS
from wakeful.state.store import Store

pytestmark = pytest.mark.timeout(600)
APP = "retry_app:app"
FIRST_RECEIPT_S = 120.0  # the first event also waits for the fresh roles to join their groups
SETTLE_S = 90.0
ROOM = "huddle"  # books without an approval
UNUSABLE = "the model answered without a tool call"
ON_RECORD = f"propose the booking on record: room {ROOM}"


class Model:
    """The scripted model: per task (read back from the task card), its n-th request gets the n-th
    reply of that task's plan (the last one repeats); a task without a plan gets the `rules` answer.
    Keeps every chat request it received, per task."""

    def __init__(self) -> None:
        self.plans: dict[str, list[str]] = {}
        self.seen: dict[str, list[dict[str, Any]]] = {}
        self.lock = threading.Lock()
        self.rules = scripted("rules")

    def __call__(self, request: Request) -> Reply:
        if request.path != "/v1/chat/completions":
            return self.rules(request)
        card = model_messages.read_back(request.body)["task_card"]
        task_id = str(card.get("task_id"))
        with self.lock:
            plan = self.plans.get(task_id)
            if plan is None:
                return self.rules(request)
            self.seen.setdefault(task_id, []).append(request.body)
            step = plan[min(len(self.seen[task_id]), len(plan)) - 1]
        if step == "talk":
            return text("I would book the room, but I will not call a tool.")
        room = ROOM if step == "right" else "garden"
        return call("book_room", {"task_id": task_id, "room": room, "day": card["day"]})

    def users(self, task_id: str) -> list[str]:
        """The user message of each request the model got for the task, in order."""
        with self.lock:
            return [
                m["content"] for b in self.seen.get(task_id, []) for m in b["messages"] if m["role"] == "user"
            ]


@pytest.fixture(scope="module")
def model() -> Iterator[tuple[Model, ChatServer]]:
    script = Model()
    with ChatServer(script) as server:
        yield script, server


@pytest.fixture(scope="module")
def workers(client: Client, model: tuple[Model, ChatServer]) -> Iterator[Fleet]:
    assert wakeful("authority", "init", "--app", APP).returncode == 0
    client.add_signer(DESK, (events.CREATE, events.RUN), keep=frozenset({CHANGE}))  # the app's own kind
    env = {
        **os.environ,
        "WAKEFUL_APP": APP,
        "WAKEFUL_MODEL": "openai",
        "WAKEFUL_MODEL_URL": model[1].url,
        "WAKEFUL_MODEL_NAME": "scripted",
        "WAKEFUL_LEASE_TTL_MS": LEASE_TTL_MS,  # a killed executor's lease lapses soon
    }
    fleet = Fleet(with_tests_on_path(env)).start()
    yield fleet
    fleet.stop()


def book(client: Client, model: Model, plan: list[str], day: date) -> str:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    model.plans[task_id] = plan
    payload = {"workflow": "room_booking", "room": ROOM, "day": day.isoformat(), "people": 3}
    event = client.send(DESK, events.CREATE, payload, task_id=task_id)
    receipt = client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)
    assert receipt["status"] == "accepted", receipt
    return receipt.get("task_id") or task_id


def history(bootstrap: str, start: list[TopicPartition], task_id: str, refusals: int) -> list[OutboxRecord]:
    """The task's records on wakeful.log from `start` on, once `refusals` of them record a refusal."""
    consumer = Consumer(kafka_as(bootstrap) | {"group.id": f"history-{uuid.uuid4().hex}"})
    consumer.assign(start)
    found: dict[str, OutboxRecord] = {}
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                records, _ = log_records(msg.value() or b"")
                found |= {r.record_id: r for r in records if r.task_id == task_id}
            if sum("refusals" in r.detail for r in found.values()) >= refusals:
                break
    finally:
        consumer.close()
    return sorted(found.values(), key=lambda r: r.state_version)


def test_an_unusable_reply_then_a_refused_proposal_are_asked_again_with_their_reasons_and_book_once(
    client: Client, settings: Settings, kafka_bootstrap: str, workers: Fleet, model: tuple[Model, ChatServer]
) -> None:
    script, start = model[0], log_end_offsets(kafka_bootstrap)
    day = free_day(settings, ROOM)
    task_id = book(client, script, ["talk", "wrong", "right"], day)
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed", shown
    op_key = f"BOOK:{task_id}:v1"
    assert [r["op_key"] for r in calendar(settings) if r["op_key"].startswith(f"BOOK:{task_id}:")] == [op_key]
    assert list(shown["actions"]) == [op_key] and shown["actions"][op_key]["status"] == "succeeded"

    first, second, third = script.users(task_id)  # asked three times, no more
    assert shown["proposals_refused"] == 0  # the close started the count afresh
    assert "REFUSED" not in first
    assert "<<<REFUSED" in second and UNUSABLE in second
    assert "<<<REFUSED" in third and ON_RECORD in third and UNUSABLE not in third

    refused = [r.detail for r in history(kafka_bootstrap, start, task_id, 2) if "refusals" in r.detail]
    assert [(d["refusals"], d["parked"]) for d in refused] == [(1, False), (2, False)], refused
    assert UNUSABLE in refused[0]["refused"] and ON_RECORD in refused[1]["refused"]


def test_a_model_always_wrong_parks_the_task_after_the_limit_and_reopen_puts_it_back(
    client: Client, settings: Settings, kafka_bootstrap: str, workers: Fleet, model: tuple[Model, ChatServer]
) -> None:
    script, start = model[0], log_end_offsets(kafka_bootstrap)
    limit = retry_app.workflows[0].max_reproposals
    assert limit == MAX_REPROPOSALS
    # Wrong until the limit parks it; a person reopens it, and the model is asked afresh.
    task_id = book(client, script, ["wrong"] * (limit + 1) + ["right"], free_day(settings, ROOM))
    parked = client.wait_stage(task_id, {"needs_review", "closed"}, SETTLE_S)
    assert parked["stage"] == "needs_review", parked
    assert f"{limit + 1} proposals in a row were refused" in parked["last_refusal"], parked
    assert parked["external_refs"] == {"parked-from": "ready"}, parked
    assert len(script.users(task_id)) == limit + 1 and parked["actions"] == {}

    refused = [
        r.detail for r in history(kafka_bootstrap, start, task_id, limit + 1) if "refusals" in r.detail
    ]
    assert [(d["refusals"], d["parked"]) for d in refused] == [(n, n > limit) for n in range(1, limit + 2)]
    assert all(ON_RECORD in d["refused"] for d in refused)

    listed = wakeful("task", "show", task_id, "--json")
    assert doc(listed)["last_refusal"] == parked["last_refusal"]

    reopened = wakeful("task", "reopen", task_id, "--json")
    assert reopened.returncode == 0 and doc(reopened)["stage"] == "ready", reopened.stdout + reopened.stderr
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed" and list(shown["actions"]) == [f"BOOK:{task_id}:v1"], shown
    asked = script.users(task_id)
    assert len(asked) == limit + 2 and "<<<REFUSED" not in asked[-1]  # a reopened task starts afresh


def test_an_apps_own_change_request_is_refused_once_its_booking_has_started(
    client: Client, settings: Settings, workers: Fleet, model: tuple[Model, ChatServer]
) -> None:
    executor = workers.restart("executor", fault="executor.after_downstream_call")
    try:
        task_id = book(client, model[0], ["right"], free_day(settings, ROOM))
        executor.wait(timeout=60)  # booked, died before recording it: the intent is in flight
        op_key = f"BOOK:{task_id}:v1"
        assert [r["op_key"] for r in calendar(settings)].count(op_key) == 1
        # A new head count would be version 2 under a new op key: a second booking.
        changed = client.event(task_id, CHANGE, {"people": 2}, DESK)
        assert changed["status"] == "rejected" and "has started" in changed["reason"], changed
    finally:
        workers.start_role("executor")
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed" and list(shown["actions"]) == [op_key], shown
    assert [r["op_key"] for r in calendar(settings) if task_id in r["op_key"]] == [op_key]


def test_task_list_stuck_names_a_ready_task_nothing_asked_for_and_not_one_that_finished(
    gate_store: Store, kafka_bootstrap: str
) -> None:
    # A refund task at a stage that offers a tool, written with no wake behind it: no proposal was
    # ever asked for, and nothing will ask.
    lost = gate_store.create(new_checkpoint(stage="ready"), "create-lost").checkpoint
    done = gate_store.create(new_checkpoint(stage="closed"), "create-done").checkpoint
    listed = wakeful("task", "list", "--stuck", "--older-than", "0", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in orjson.loads(listed.stdout)}
    assert "offers a tool, waits for nothing, and no proposal came" in rows[lost.task_id]["stuck"]
    assert done.task_id not in rows
    fresh = wakeful("task", "list", "--stuck", "--older-than", "3600")
    assert fresh.returncode == 0 and lost.task_id not in fresh.stdout, fresh.stdout


def test_a_tool_held_to_calls_a_second_is_called_no_faster_and_every_task_books_once(
    client: Client, settings: Settings, workers: Fleet, model: tuple[Model, ChatServer]
) -> None:
    tool = ("--tool", "book_room", "--app", APP, "--by", "ops-lead")
    held = wakeful("authority", "limits", "set", *tool, "--calls-per-s", "2", "--burst", "1")
    assert held.returncode == 0, held.stderr
    assert "at most 2 calls a second, 1 at once" in held.stderr, held.stderr
    try:
        days = free_days(settings, ROOM, 6)
        task_ids = [book(client, model[0], ["right"], day) for day in days]  # all six at once
        shown = [client.wait_settled(task_id, SETTLE_S) for task_id in task_ids]
    finally:
        lifted = wakeful(
            "authority", "limits", "unset", "--tool", "book_room", "--app", APP, "--by", "ops-lead"
        )
        assert lifted.returncode == 0, lifted.stderr
    assert all(s["stage"] == "closed" and len(s["actions"]) == 1 for s in shown), shown
    for task_id in task_ids:  # each booked once
        assert [r["op_key"] for r in calendar(settings)].count(f"BOOK:{task_id}:v1") == 1
    # Each call's intent is written just after its turn came: at least half a second apart, less
    # the time between a turn and its intent.
    actions = [a for s in shown for a in s["actions"].values()]
    began = sorted(datetime.fromisoformat(a["started_at"]).timestamp() for a in actions)
    gaps = [b - a for a, b in itertools.pairwise(began)]
    assert min(gaps) >= 0.4, gaps
    assert b"executor.tool_rate" in (workers.dir / "executor.log").read_bytes()  # some waited their turn
    history = doc(wakeful("authority", "limits", "history", "--json"))["history"]
    mine = [r for r in history if r["scope"] == "tool:rooms_retry:book_room"][-2:]
    assert [(r["action"], r.get("calls_per_s"), r.get("burst"), r["by"]) for r in mine] == [
        ("set", "2", "1", "ops-lead"),
        ("unset", None, None, "ops-lead"),
    ]


def free_days(settings: Settings, room: str, count: int) -> list[date]:
    """`count` days, each with no booking of `room` yet."""
    days = [free_day(settings, room)]
    taken = {row["day"] for row in calendar(settings) if row["room"] == room}
    while len(days) < count:
        day = days[-1] + timedelta(days=1)
        while day.isoformat() in taken:
            day += timedelta(days=1)
        days.append(day)
    return days
