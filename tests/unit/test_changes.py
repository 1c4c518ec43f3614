"""An authority change's digest (D124), without servers: it names exactly one change of one app,
made over one state, and no release."""

from __future__ import annotations

import hashlib

import pytest

from wakeful.workflow import changes
from wakeful.workflow.changes import APPROVAL_LIMIT, POLICY, Change, text_digest

LIMIT = Change("refund", APPROVAL_LIMIT, {"amount": 5000, "from": 1000})


@pytest.mark.parametrize(
    "other",
    [
        Change("expenses", APPROVAL_LIMIT, {"amount": 5000, "from": 1000}),  # another app
        Change("refund", APPROVAL_LIMIT, {"amount": 5001, "from": 1000}),  # another amount
        Change("refund", APPROVAL_LIMIT, {"amount": 5000, "from": 5000}),  # the same, later: a replay
        Change("refund", POLICY, {"amount": 5000, "from": 1000}),  # another kind
    ],
)
def test_a_sign_off_of_one_change_signs_no_other(other: Change) -> None:
    assert other.digest() != LIMIT.digest()


def test_a_change_is_named_the_same_whatever_order_its_fields_come_in() -> None:
    assert Change("refund", APPROVAL_LIMIT, {"from": 1000, "amount": 5000}).digest() == LIMIT.digest()


def test_a_change_digest_is_never_a_release_digest_of_the_same_bytes() -> None:
    assert LIMIT.digest() != hashlib.sha256(LIMIT.canonical()).hexdigest()  # its own domain
    assert changes.DOMAIN.startswith(b"wakeful.authority.change")


def test_an_unknown_kind_of_change_is_refused() -> None:
    with pytest.raises(ValueError, match="a change is one of"):
        Change("refund", "tenant_limit", {})


def test_a_change_says_what_it_sets_and_a_policy_change_names_its_text() -> None:
    assert LIMIT.said() == "approval limit of app refund: amount 5000, from 1000"
    assert text_digest("permit(principal, action, resource);") != text_digest(
        "forbid(principal, action, resource);"
    )
