"""A tenant's in-flight limit as pure rules (workflow/limits.py, D108): which record holds a
tenant, what a damaged record holds it to, which tasks take a slot, and when a change gives one
back or takes one again. What the gate and the timer do with them, on a real Redis:
tests/test_fair_gate.py; on worker processes: tests/test_fair_stack.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from wakeful.authority.limit_store import (
    DEFAULT_SCOPE,
    checked_scope,
    counting,
    encode,
    scope_of,
    workflow_scope,
)
from wakeful.authority.snapshot import Snapshot
from wakeful.core.errors import ConfigError
from wakeful.examples.refund import app as refund_app
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import Start
from wakeful.sdk.workflow import CANCELLED, CANCELLING, CLOSED, NEEDS_REVIEW, QUARANTINED, Refuse
from wakeful.workflow import engine, limits

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=1000)


def record(slots: int) -> str:
    return encode(slots, by="ops-lead", at="2030-06-01T09:00:00Z", reason="a flood")


def task(stage: str, tenant: str = "acme") -> Checkpoint:
    made = engine.create(refund_app, "refund", Start("t-1", "desk", tenant, {"amount": 5}, AUTH, NOW))
    assert not isinstance(made, Refuse)
    cp = made.checkpoint
    return cp.model_copy(update={"business": cp.business.model_copy(update={"stage": stage})})


@pytest.mark.parametrize(
    ("stored", "tenant", "held_to"),
    [
        ({}, "acme", None),  # no record: no limit, nothing counted, as before limits
        ({scope_of("acme"): record(3)}, "acme", 3),
        ({scope_of("acme"): record(3)}, "other", None),  # another tenant's limit is not yours
        ({DEFAULT_SCOPE: record(5)}, "acme", 5),
        ({DEFAULT_SCOPE: record(5), scope_of("acme"): record(50)}, "acme", 50),  # its own outranks
        ({DEFAULT_SCOPE: record(5), scope_of("acme"): record(2)}, "other", 5),
    ],
)
def test_a_tenants_own_limit_outranks_the_default_and_no_record_is_no_limit(
    stored: dict[str, str], tenant: str, held_to: int | None
) -> None:
    found = limits.applying(stored, tenant)
    assert (found.max_in_flight if found is not None else None) == held_to


@pytest.mark.parametrize(
    "raw",
    [
        "not json",
        "[3]",
        "{}",
        '{"max_in_flight": 0}',
        '{"max_in_flight": -4}',
        '{"max_in_flight": "3"}',
        '{"max_in_flight": true}',
        '{"max_in_flight": 2.5}',
        '{"max_in_flight": null}',
        '{"max_in_flight": 10000001}',
        b"\xff\xfe",
    ],
)
def test_an_unreadable_limit_holds_at_one_never_zero(raw: str | bytes) -> None:
    for stored in ({scope_of("acme"): raw}, {DEFAULT_SCOPE: raw}):
        found = limits.applying(stored, "acme")  # type: ignore[arg-type]
        assert found is not None, "a damaged record must never lift a limit"
        assert found.max_in_flight == limits.DAMAGED == 1 and found.damaged


def test_a_record_reads_back_as_it_was_written() -> None:
    found = limits.parse(scope_of("acme"), record(7))
    assert (found.max_in_flight, found.by, found.reason, found.damaged) == (7, "ops-lead", "a flood", "")


@pytest.mark.parametrize("slots", [0, -1, 1_000_001, True])
def test_a_limit_that_would_let_nothing_in_or_lift_itself_is_refused_when_set(slots: int) -> None:
    with pytest.raises(ConfigError):
        encode(slots, by="ops-lead", at="", reason="")


@pytest.mark.parametrize(
    ("stage", "occupies"),
    [
        ("received", True),
        ("awaiting_approval", True),
        ("ready", True),
        (CANCELLING, True),  # its undos are still to run
        (CLOSED, False),
        (CANCELLED, False),
        (NEEDS_REVIEW, False),  # parked for a person
        (QUARANTINED, False),
    ],
)
def test_a_task_takes_a_slot_until_it_ends_or_is_parked(stage: str, occupies: bool) -> None:
    assert limits.occupies(refund_app, task(stage)) is occupies


def test_a_task_of_a_workflow_the_app_lacks_keeps_its_slot() -> None:
    stray = task("ready")
    stray = stray.model_copy(update={"business": stray.business.model_copy(update={"workflow": "gone"})})
    assert limits.occupies(refund_app, stray)  # a leak over-counts: it never lets more in


@pytest.mark.parametrize(
    ("stored", "stage", "frees"),
    [
        ({scope_of("acme"): record(2)}, CLOSED, True),
        ({scope_of("acme"): record(2)}, "ready", False),
        ({scope_of("other"): record(2)}, CLOSED, True),  # acme's limit lifted since its task took a slot
        ({}, CLOSED, False),  # nothing stored: nothing counted, nothing to give back
    ],
)
def test_a_slot_is_given_back_when_its_task_ends_while_any_limit_is_stored(
    stored: dict[str, str], stage: str, frees: bool
) -> None:
    assert limits.frees(refund_app, task(stage), stored) is frees


@pytest.mark.parametrize(
    ("was", "now", "stored", "retakes"),
    [
        (NEEDS_REVIEW, "ready", {scope_of("acme"): record(1)}, True),  # a person let it go on
        (NEEDS_REVIEW, "ready", {}, False),
        ("awaiting_approval", "ready", {scope_of("acme"): record(1)}, False),  # it held its slot
        (NEEDS_REVIEW, CLOSED, {scope_of("acme"): record(1)}, False),
    ],
)
def test_a_parked_task_a_person_lets_go_on_is_counted_again(
    was: str, now: str, stored: dict[str, str], retakes: bool
) -> None:
    assert limits.retakes(refund_app, was, task(now), stored) is retakes


WORKFLOW = workflow_scope("refund", "refund")


@pytest.mark.parametrize(
    ("stored", "held_to"),
    [
        ({}, None),
        ({WORKFLOW: record(2)}, 2),
        ({workflow_scope("refund", "other"): record(2)}, None),  # another workflow's
        ({workflow_scope("shop", "refund"): record(2)}, None),  # another app's workflow of the name
        ({DEFAULT_SCOPE: record(5)}, None),  # a tenant's limit is not a workflow's
        ({WORKFLOW: "not json"}, limits.DAMAGED),  # damaged: never lifted
    ],
)
def test_a_workflows_limit_holds_its_own_workflow_of_its_own_app_only(
    stored: dict[str, str], held_to: int | None
) -> None:
    found = limits.of_workflow(stored, "refund", "refund")
    assert (found.max_in_flight if found is not None else None) == held_to


def test_a_workflows_limit_counts_tasks_and_takes_a_parked_task_back_when_it_alone_is_stored() -> None:
    stored = {WORKFLOW: record(2)}
    assert counting(stored) and limits.applying(stored, "acme") is None  # no tenant's limit
    assert limits.frees(refund_app, task(CLOSED), stored)
    assert limits.retakes(refund_app, NEEDS_REVIEW, task("ready"), stored)
    every = limits.every({**stored, DEFAULT_SCOPE: record(9), scope_of("acme"): record(3)})
    assert [r.scope for r in every] == [DEFAULT_SCOPE, scope_of("acme"), WORKFLOW]


@pytest.mark.parametrize(
    ("scope", "ok"),
    [
        ("workflow:refund:refund", True),
        ("workflow:refund", False),
        ("workflow:a:b:c", False),
        ("workflow:a:b c", False),
    ],
)
def test_a_workflows_scope_names_one_workflow_of_one_app(scope: str, ok: bool) -> None:
    if ok:
        assert checked_scope(scope) == scope
    else:
        with pytest.raises(ConfigError) as refused:
            checked_scope(scope)
        assert refused.value.setting == "--workflow"
