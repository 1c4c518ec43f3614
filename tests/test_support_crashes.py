"""The bundled support agent through worker processes, its executor killed (SIGKILL) at each of its
fault points in each of the four steps of a ticket (the order, the tracking, the refund, the notice),
then restarted: every step still ran once on its own op key, and the shop refunded once and told
the customer once. And what the shop booked, as an operator reads it with `wakeful ledger`."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import orjson
import pytest
from cli_run import wakeful
from helpers import killed_at
from test_steps_loop import EXECUTOR_POINTS, FIRST_RECEIPT_S, LEASE_TTL_MS, REACH_S, SETTLE_S

from wakeful.devstack.fleet import Fleet
from wakeful.examples.shop import Notice, Order, Remedy, Shop, Tracking
from wakeful.operate.client import Client
from wakeful.schemas import events

APP = "wakeful.examples.support:app"
DESK = "support-desk"


@pytest.fixture(scope="module")
def fleet(client: Client) -> Iterator[Fleet]:
    client.add_signer(DESK, (events.CREATE,))
    env = {
        **os.environ,
        "WAKEFUL_APP": APP,
        "WAKEFUL_MODEL": "rules",
        "WAKEFUL_LEASE_TTL_MS": str(LEASE_TTL_MS),
    }
    started = Fleet(env).start()
    try:
        yield started
    finally:
        started.stop()


def open_ticket(client: Client) -> str:
    """A ticket about a lost parcel whose item is out of stock (a refund is due), under the limit."""
    tag = uuid.uuid4().hex[:12]
    order = Order(
        order_id=f"O-{tag}", item="kettle", amount=300, currency="EUR", parcel=f"P-{tag}", in_stock=False
    )
    Shop(client.admin).stock(
        order, Tracking(parcel=order.parcel, carrier="acme post", status="lost", detail="Lost.")
    )
    task_id = f"t-{tag}"
    payload = {"workflow": "support", "order_id": order.order_id, "amount": 300}
    event = client.send(DESK, events.CREATE, payload, task_id=task_id)
    receipt = client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)
    assert receipt["status"] == "accepted", receipt
    return task_id


def refunded_and_told_once(client: Client, task_id: str) -> None:
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed", shown
    keys = [
        f"ORDER:{task_id}:v1",
        f"TRACK:{task_id}:v1:s1",
        f"REMEDY:{task_id}:v1:s2",
        f"NOTICE:{task_id}:v1:s3",
    ]
    assert {op: a["status"] for op, a in shown["actions"].items()} == dict.fromkeys(keys, "succeeded")
    made = Shop(client.admin).entries(task_id)
    assert [(type(e), e.op_key) for e in made] == [(Remedy, keys[2]), (Notice, keys[3])]
    assert [e.amount for e in made if isinstance(e, Remedy)] == [300]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("step", [1, 2, 3, 4])
@pytest.mark.parametrize("point", EXECUTOR_POINTS)
def test_no_support_step_runs_twice_and_no_refund_or_notice_is_made_twice_after_a_sigkill_at(
    client: Client, fleet: Fleet, point: str, step: int
) -> None:
    task_id = killed_at(fleet, "executor", f"{point}@{step}", lambda: open_ticket(client), REACH_S)
    refunded_and_told_once(client, task_id)


@pytest.mark.timeout(180)
def test_wakeful_ledger_prints_the_shops_entries_in_both_forms_beside_the_banks(
    client: Client, fleet: Fleet
) -> None:
    task_id = open_ticket(client)
    refunded_and_told_once(client, task_id)
    remedy, notice = (e.op_key for e in Shop(client.admin).entries(task_id))
    human = wakeful("ledger")
    assert human.returncode == 0, human.stderr[-2000:]
    assert "Traceback" not in human.stderr
    mine = [line for line in human.stdout.splitlines() if task_id in line]
    assert any(remedy in line and "remedy=refund" in line for line in mine), human.stdout[-2000:]
    assert any(notice in line for line in mine), human.stdout[-2000:]
    as_json = wakeful("ledger", "--json")
    assert as_json.returncode == 0, as_json.stderr[-2000:]
    booked = [e for e in orjson.loads(as_json.stdout) if e["task_id"] == task_id]
    assert [(e["downstream"], e["kind"], e["op_key"]) for e in booked] == [
        ("shop", "remedy", remedy),
        ("shop", "notice", notice),
    ]
