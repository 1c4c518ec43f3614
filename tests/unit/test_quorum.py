"""A quorum of approvers (Wait(count=N)): N different live approvers must approve the task's
current version before it moves on; one person twice counts once, an approval of another version
counts for nothing, and one whose right was taken meanwhile no longer counts."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from wakeful.authority.snapshot import Snapshot
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import APPROVERS, CLOSED, NEEDS_REVIEW, App, Context, Next, Refuse, Start, Wait, Workflow
from wakeful.workflow import engine, wakes

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
THREE = frozenset({"alice", "bob", "carol"})


class Spend(BaseModel):
    amount: int = 0


def done(ctx: Context[Spend], tool: str, result: Mapping[str, Any]) -> Next[Spend]:
    return Next(CLOSED)


def flow(count: int) -> Workflow[Spend]:
    wait = Wait(events.APPROVE, (APPROVERS,), timedelta(hours=8), then="ready", count=count)
    return Workflow(
        name="spend",
        version=1,
        state=Spend,
        stages={"received": ("awaiting", "ready"), "awaiting": ("ready",), "ready": (CLOSED,)},
        start=lambda s: Next("awaiting", Spend(amount=9000), wait=wait),
        check=lambda ctx, effect: effect,
        done=done,
    )


def waiting(count: int = 2, approvers: frozenset[str] = THREE) -> tuple[App, Checkpoint, Snapshot]:
    auth = Snapshot(approvers=approvers, limit=0)
    app = App(name="spends", workflows=[flow(count)])
    made = engine.create(app, "spend", Start("t-1", "dave", "default", {}, auth, NOW))
    assert isinstance(made, engine.Moved)
    return app, made.checkpoint, auth


def approve(app: App, cp: Checkpoint, who: str, auth: Snapshot, version: int = 1) -> engine.Ruling:
    wait = cp.execution.pending_waits[0]
    heard = wakes.Heard(events.APPROVE, {"version": version}, who, wait.correlation_id)
    return wakes.on_event(app, cp, heard, auth=auth, now=NOW)


def moved(ruled: engine.Ruling) -> Checkpoint:
    assert isinstance(ruled, engine.Moved), ruled
    return ruled.checkpoint


def test_two_of_three_approve_and_only_then_the_task_moves_on_bound_to_both() -> None:
    app, cp, auth = waiting()
    first = moved(approve(app, cp, "alice", auth))
    assert first.stage == "awaiting" and first.business.approval is None
    assert first.execution.pending_waits[0].counted == ("alice",)
    second = moved(approve(app, first, "bob", auth))
    assert second.stage == "ready" and second.execution.pending_waits == ()
    approval = second.business.approval
    assert approval is not None and (approval.approver_ref, approval.co_approvers) == ("bob", ("alice",))
    assert approval.binds(1, engine.terms(cp))


def test_one_approver_twice_counts_once() -> None:
    app, cp, auth = waiting()
    first = moved(approve(app, cp, "alice", auth))
    again = approve(app, first, "alice", auth)
    assert isinstance(again, Refuse) and "counts once" in again.reason


def test_an_approval_of_another_version_counts_for_nothing() -> None:
    app, cp, auth = waiting()
    first = moved(approve(app, cp, "alice", auth))
    stale = approve(app, first, "bob", auth, version=0)
    assert isinstance(stale, Refuse) and "version" in stale.reason
    assert first.execution.pending_waits[0].counted == ("alice",)  # nothing written: still one


def test_an_approver_whose_right_was_taken_meanwhile_no_longer_counts() -> None:
    app, cp, auth = waiting(count=2)
    first = moved(approve(app, cp, "alice", auth))
    fewer = Snapshot(approvers=frozenset({"bob", "carol"}), limit=0)  # alice is no approver now
    second = moved(approve(app, first, "bob", fewer))
    assert second.stage == "awaiting" and second.execution.pending_waits[0].counted == ("bob",)
    assert moved(approve(app, second, "carol", fewer)).stage == "ready"


def test_the_requester_is_never_counted() -> None:
    app, cp, _ = waiting(approvers=frozenset({"alice", "dave"}))
    refused = approve(app, cp, "dave", Snapshot(approvers=frozenset({"alice", "dave"}), limit=0))
    assert isinstance(refused, Refuse)


@pytest.mark.parametrize("count", [0, -1])
def test_a_wait_that_counts_no_one_parks_the_task_for_a_person(count: int) -> None:
    auth = Snapshot(approvers=THREE, limit=0)
    app = App(name="spends", workflows=[flow(count)])
    made = engine.create(app, "spend", Start("t-1", "dave", "default", {}, auth, NOW))
    parked = made.checkpoint if isinstance(made, engine.Moved | engine.ForReview) else None
    assert (
        parked is not None
        and parked.stage == NEEDS_REVIEW
        and "counts" in (parked.business.last_refusal or "")
    )


def test_a_v3_checkpoint_waits_for_one_approver_after_its_upgrade() -> None:
    _, cp, _ = waiting(count=1)
    doc = orjson.loads(cp.encode())
    doc["schema_version"] = doc["versions"]["schema"] = 3
    for wait in doc["execution"]["pending_waits"]:
        del wait["count"], wait["counted"]
    upgraded = Checkpoint.decode(orjson.dumps(doc))
    assert upgraded.schema_version == Checkpoint.SCHEMA == 5
    assert [(w.count, w.counted) for w in upgraded.execution.pending_waits] == [(1, ())]
