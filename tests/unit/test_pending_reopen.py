"""A reopen after an asynchronous tool's deadline (workflow/pending.py, wakes.reopen), through the
gate's own decision (gate_rules.decide): the call was made, so the task waits on that same call
again (its op key, handle and correlation id) with a fresh deadline as long as the first, read from
the call's record on the action log; the original handle's completion is then accepted and closes
the step. The runtime's rule, whatever the workflow's reopen says, as long as it sends the task back
where the call's tool is offered."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import async_app
import pytest
from async_app import HOOK, PAYING, PayInvoice, handle_of
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.gate import rules as gate_rules
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.sdk import CLOSED, NEEDS_REVIEW, App, Effect, Next, Pending, Refuse, Start
from wakeful.workflow import effects, engine, pending, wakes

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=0)
ARGS = {"task_id": "t-1", "invoice": "inv-7", "amount": 120}
OP = "pay_invoice:t-1:v1"
HANDLE = handle_of(OP)
ESCALATED = NOW + timedelta(hours=1)  # the payment's deadline: on_deadline parks the task
REOPENED = NOW + timedelta(hours=5)
KEY = Ed25519Signer("key-any", Ed25519PrivateKey.generate())  # decide() trusts what gate 1 verified


def asleep(app: App = async_app.app) -> Checkpoint:
    """The task once the executor recorded the payment's call as pending and closed the step."""
    start = Start("t-1", "desk", "default", {"invoice": "inv-7", "amount": 120}, AUTH, NOW)
    created = engine.create(app, "invoice", start)
    assert isinstance(created, engine.Moved)
    checked = effects.check_proposal(app, created.checkpoint, "pay_invoice", ARGS, auth=AUTH, now=NOW)
    assert isinstance(checked, Effect) and checked.op_key == OP
    marker = pending.recorded(PayInvoice(), Pending(HANDLE, timedelta(hours=1)), NOW)
    assert isinstance(marker, dict)
    return effects.done(app, created.checkpoint, "pay_invoice", marker, auth=AUTH, now=NOW, args=ARGS)


ORIGINAL_CID = asleep().execution.pending_waits[0].correlation_id


def logged(
    *, status: ActionStatus = ActionStatus.SUCCEEDED, handle: str = HANDLE
) -> dict[str, ActionLogEntry]:
    """The task's action log as the gate reads it: the payment's call, recorded as pending."""
    marker = pending.recorded(PayInvoice(), Pending(handle, timedelta(hours=1)), NOW)
    assert isinstance(marker, dict)
    entry = ActionLogEntry(
        op_key=OP, task_id="t-1", status=status, fence=1, started_at=NOW, result=marker, tool="pay_invoice"
    )
    return {OP: entry}


def escalated(app: App = async_app.app) -> Checkpoint:
    parked = wakes.on_deadline(app, asleep(app), ESCALATED)
    assert parked is not None and parked.stage == NEEDS_REVIEW
    return parked


def decide(app: App, cp: Checkpoint, kind: str, payload: Mapping[str, Any], by: str, **kw: Any) -> object:
    event = sign_event(KEY, kind, dict(payload), task_id="t-1")
    entries = kw.pop("log", logged())
    return gate_rules.decide(
        app,
        cp,
        event,
        by,
        tenant="default",
        auth=AUTH,
        now=kw.pop("now", REOPENED),
        started=frozenset(k for k, e in entries.items() if e.status is not ActionStatus.FAILED),
        recorded=pending.outcomes(entries),
    )


def reopened(app: App = async_app.app) -> Checkpoint:
    moved = decide(app, escalated(app), events.REOPEN, {}, "ops-lead")
    assert isinstance(moved, engine.Moved), moved
    return moved.checkpoint


def with_reopen(reopen: Any) -> App:
    wf = dataclasses.replace(async_app.invoice, reopen=reopen)
    return App(name="settling", workflows=[wf], tools=async_app.app.tools)


@pytest.mark.parametrize(
    "app",
    [async_app.app, with_reopen(lambda ctx: Next(PAYING))],
    ids=["back-to-where-it-was-parked-from", "the-workflows-own-reopen"],
)
def test_a_reopen_after_the_deadline_waits_on_the_same_call_with_a_fresh_deadline(app: App) -> None:
    cp = reopened(app)
    [wait] = cp.execution.pending_waits
    assert (cp.stage, wait.wait_for, wait.allowed_signers) == (
        PAYING,
        events.COMPLETE,
        (f"principal:{HOOK}",),
    )
    assert (wait.correlation_id, wait.deadline) == (ORIGINAL_CID, REOPENED + timedelta(hours=1))
    [call] = cp.execution.results
    assert (call.op_key, call.args, call.result["handle"]) == (OP, ARGS, HANDLE)
    assert pending.awaited(cp) == call
    assert engine.PARKED_FROM not in cp.external_refs and cp.business.last_refusal is None


def test_the_original_handles_completion_after_a_reopen_is_accepted_and_closes_the_step() -> None:
    settled = {"handle": HANDLE, "result": {"settlement": "set-1"}}
    moved = decide(
        async_app.app, reopened(), events.COMPLETE, settled, HOOK, now=REOPENED + timedelta(minutes=5)
    )
    assert isinstance(moved, engine.Moved), moved
    cp = moved.checkpoint
    assert (cp.stage, cp.execution.pending_waits, cp.execution.step) == (PAYING, (), 1)
    [call] = cp.execution.results
    assert (call.op_key, call.result) == (OP, {"settlement": "set-1"})
    assert cp.external_refs == {"settlement": "set-1"}


def test_the_fresh_deadline_is_held_to_as_the_first_was() -> None:
    late = decide(
        async_app.app,
        reopened(),
        events.COMPLETE,
        {"handle": HANDLE, "result": {}},
        HOOK,
        now=REOPENED + timedelta(hours=1),
    )
    assert isinstance(late, Refuse) and "deadline" in late.reason, late


@pytest.mark.parametrize(
    ("log", "reason"),
    [
        ({}, f"the action log has no pending record of its call {OP}"),
        (logged(status=ActionStatus.FAILED), f"the action log has no pending record of its call {OP}"),
        (logged(handle="pay-other"), "records handle 'pay-other'"),
    ],
    ids=["no-record", "a-failed-record", "another-handle"],
)
def test_a_reopen_whose_call_the_action_log_does_not_vouch_for_is_refused_and_writes_nothing(
    log: dict[str, ActionLogEntry], reason: str
) -> None:
    refused = decide(async_app.app, escalated(), events.REOPEN, {}, "ops-lead", log=log)
    assert isinstance(refused, Refuse) and reason in refused.reason, refused
    assert gate_rules.written(refused) == gate_rules.written(None)


def test_a_call_answered_with_a_failure_is_not_waited_on_again() -> None:
    failed = decide(
        async_app.app, asleep(), events.COMPLETE, {"handle": HANDLE, "failed": "closed"}, HOOK, now=NOW
    )
    assert isinstance(failed, engine.ForReview)
    moved = decide(async_app.app, failed.checkpoint, events.REOPEN, {}, "ops-lead")
    assert isinstance(moved, engine.Moved), moved
    cp = moved.checkpoint
    assert (cp.stage, cp.execution.pending_waits, cp.execution.results) == (PAYING, (), ())


def test_a_reopen_the_workflow_sends_elsewhere_leaves_its_wait_to_the_workflow() -> None:
    app = with_reopen(lambda ctx: Next(CLOSED))
    moved = decide(app, escalated(app), events.REOPEN, {}, "ops-lead")
    assert isinstance(moved, engine.Moved) and moved.checkpoint.execution.pending_waits == (), moved


def test_a_call_that_answered_at_once_with_a_result_reading_pending_is_not_waited_on() -> None:
    # the downstream's own words, not the runtime's marker: the reopen asks the model again
    said = {"status": pending.PENDING, "handle": HANDLE, "due": NOW.isoformat()}
    app = async_app.app
    start = Start("t-1", "desk", "default", {"invoice": "inv-7", "amount": 120}, AUTH, NOW)
    created = engine.create(app, "invoice", start)
    assert isinstance(created, engine.Moved)
    answered = effects.done(app, created.checkpoint, "pay_invoice", said, auth=AUTH, now=NOW, args=ARGS)
    assert pending.unanswered(answered) is not None  # it reads like a pending call
    entry = ActionLogEntry(
        op_key=OP, task_id="t-1", status=ActionStatus.SUCCEEDED, fence=1, started_at=NOW, result=said
    )
    moved = decide(
        app, engine.review(answered, "a person looks"), events.REOPEN, {}, "ops-lead", log={OP: entry}
    )
    assert isinstance(moved, engine.Moved), moved
    assert (moved.checkpoint.stage, moved.checkpoint.execution.pending_waits) == (PAYING, ())
