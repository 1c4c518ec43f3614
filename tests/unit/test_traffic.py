"""The apps' traffic generators as pure code: each planned event is one the app's workflow takes,
and an app without traffic is told in one line what to add."""

from __future__ import annotations

import dataclasses
import random
import re
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.authority.snapshot import Snapshot
from wakeful.bench.traffic import Traffic, load_traffic, split
from wakeful.core.errors import ConfigError
from wakeful.examples import onboarding as onb
from wakeful.examples import refund, shop
from wakeful.examples import support as sup
from wakeful.examples.refund_traffic import LIMIT
from wakeful.examples.support_rules import remedy_due
from wakeful.schemas import events
from wakeful.sdk import App, Context, Next, Start

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=LIMIT)


def test_an_app_without_traffic_is_told_in_one_line_what_to_add() -> None:
    bare = dataclasses.replace(refund.app, traffic=None)
    with pytest.raises(ConfigError) as caught:
        load_traffic(bare)
    said = str(caught.value)
    assert "\n" not in said and "traffic=" in said and "wakeful.bench.traffic.Traffic" in said


def test_a_traffic_that_is_not_a_traffic_is_refused_by_name() -> None:
    wrong = dataclasses.replace(refund.app, traffic="wakeful.examples.refund:app")
    with pytest.raises(ConfigError, match=re.escape("is App, not a wakeful.bench.traffic.Traffic")):
        load_traffic(wrong)


@pytest.mark.parametrize("app", [refund.app, onb.app, sup.app], ids=lambda a: a.name)
def test_each_bundled_app_names_a_traffic(app: App) -> None:
    assert isinstance(load_traffic(app), Traffic)


@given(st.integers(0, 5000), st.floats(0, 1))
def test_split_puts_the_share_on_the_second_path_spread_evenly(total: int, share: float) -> None:
    chosen = split(total, share)
    assert len(chosen) == total and sum(chosen) == int(total * share)


def start(payload: dict[str, object]) -> Start:
    return Start("t-1", "svc-refunds", "default", payload, AUTH, NOW)


@given(st.integers(0, 2**32), st.booleans())
def test_a_planned_refund_waits_for_an_approval_exactly_when_its_second_path_sends_one(
    seed: int, second: bool
) -> None:
    plan = load_traffic(refund.app).plan("t-1", random.Random(seed), second)
    create, *rest = plan.sends
    assert create.kind == events.CREATE
    started = refund.start(start(create.payload))
    assert isinstance(started, Next)
    assert (started.stage == refund.AWAITING_APPROVAL) == second
    assert [s.kind for s in rest] == ([events.APPROVE] if second else [])
    assert (plan.settles, plan.effects, plan.arrange) == ("closed", 1, None)


def ctx(
    stage: str, state: onb.Onboarding, principal: str, payload: dict[str, object]
) -> Context[onb.Onboarding]:
    return Context(
        task_id="t-1", stage=stage, version=1, state=state, requester="svc-refunds", tenant="default",
        approval=None, waits=(), refs={}, auth=AUTH, now=NOW, principal=principal, payload=payload,
    )  # fmt: skip


@given(st.integers(0, 2**32), st.booleans())
def test_a_planned_onboarding_is_signed_by_the_right_principals_and_reaches_registering(
    seed: int, second: bool
) -> None:
    plan = load_traffic(onb.app).plan("t-1", random.Random(seed), second)
    create, signature, verification = plan.sends
    started = onb.start(start(create.payload))
    assert isinstance(started, Next) and started.stage == onb.AWAITING_SIGNATURE
    assert any(label.startswith("document.") for label in started.evidence)
    accept = onb.onboarding.events
    assert (signature.kind, f"principal:{signature.principal}") == (onb.SIGNED, *accept[onb.SIGNED].signers)
    kind, who = verification.kind, f"principal:{verification.principal}"
    assert (kind, who) == (onb.VERIFIED, *accept[onb.VERIFIED].signers)
    state = started.state
    assert state is not None
    signed = onb.signed(
        ctx(onb.AWAITING_SIGNATURE, state, f"principal:{signature.principal}", signature.payload)
    )
    assert isinstance(signed, Next) and signed.stage == onb.AWAITING_BANK_DETAILS and signed.state
    verified = onb.verified(ctx(onb.AWAITING_BANK_DETAILS, signed.state, who, verification.payload))
    assert isinstance(verified, Next) and verified.stage == onb.REGISTERING
    assert verified.state is not None and verified.state.account == verification.payload["account"]
    assert plan.settles == ("needs_review" if second else "closed") and plan.effects == 2
    assert (plan.arrange is not None) == second


class Stocked:
    """An admin client that keeps what a plan stocks in the shop (SETs, through a pipeline)."""

    def __init__(self) -> None:
        self.kept: dict[str, bytes] = {}

    def pipeline(self, transaction: bool = True) -> Stocked:
        return self

    def set(self, key: str, value: bytes) -> None:
        self.kept[key] = value

    def execute(self) -> list[object]:
        return []


@given(st.integers(0, 2**32), st.booleans())
def test_a_planned_ticket_stocks_its_order_and_waits_for_an_approval_exactly_on_its_second_path(
    seed: int, second: bool
) -> None:
    plan = load_traffic(sup.app).plan("t-1", random.Random(seed), second)
    create, *rest = plan.sends
    started = sup.start(start(create.payload))
    assert isinstance(started, Next) and started.state is not None
    assert (started.stage == sup.AWAITING_APPROVAL) == second
    assert [s.kind for s in rest] == ([events.APPROVE] if second else [])
    admin = Stocked()
    assert plan.arrange is not None
    plan.arrange(admin)  # type: ignore[arg-type]  # the two calls a stock makes
    order = shop.Order.decode(admin.kept[shop.order_key(started.state.order_id)])
    tracking = shop.Tracking.decode(admin.kept[shop.parcel_key(order.parcel)])
    assert (order.amount, order.currency) == (started.state.amount, started.state.currency)
    owed = remedy_due(tracking.status, order.in_stock)
    assert (plan.settles, plan.effects) == ("closed", 2 if owed else 1)
