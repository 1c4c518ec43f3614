"""The authorization seam decides from the live snapshot alone, by the app's Cedar policy (here the
refund app's, examples/refund.cedar): who may approve, which refunds need an approval, and nothing
is allowed that the policy does not name. Pure: no Redis, no Kafka."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wakeful.authority import policy
from wakeful.authority.policy import Authorization
from wakeful.authority.snapshot import Snapshot
from wakeful.examples.refund import app

APPROVERS = frozenset({"bob", "carol"})
TASK: dict[str, Any] = {"task": "t-1", "tenant": "acme", "requester": "alice"}
PEOPLE = ("alice", "bob", "carol", "dave", "")


def snapshot(approvers: frozenset[str] = APPROVERS, limit: int = 1000) -> Snapshot:
    return Snapshot(approvers=approvers, limit=limit, app="refund", shipped=app.shipped_policy)


LIVE = snapshot()


def refund(amount: object, approver: str | None = None, requester: str = "alice") -> dict[str, Any]:
    """A refund request: the task's fields, and its context (the amount, the approval's approver)."""
    return {"resource": {**TASK, "requester": requester}, "amount": amount, "approver": approver}


def authorize(principal: str, action: str, request: dict[str, Any], auth: Snapshot) -> Authorization:
    """The seam, for a task (TASK's fields) or a refund request (refund()): the amount and an
    approver, where there is one, are the request's context."""
    if "resource" not in request:
        return policy.authorize(principal, action, request, auth)
    context = {"amount": request["amount"]}
    if request["approver"] is not None:
        context["approver"] = request["approver"]
    return policy.authorize(principal, action, request["resource"], auth, context)


# ---- approve ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("principal", "requester", "allowed", "reason"),
    [
        ("bob", "alice", True, ""),
        ("carol", "alice", True, ""),
        ("dave", "alice", False, "not an authorised approver"),
        ("", "alice", False, "not an authorised approver"),
        ("bob", "bob", False, "cannot approve their own refund"),
        ("alice", "alice", False, "not an authorised approver"),
    ],
)
def test_only_a_listed_approver_other_than_the_requester_may_approve(
    principal: str, requester: str, allowed: bool, reason: str
) -> None:
    decision = authorize(principal, "approve", {**TASK, "requester": requester}, LIVE)
    assert decision.allowed is allowed
    assert reason in decision.reason
    assert bool(decision.reason) is not allowed


@settings(max_examples=100, deadline=None)
@given(
    principal=st.sampled_from(PEOPLE),
    requester=st.sampled_from(PEOPLE),
    approvers=st.frozensets(st.sampled_from(PEOPLE)),
)
def test_approve_is_allowed_exactly_for_a_live_approver_who_did_not_request(
    principal: str, requester: str, approvers: frozenset[str]
) -> None:
    decision = authorize(principal, "approve", {**TASK, "requester": requester}, snapshot(approvers))
    assert decision.allowed is (principal in approvers and principal != requester)


def test_an_approver_removed_from_the_live_snapshot_can_no_longer_approve() -> None:
    assert authorize("bob", "approve", TASK, LIVE).allowed
    decision = authorize("bob", "approve", TASK, snapshot(APPROVERS - {"bob"}))
    assert not decision.allowed
    assert "not an authorised approver" in decision.reason


# ---- refund ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "approver", "allowed", "reason"),
    [
        (1, None, True, ""),
        (999, None, True, ""),
        (1000, None, True, ""),  # the limit itself needs no approval
        (1001, None, False, "a refund of 1001 needs an approval (limit 1000)"),
        (50_000, None, False, "a refund of 50000 needs an approval (limit 1000)"),
        (1001, "bob", True, ""),
        (1001, "dave", False, "approver dave is no longer authorised"),
        (1001, "", False, "approver  is no longer authorised"),
    ],
)
def test_a_refund_above_the_live_limit_needs_a_live_approver(
    amount: int, approver: str | None, allowed: bool, reason: str
) -> None:
    decision = authorize("alice", "refund", refund(amount, approver), LIVE)
    assert decision.allowed is allowed
    assert decision.reason == reason


def test_an_approval_does_not_survive_its_approver_being_removed_before_the_refund() -> None:
    resource = refund(5000, approver="carol")
    assert authorize("carol", "refund", resource, LIVE).allowed
    decision = authorize("carol", "refund", resource, snapshot(APPROVERS - {"carol"}))
    assert not decision.allowed
    assert "approver carol is no longer authorised" in decision.reason


def test_lowering_the_live_limit_makes_an_unapproved_refund_need_an_approval() -> None:
    resource = refund(500)
    assert authorize("alice", "refund", resource, snapshot(limit=1000)).allowed
    decision = authorize("alice", "refund", resource, snapshot(limit=499))
    assert not decision.allowed
    assert "needs an approval (limit 499)" in decision.reason


def test_with_a_zero_limit_every_positive_refund_needs_an_approval() -> None:
    decision = authorize("alice", "refund", refund(1), snapshot(limit=0))
    assert not decision.allowed
    assert "a refund of 1 needs an approval (limit 0)" in decision.reason


@settings(max_examples=100, deadline=None)
@given(
    amount=st.integers(min_value=1, max_value=10**9),
    limit=st.integers(min_value=0, max_value=10**9),
    approver=st.none() | st.sampled_from(PEOPLE),
    approvers=st.frozensets(st.sampled_from(PEOPLE)),
)
def test_a_refund_is_allowed_exactly_within_the_limit_or_with_a_live_approver(
    amount: int, limit: int, approver: str | None, approvers: frozenset[str]
) -> None:
    decision = authorize("alice", "refund", refund(amount, approver), snapshot(approvers, limit))
    # refund() names alice as the requester: she never approves her own refund.
    assert decision.allowed is (amount <= limit or (approver in approvers and approver != "alice"))
    if not decision.allowed:
        assert (
            str(amount) in decision.reason
            or f"approver {approver}" in decision.reason
            or "cannot approve their own" in decision.reason
        )


def test_an_approval_by_the_requester_never_permits_their_own_refund() -> None:
    decision = authorize("bob", "refund", refund(5000, approver="bob", requester="bob"), LIVE)
    assert decision == Authorization(False, "a requester cannot approve their own refund")


@pytest.mark.parametrize("amount", [None, 0, -1, True, "5", 2.5])
def test_a_refund_without_a_positive_whole_amount_is_denied(amount: object) -> None:
    decision = authorize("bob", "refund", refund(amount, requester="bob"), LIVE)
    assert not decision.allowed and "positive whole amount" in decision.reason


@settings(max_examples=100, deadline=None)
@given(
    extra=st.dictionaries(
        st.text(max_size=12).filter(lambda k: k not in ("amount", "approver", "requester")),
        st.booleans() | st.text(max_size=8) | st.integers(),
        max_size=5,
    )
)
def test_fields_the_policy_does_not_read_cannot_grant_a_refund(extra: dict[str, Any]) -> None:
    request = refund(5000, approver="dave")
    request["resource"] = {**extra, **request["resource"]}
    assert not authorize("alice", "refund", request, LIVE).allowed


# ---- everything else -------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["create", "amend", "run", "reopen"])
def test_task_actions_are_left_to_the_signers_registered_kinds(action: str) -> None:
    # The door has already checked that the signer's key may send this event kind.
    decision = authorize("anyone", action, TASK, snapshot(frozenset(), limit=0))
    assert decision.allowed
    assert decision.reason == ""


@pytest.mark.parametrize(
    "action", ["delete", "", "Refund", "APPROVE", "refund ", "approve.granted", "admin", "transfer"]
)
def test_an_action_the_policy_does_not_name_is_denied_and_named(action: str) -> None:
    decision = authorize("bob", action, refund(1, approver="bob"), LIVE)
    assert not decision.allowed
    assert decision.reason == f"unknown action {action!r}"
