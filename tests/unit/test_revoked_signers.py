"""A task whose signer was revoked meets the rule its app declares: `review` (the default) parks
it for a person at its next wake, `continue` lets it go on; a person's reopen clears the
revocations it was parked for, and only a later revocation of the same signer parks it again. A
damaged revocation record still revokes."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from refund_rules import APP, AUTH, refund

from wakeful.authority.revocations import Revocation, record, revoked_from
from wakeful.consumers.gate import rules as gate_rules
from wakeful.core.errors import ConfigError
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import App
from wakeful.workflow import engine, revoked

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SIGNER = Ed25519Signer("key-x", Ed25519PrivateKey.generate())


def revoking(*principals: str, at: str = "2026-12-01T11:00:00+00:00") -> Any:
    found = {f"default/{p}": Revocation(p, f"key-{p}", "ops-lead", "key leaked", at) for p in principals}
    return dataclasses.replace(AUTH, revoked=found)


def waiting() -> Checkpoint:
    cp = refund.create("t-1", "svc-refunds", "default", {"amount": 2500}, auth=AUTH, now=NOW)
    assert isinstance(cp, Checkpoint)
    return cp


def wake(app: App, cp: Checkpoint, auth: Any, kind: str | None = None, who: str = "alice") -> Any:
    ev = (
        sign_event(SIGNER, kind, {"version": 1} if kind == events.APPROVE else {}, task_id="t-1")
        if kind
        else None
    )
    return gate_rules.decide(app, cp, ev, who, tenant="default", auth=auth, now=NOW)


def test_a_task_whose_requester_was_revoked_is_parked_for_a_person_at_its_next_wake() -> None:
    ruled = wake(APP, waiting(), revoking("svc-refunds"), events.APPROVE)
    assert isinstance(ruled, engine.ForReview)
    assert ruled.checkpoint.stage == "needs_review"
    assert "signer svc-refunds (key-svc-refunds) was revoked by ops-lead" in ruled.reason
    assert "key leaked" in ruled.reason


def test_an_app_that_declares_continue_lets_the_task_go_on() -> None:
    going = dataclasses.replace(APP, revoked_signer="continue")
    ruled = wake(going, waiting(), revoking("svc-refunds"), events.APPROVE)
    assert isinstance(ruled, engine.Moved) and ruled.checkpoint.stage == "ready"


def test_a_revoked_approver_parks_the_task_it_approved() -> None:
    approved = wake(APP, waiting(), AUTH, events.APPROVE)
    assert isinstance(approved, engine.Moved)
    assert revoked.parks(APP, approved.checkpoint, revoking("alice")) is not None
    assert revoked.parks(APP, approved.checkpoint, revoking("bob")) is None


def test_a_reopen_clears_what_the_task_was_parked_for_and_a_later_revocation_parks_it_again() -> None:
    auth = revoking("svc-refunds")
    parked = wake(APP, waiting(), auth, events.APPROVE)
    assert isinstance(parked, engine.ForReview)
    reopened = wake(APP, parked.checkpoint, auth, events.REOPEN, who="ops-lead")
    assert isinstance(reopened, engine.Moved), reopened
    assert reopened.checkpoint.external_refs[revoked.CLEARED + "svc-refunds"] == "2026-12-01T11:00:00+00:00"
    assert revoked.parks(APP, reopened.checkpoint, auth) is None
    assert revoked.parks(APP, reopened.checkpoint, revoking("svc-refunds", at="2026-12-02T09:00:00+00:00"))


def test_no_revocation_changes_nothing() -> None:
    cp = waiting()
    assert revoked.parks(APP, cp, AUTH) is None and revoked.cleared(cp, cp, AUTH) is cp


def test_another_tenants_principal_of_the_same_name_is_not_revoked() -> None:
    found = {"acme/svc-refunds": Revocation("svc-refunds", "key-x", "ops", "leaked", "t")}
    assert revoked.parks(APP, waiting(), dataclasses.replace(AUTH, revoked=found)) is None


def test_a_reopen_clears_only_the_revocations_the_task_was_parked_for() -> None:
    parked = engine.review(waiting(), "the deadline passed: escalated to ops-lead")
    reopened = wake(APP, parked, revoking("svc-refunds"), events.REOPEN, who="ops-lead")
    assert isinstance(reopened, engine.Moved), reopened
    assert revoked.parks(APP, reopened.checkpoint, revoking("svc-refunds")) is not None


@pytest.mark.parametrize("raw", [b"{", b"[]", b"null"])
def test_a_damaged_revocation_still_revokes(raw: bytes) -> None:
    found = revoked_from({b"default/svc-refunds": raw, b"default/bob": record("key-bob", "ops", "left", "t")})
    assert set(found) == {"default/svc-refunds", "default/bob"}
    assert "unreadable" in found["default/svc-refunds"].reason and found["default/bob"].principal == "bob"


@pytest.mark.parametrize(("by", "reason", "said"), [("", "x", "--by"), ("ops", "", "--reason")])
def test_a_revocation_says_who_and_why(by: str, reason: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        record("key-x", by, reason, "t")


def test_an_app_rule_that_is_not_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="revoked_signer='maybe'"):
        dataclasses.replace(APP, revoked_signer="maybe")
