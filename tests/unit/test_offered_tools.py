"""The kill path reaches the model (D117): a tool switched off is left out of the tools a window
offers, and a task whose stage offers only tools that are off is parked by the gate, as a proposal
of a disabled tool would park it, without a model call. The executor's refusal stays the last word
(tests/unit/test_tool_switches.py)."""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from loop_app import WORKING
from loop_app import app as loopy
from refund_rules import APP as REFUND
from refund_rules import AUTH, NOW, refund

from wakeful.authority.snapshot import Snapshot
from wakeful.authority.switches import ToolSwitch, field_of
from wakeful.consumers.gate import rules as gate_rules
from wakeful.examples.refund import Stage
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import NEEDS_REVIEW, Start
from wakeful.workflow import engine, switches, window
from wakeful.workflow.engine import PARKED_FROM

LOOP_TOOLS = ("find_order", "track_parcel", "refund_order", "send_notice")  # loopy's at `working`
SIGNER = Ed25519Signer("key-alice", Ed25519PrivateKey.generate())


def off(app: str, *tools: str, auth: Snapshot = AUTH) -> Snapshot:
    switched = {
        field_of(app, t): ToolSwitch(app, t, "ops-lead", "2026-12-01T20:00:00Z", f"{t} down") for t in tools
    }
    return Snapshot(approvers=auth.approvers, limit=auth.limit, tool_switches=switched)


def refund_task(amount: int) -> Checkpoint:
    cp = refund.create("t-1", "svc", "default", {"amount": amount}, auth=AUTH, now=NOW)
    assert isinstance(cp, Checkpoint)
    return cp


def working() -> Checkpoint:
    start = Start("t-1", "support-desk", "default", {"order_id": "o-1"}, AUTH, NOW)
    made = engine.create(loopy, "support", start)
    assert isinstance(made, engine.Moved) and made.checkpoint.stage == WORKING
    return made.checkpoint


@pytest.mark.parametrize(
    ("app", "switched", "listed"),
    [
        ("loopy", (), LOOP_TOOLS),  # nothing off: the stage's tools, in the app's order
        ("loopy", ("track_parcel",), ("find_order", "refund_order", "send_notice")),
        ("loopy", ("find_order", "send_notice"), ("track_parcel", "refund_order")),
        ("loopy", LOOP_TOOLS, ()),
        ("loopy", ("pay_bank",), LOOP_TOOLS),  # a tool of another stage
        ("support", ("track_parcel",), LOOP_TOOLS),  # the same name in another app
    ],
)
def test_a_window_never_offers_a_tool_switched_off_for_its_app(
    app: str, switched: tuple[str, ...], listed: tuple[str, ...]
) -> None:
    auth = off(app, *switched)
    assert tuple(t.name for t in switches.offered(loopy, WORKING, auth)) == listed
    built = window.build(loopy, working(), auth, [], {}, memory=[])
    assert tuple(t["name"] for t in built["tools"]) == listed


@pytest.mark.parametrize(
    ("switched", "waiting", "parks"),
    [
        ((), False, False),
        (("track_parcel",), False, False),  # the model is offered the other three
        (LOOP_TOOLS[:3], False, False),
        (LOOP_TOOLS, False, True),  # nothing left to offer: no model call, a person
        (LOOP_TOOLS, True, False),  # a task that waits is asked nothing anyway
    ],
)
def test_only_a_stage_whose_every_tool_is_off_parks_its_task(
    switched: tuple[str, ...], waiting: bool, parks: bool
) -> None:
    cp = working()
    if waiting:
        pending = engine.create(REFUND, "refund", Start("t-2", "svc", "default", {"amount": 2500}, AUTH, NOW))
        assert isinstance(pending, engine.Moved) and pending.checkpoint.execution.pending_waits
        cp = cp.model_copy(update={"execution": pending.checkpoint.execution})
    found = switches.stage_off(loopy, cp, off("loopy", *switched))
    assert (found is not None) is parks
    if found is not None:
        assert found.stage == WORKING and [s.tool for s in found.switches] == list(LOOP_TOOLS)
        assert found.reason.startswith("every tool of stage working is disabled, so no model was asked")
        for tool in LOOP_TOOLS:
            assert f"tool {tool} of app loopy is disabled" in found.reason and f"{tool} down" in found.reason


def test_one_tool_off_parks_with_the_words_the_executor_refuses_its_step_with() -> None:
    auth = off("refund", "refund")
    found = switches.stage_off(REFUND, refund_task(300), auth)
    assert found is not None
    refused = switches.refused("refund", "refund", None, auth)
    assert refused is not None and found.reason == refused.reason


@pytest.mark.parametrize(("switched", "stage"), [((), Stage.READY), (("refund",), NEEDS_REVIEW)])
def test_a_move_onto_a_stage_whose_tools_are_all_off_lands_parked_for_a_person(
    switched: tuple[str, ...], stage: str
) -> None:
    cp = refund_task(2500)
    assert cp.stage == Stage.AWAITING_APPROVAL
    event = sign_event(SIGNER, events.APPROVE, {"version": 1}, task_id="t-1")
    auth = off("refund", *switched)
    ruled = gate_rules.decide(REFUND, cp, event, "alice", tenant="default", auth=auth, now=NOW)
    assert isinstance(ruled, engine.Moved), ruled  # the approval is applied either way: accepted
    assert ruled.checkpoint.stage == stage
    if switched:
        assert ruled.checkpoint.external_refs[PARKED_FROM] == Stage.READY  # a reopen goes back there
        assert "tool refund of app refund is disabled" in str(ruled.checkpoint.business.last_refusal)


@pytest.mark.parametrize(("switched", "parked"), [((), False), (("refund",), True)])
def test_a_wake_that_would_ask_the_model_at_a_stage_whose_tools_are_all_off_parks_the_task(
    switched: tuple[str, ...], parked: bool
) -> None:
    ready = refund_task(300)
    assert ready.stage == Stage.READY
    ruled = gate_rules.decide(
        REFUND, ready, None, "", tenant="default", auth=off("refund", *switched), now=NOW
    )
    if not parked:
        assert ruled is None  # the gate follows up with a proposal request
        return
    assert isinstance(ruled, engine.ForReview) and ruled.checkpoint.stage == NEEDS_REVIEW
    assert "tool refund of app refund is disabled" in ruled.reason and "refund down" in ruled.reason


def test_a_create_whose_first_stage_offers_only_tools_that_are_off_is_stored_parked() -> None:
    start = Start("t-1", "support-desk", "default", {"order_id": "o-1"}, AUTH, NOW)
    made = engine.create(loopy, "support", start)
    assert isinstance(made, engine.Moved)
    auth = off("loopy", *LOOP_TOOLS)
    parked = gate_rules.parked_move(loopy, made, auth)
    assert parked.checkpoint.stage == NEEDS_REVIEW and parked.checkpoint.external_refs[PARKED_FROM] == WORKING
    assert gate_rules.parked_move(loopy, made, off("loopy", "track_parcel")) is made
