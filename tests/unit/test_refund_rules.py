"""The refund agent's decisions, as the runtime makes them with the refund app: pure functions, no
Kafka, no Redis, no clock of their own. The tables are the refund's behaviour from before it was an
app on the SDK, driven through `Rules`, the old function-per-event surface rebuilt on the runtime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from refund_rules import APP, Declined, refund

from wakeful.authority.snapshot import Snapshot
from wakeful.examples.refund import Stage
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import Refuse, Review
from wakeful.workflow import effects

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice", "bob"}), limit=1000)


def task(amount: int = 2500, wait_s: int | None = None, requester: str = "svc") -> Checkpoint:
    payload: dict[str, Any] = {"amount": amount, "currency": "EUR"}
    if wait_s:
        payload["wait_s"] = wait_s
    made = refund.create("t-1", requester, "default", payload, auth=AUTH, now=NOW)
    assert isinstance(made, Checkpoint)
    return made


def approved(cp: Checkpoint, at: datetime = NOW) -> Checkpoint:
    out = refund.approve(cp, "alice", cp.business.version, AUTH, at)
    assert isinstance(out, Checkpoint), out
    return out


def refusal(out: object) -> str:
    assert isinstance(out, Declined), out
    return out.reason


def proposal(cp: Checkpoint, **override: Any) -> dict[str, Any]:
    data = cp.business.data
    return {"task_id": cp.task_id, "amount": data["amount"], "currency": data["currency"], **override}


# ---- create --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"amount": 0}, "amount must be a whole number from 1 to 1000000000000000, got 0"),
        ({"amount": -5}, "amount must be a whole number from 1 to"),
        ({"amount": True}, "amount must be a whole number from 1 to 1000000000000000, got True"),
        ({"amount": 12.5}, "amount must be a whole number from 1 to"),
        ({"amount": "100"}, "amount must be a whole number from 1 to"),
        ({"amount": refund.MAX_AMOUNT + 1}, f"got {refund.MAX_AMOUNT + 1}"),
        ({"amount": 10**30}, "got an integer of 100 bits"),
        ({"amount": 10**4000}, "got an integer of 13288 bits"),
        ({}, "got None"),
        ({"amount": 10, "currency": "EURO"}, "currency must be a 3-letter code"),
        ({"amount": 10, "currency": 978}, "currency must be a 3-letter code"),
    ],
)
def test_create_refuses_malformed_terms_with_the_reason(payload: dict[str, Any], reason: str) -> None:
    assert reason in refusal(refund.create("t-1", "svc", "default", payload, auth=AUTH, now=NOW))


@given(amount=st.integers(min_value=1, max_value=10**9), limit=st.integers(min_value=0, max_value=10**9))
def test_create_waits_for_an_approval_exactly_when_the_amount_is_over_the_live_limit(
    amount: int, limit: int
) -> None:
    auth = Snapshot(approvers=frozenset({"alice"}), limit=limit)
    cp = refund.create("t-1", "svc", "default", {"amount": amount}, auth=auth, now=NOW)
    assert isinstance(cp, Checkpoint)
    waits = cp.execution.pending_waits
    if amount > limit:
        assert cp.stage == Stage.AWAITING_APPROVAL and len(waits) == 1
        assert waits[0].bound_to_version == 1 and waits[0].deadline == NOW + refund.DEFAULT_WAIT
    else:
        assert cp.stage == Stage.READY and waits == ()


@pytest.mark.parametrize(
    ("wait_s", "window"),
    [(60, timedelta(seconds=60)), (10**9, refund.MAX_WAIT), (None, refund.DEFAULT_WAIT)],
)
def test_wait_deadline_is_capped_at_the_maximum_window(wait_s: int | None, window: timedelta) -> None:
    assert task(wait_s=wait_s).execution.pending_waits[0].deadline == NOW + window


# ---- approve -------------------------------------------------------------------------------------


def test_approval_inside_the_wait_binds_version_terms_scope_and_expiry() -> None:
    cp = approved(task())
    a = cp.business.approval
    assert cp.stage == Stage.READY and cp.execution.pending_waits == ()
    assert a is not None and a.binds(1, refund.terms(cp)) and a.scope == refund.SCOPE
    assert a.expires_at == NOW + refund.APPROVAL_TTL and a.single_use and not a.consumed


@pytest.mark.parametrize(
    ("late_by", "accepted"),
    [(timedelta(seconds=-1), True), (timedelta(0), False), (timedelta(days=3), False)],
)
def test_approval_after_the_waits_deadline_is_refused(late_by: timedelta, accepted: bool) -> None:
    cp = task(wait_s=1)
    deadline = cp.execution.pending_waits[0].deadline
    out = refund.approve(cp, "alice", 1, AUTH, deadline + late_by)
    if accepted:
        assert isinstance(out, Checkpoint)
    else:
        assert "deadline" in refusal(out) and "has passed" in refusal(out)


@pytest.mark.parametrize(
    ("who", "version", "corr", "reason"),
    [
        ("mallory", 1, None, "not an authorised approver"),
        ("svc", 1, None, "not an authorised approver"),
        ("alice", 2, None, "approval is for version 2, task is now version 1"),
        ("alice", "1", None, "as a whole number, got '1'"),
        ("alice", True, None, "as a whole number, got True"),
        ("alice", 1.0, None, "as a whole number, got 1.0"),
        ("alice", None, None, "as a whole number, got None"),
        ("alice", 1, "corr-other", "correlation id mismatch"),
    ],
)
def test_approval_is_refused_unless_every_binding_holds(
    who: str, version: object, corr: str | None, reason: str
) -> None:
    assert reason in refusal(refund.approve(task(), who, version, AUTH, NOW, correlation_id=corr))


def test_requester_cannot_approve_their_own_refund() -> None:
    cp = task(requester="alice")
    assert "cannot approve their own" in refusal(refund.approve(cp, "alice", 1, AUTH, NOW))


@pytest.mark.parametrize("stage", [Stage.READY, Stage.NEEDS_REVIEW, Stage.CLOSED])
def test_approval_applies_only_while_awaiting_one(stage: Stage) -> None:
    cp = refund._with(task(), stage=stage)
    assert "not awaiting an approval" in refusal(refund.approve(cp, "alice", 1, AUTH, NOW))


# ---- amend ---------------------------------------------------------------------------------------


def test_amendment_bumps_the_version_and_voids_the_approval() -> None:
    out = refund.amend(approved(task()), "svc", {"amount": 3000}, AUTH, NOW)
    assert isinstance(out, Checkpoint)
    assert (out.business.version, out.business.data["amount"], out.business.approval) == (2, 3000, None)
    assert out.stage == Stage.AWAITING_APPROVAL and out.execution.pending_waits[0].bound_to_version == 2


def test_a_task_keeps_the_time_it_was_created_at_through_its_later_changes() -> None:
    later = NOW + timedelta(hours=1)
    made = task()
    out = refund.amend(approved(made, at=later), "svc", {"amount": 3000}, AUTH, later)
    assert isinstance(out, Checkpoint)
    assert (made.created_at, out.created_at, out.business.version) == (NOW, NOW, 2)


@pytest.mark.parametrize(
    ("who", "started", "payload", "reason"),
    [
        ("alice", frozenset(), {"amount": 10}, "alice did not request this task and may not send task.amend"),
        ("svc", frozenset({"REFUND:t-1:v1"}), {"amount": 10}, "has started; amending now could pay twice"),
        ("svc", frozenset(), {"amount": 0}, "amount must be a whole number from 1 to"),
    ],
)
def test_amendment_is_refused_to_others_and_once_the_refund_started(
    who: str, started: frozenset[str], payload: dict[str, Any], reason: str
) -> None:
    assert reason in refusal(refund.amend(task(300), who, payload, AUTH, NOW, started=started))


def test_amendment_after_an_earlier_versions_failed_refund_is_allowed() -> None:
    # Only the current version's op key counts: an older version's refund is not this operation.
    out = refund.amend(task(300), "svc", {"amount": 20}, AUTH, NOW, started=frozenset({"REFUND:t-1:v0"}))
    assert isinstance(out, Checkpoint) and out.business.version == 2


# ---- deadline, run, reopen -----------------------------------------------------------------------


def test_deadline_escalates_only_once_it_has_really_passed() -> None:
    cp = task(wait_s=60)
    assert refund.deadline(cp, NOW + timedelta(seconds=59)) is None
    due = refund.deadline(cp, NOW + timedelta(seconds=60))
    assert due is not None and due.stage == Stage.NEEDS_REVIEW
    assert "escalated to ops-lead" in (due.business.last_refusal or "")


@pytest.mark.parametrize(
    ("stage", "reason"),
    [
        (Stage.READY, None),
        (Stage.AWAITING_APPROVAL, "needs an approval for version 1 before it can run"),
        (Stage.NEEDS_REVIEW, "task is needs_review; it cannot run"),
    ],
)
def test_run_is_a_nudge_only_for_a_ready_task(stage: Stage, reason: str | None) -> None:
    out = refund.run(refund._with(task(), stage=stage))
    assert (out.reason if out else None) == reason


def test_reopen_applies_only_to_a_task_parked_for_review() -> None:
    assert "only a task in needs_review" in refusal(refund.reopen(task(), {}, AUTH, NOW))
    parked = refund.review(task(), "blocked")
    out = refund.reopen(parked, {"wait_s": 30}, AUTH, NOW)
    assert isinstance(out, Checkpoint) and out.stage == Stage.AWAITING_APPROVAL
    assert out.business.last_refusal is None


# ---- gate 7: the proposal against Progress and live Authority ------------------------------------


def test_matching_proposal_for_an_approved_task_executes() -> None:
    cp = approved(task())
    assert refund.check_proposal(cp, refund.TOOL, proposal(cp), AUTH, NOW) is None


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"amount": 5000}, "does not match the system of record"),
        ({"currency": "USD"}, "does not match the system of record"),
        ({"task_id": "t-2"}, "does not match the system of record"),
    ],
)
def test_proposal_that_differs_from_the_record_goes_to_review(change: dict[str, Any], reason: str) -> None:
    cp = approved(task())
    out = refund.check_proposal(cp, refund.TOOL, proposal(cp, **change), AUTH, NOW)
    assert out is not None and out.review and reason in out.reason


def test_unknown_tool_is_blocked_into_review() -> None:
    cp = approved(task())
    out = refund.check_proposal(cp, "wire_transfer", proposal(cp), AUTH, NOW)
    assert out is not None and out.review and "not permitted at stage ready" in out.reason


def test_a_model_that_failed_for_good_parks_the_task_with_its_reason() -> None:
    cp = approved(task())
    out = effects.check_proposal(APP, cp, "none", {}, auth=AUTH, now=NOW, failed="429 after 4 attempts")
    assert isinstance(out, Review) and "the model failed: 429 after 4 attempts" in out.reason


def test_an_unusable_reply_is_refused_with_its_reason_and_never_becomes_an_effect() -> None:
    cp = approved(task())
    # Even a reply that names the right tool with the right arguments: the proposer said no.
    out = effects.check_proposal(
        APP, cp, refund.TOOL, proposal(cp), auth=AUTH, now=NOW, unusable="two tool calls where one is allowed"
    )
    assert isinstance(out, Refuse) and "two tool calls where one is allowed" in out.reason


def test_a_task_that_waits_says_so_before_any_word_about_the_model() -> None:
    cp = task()  # awaiting its approval
    out = effects.check_proposal(APP, cp, "none", {}, auth=AUTH, now=NOW, failed="timeout")
    assert isinstance(out, Refuse) and "needs an approval" in out.reason


def test_approval_scoped_to_another_action_does_not_permit_the_refund() -> None:
    cp = approved(task())
    assert cp.business.approval is not None
    narrowed = cp.business.approval.model_copy(update={"scope": "refund.view"})
    cp = refund._with(cp, approval=narrowed)
    out = refund.check_proposal(cp, refund.TOOL, proposal(cp), AUTH, NOW)
    assert out is not None and out.review and "'refund.view', not 'refund.execute'" in out.reason


@pytest.mark.parametrize(("single_use", "allowed"), [(True, False), (False, True)])
def test_a_consumed_approval_is_refused_only_when_single_use(single_use: bool, allowed: bool) -> None:
    cp = approved(task())
    assert cp.business.approval is not None
    used = cp.business.approval.model_copy(update={"consumed": True, "single_use": single_use})
    cp = refund._with(cp, approval=used)
    out = refund.check_proposal(cp, refund.TOOL, proposal(cp), AUTH, NOW)
    assert (out is None) == allowed
    if not allowed:
        assert out is not None and "already used" in out.reason


@pytest.mark.parametrize(
    ("auth", "at", "reason"),
    [
        (AUTH, NOW + refund.APPROVAL_TTL, "the approval has expired"),
        (Snapshot(approvers=frozenset({"bob"}), limit=1000), NOW, "approver alice is no longer authorised"),
    ],
)
def test_approval_is_revalidated_against_live_authority_and_time(
    auth: Snapshot, at: datetime, reason: str
) -> None:
    cp = approved(task())
    out = refund.check_proposal(cp, refund.TOOL, proposal(cp), auth, at)
    assert out is not None and out.review and out.reason == reason


def test_proposal_for_a_waiting_task_is_refused_without_review() -> None:
    cp = task()
    out = refund.check_proposal(cp, refund.TOOL, proposal(cp), AUTH, NOW)
    assert out is not None and not out.review and "needs an approval for version 1 first" in out.reason


def test_limit_raised_after_creation_lets_an_unapproved_task_refund() -> None:
    cp = refund._with(task(2500), stage=Stage.READY)
    raised = Snapshot(approvers=frozenset({"alice"}), limit=5000)
    assert refund.check_proposal(cp, refund.TOOL, proposal(cp), raised, NOW) is None


def test_close_records_the_booking_and_consumes_the_approval() -> None:
    closed = refund.close(approved(task()), "led-1")
    assert closed.stage == Stage.CLOSED and closed.external_refs["ledger_entry"] == "led-1"
    assert closed.business.approval is not None and closed.business.approval.consumed


@pytest.mark.parametrize("wait_s", [10**14, 2**70])
def test_a_huge_wait_is_clamped_to_the_longest_wait_not_an_overflow(wait_s: int) -> None:
    assert refund.wait_window({"wait_s": wait_s}) == refund.MAX_WAIT
