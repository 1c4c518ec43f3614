"""The record a change writes carries what the task shows (D107): the relay keeps the task index
from the last record of each task alone, so every change's record must say when the task was
created and what its views and attributes are now, whichever role wrote it."""

from __future__ import annotations

import base64
import dataclasses
from datetime import UTC, datetime
from typing import Any

from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.kafka import wiring
from wakeful.examples import refund as refund_example
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.logs import OutboxRecord
from wakeful.sdk import App, Start
from wakeful.state import keys, last_step
from wakeful.state.seal import Keyring, Sealer
from wakeful.state.store import Store
from wakeful.workflow import engine

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice", "bob"}), limit=1000)
SHOWING = App(
    name="refund",
    workflows=[
        dataclasses.replace(
            refund_example.refund,
            views={"terms": lambda v: {"amount": v.state.amount, "waits": list(v.waits)}},
            attributes={"currency": lambda v: v.state.currency, "big": lambda v: v.state.amount > 1000},
        )
    ],
    tools=[refund_example.BankRefund()],
)


def created(app: App = SHOWING) -> Checkpoint:
    made = engine.create(app, "refund", Start("t-1", "svc", "acme", {"amount": 2500}, AUTH, NOW))
    assert isinstance(made, engine.Moved)
    return last_step.stamp(made.checkpoint, 1, 0, NOW)


def record_in(commands: list[tuple[Any, ...]]) -> OutboxRecord:
    [xadd] = [c for c in commands if c[0] == "XADD" and c[1] == keys.outbox("t-1")]
    return OutboxRecord.decode(xadd[xadd.index("r") + 1])


def test_the_record_a_change_writes_carries_what_the_task_shows_and_when_it_was_made() -> None:
    sealer, cp = Sealer(Keyring.generate()), created()
    record = record_in(last_step.commands(sealer, cp, "m-1", None, shown=wiring.shows(SHOWING)))
    assert (record.created_at, record.views, record.attributes) == (
        NOW,
        {"terms": {"amount": 2500, "waits": ["approval"]}},
        {"currency": "EUR", "big": "true"},
    )
    _, opened = sealer.unseal(cp.task_id, base64.b64decode(record.sealed))
    assert Checkpoint.decode(opened) == cp  # what was shown is what was sealed


def test_a_change_of_a_workflow_that_declares_nothing_carries_empty_views() -> None:
    bare = dataclasses.replace(refund_example.refund, views={}, attributes={})
    plain = App(name="refund", workflows=[bare], tools=[refund_example.BankRefund()])
    cp = created(plain)
    record = record_in(
        last_step.commands(Sealer(Keyring.generate()), cp, "m-1", None, shown=wiring.shows(plain))
    )
    assert (record.created_at, record.views, record.attributes) == (NOW, {}, {})


class Recorded:
    """A connection that records what a change sends and answers as Redis would: a new task."""

    round_trips = 0

    def __init__(self) -> None:
        self.sent: list[tuple[Any, ...]] = []

    def batch(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        self.sent += commands
        multi, exec_ = commands.index(("MULTI",)), commands.index(("EXEC",))
        return [True] * multi + ["QUEUED"] * (exec_ - multi) + [[1] * (exec_ - multi - 1)] + [1]


def test_a_store_built_for_a_role_carries_its_apps_views_on_every_change() -> None:
    client: Any = None  # the change goes through the connection it is handed
    store = Store(
        client, Sealer(Keyring.generate()), moves=engine.moves(SHOWING), shown=wiring.shows(SHOWING)
    )
    conn, cp = Recorded(), created()
    first = [True, [None, None, None], [], 0]  # WATCH; no state, lease or marker; no counter; unseen
    change = store.create(cp, "m-1", pinned=conn, first=first)  # type: ignore[arg-type]
    record = record_in(conn.sent)
    assert change.status == "applied" and record.attributes == {"currency": "EUR", "big": "true"}
    assert record.views == {"terms": {"amount": 2500, "waits": ["approval"]}} and record.created_at == NOW
