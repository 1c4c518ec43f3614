"""Which task a purge takes (workflow/retention.py) and what an app may declare (sdk/retention.py):
a finished task goes only once its last change is older than both the operator's date and the
app's retention; a task that waits, is parked for review or is quarantined never goes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.core.errors import ConfigError
from wakeful.examples.refund import app as refund_app
from wakeful.examples.tutorial import rooms
from wakeful.operate import retention as retention_sweeps
from wakeful.sdk import App, Retention
from wakeful.workflow.retention import (
    Seen,
    cutoff,
    finished_stages,
    lapsed,
    memory_lapsed,
    seen_from,
    verdict,
)

pytestmark = pytest.mark.timeout(60)

NOW = datetime(2031, 3, 1, tzinfo=UTC)
KEEP = timedelta(days=30)
FINISHED = finished_stages(refund_app)


def seen(stage: str, age: timedelta, *, workflow: str = "refund", quarantined: bool = False) -> Seen:
    return Seen("t-1", workflow, stage, NOW - age, quarantined)


def test_the_refunds_finished_stages_are_closed_and_cancelled_never_review_quarantine_or_cancelling() -> None:
    assert {"refund": frozenset({"closed", "cancelled"})} == FINISHED


@pytest.mark.parametrize(
    ("case", "before", "expected"),
    [
        (seen("closed", timedelta(days=60)), NOW, "purge"),
        (seen("closed", timedelta(days=60)), NOW - timedelta(days=90), "recent"),  # not before the date
        (seen("closed", timedelta(days=29)), NOW, "recent"),  # inside the retention
        (seen("closed", KEEP), NOW, "recent"),  # exactly at the cutoff stays
        (seen("closed", timedelta(days=60), quarantined=True), NOW, "quarantined"),
        (seen("awaiting_approval", timedelta(days=400)), NOW, "not_finished"),
        (seen("received", timedelta(days=400)), NOW, "not_finished"),
        (seen("needs_review", timedelta(days=400)), NOW, "not_finished"),
        (seen("quarantined", timedelta(days=400)), NOW, "not_finished"),
        (seen("closed", timedelta(days=400), workflow="another"), NOW, "unknown_workflow"),
    ],
)
def test_which_task_goes_when(case: Seen, before: datetime, expected: str) -> None:
    assert verdict(case, FINISHED, before, NOW, KEEP) == expected


def test_a_workflows_own_terminal_stage_counts_as_finished() -> None:
    app = App(name="rooms", workflows=[rooms])
    done = finished_stages(app)[rooms.name]
    terminal = {s for targets in rooms.stages.values() for s in targets if not rooms.stages.get(s)}
    assert done == (terminal | {"closed", "cancelled"}) - {"needs_review", "quarantined"}


@given(
    age_days=st.integers(min_value=0, max_value=2000),
    before_days=st.integers(min_value=0, max_value=2000),
    keep_days=st.integers(min_value=1, max_value=400),
    stage=st.sampled_from(
        ["closed", "received", "awaiting_approval", "ready", "needs_review", "quarantined"]
    ),
    quarantined=st.booleans(),
)
def test_a_task_goes_exactly_when_finished_unmarked_and_older_than_both_cutoffs(
    age_days: int, before_days: int, keep_days: int, stage: str, quarantined: bool
) -> None:
    task = seen(stage, timedelta(days=age_days), quarantined=quarantined)
    before, keep = NOW - timedelta(days=before_days), timedelta(days=keep_days)
    goes = verdict(task, FINISHED, before, NOW, keep) == "purge"
    assert goes == (stage == "closed" and not quarantined and age_days > keep_days and age_days > before_days)
    if goes:  # a later date, or a shorter retention, takes it too
        assert verdict(task, FINISHED, before + timedelta(days=1), NOW, keep) == "purge"
        assert verdict(task, FINISHED, before, NOW, keep - timedelta(hours=1)) == "purge"
    assert cutoff(before, NOW, keep) <= before


def test_a_summary_that_is_not_one_is_never_judged() -> None:
    assert seen_from({"stage": "closed"}, "t-1") is None
    assert seen_from({"stage": "closed", "workflow": "refund", "updated_at": "not a time"}, "t-1") is None
    naive = {"stage": "closed", "workflow": "refund", "updated_at": "2030-01-01T00:00:00"}
    assert seen_from(naive, "t-1") is None
    good = {**naive, "updated_at": "2030-01-01T00:00:00+00:00"}
    assert seen_from(good, "t-1") == Seen("t-1", "refund", "closed", datetime(2030, 1, 1, tzinfo=UTC))


def test_an_app_declares_retention_and_every_problem_is_named_at_once() -> None:
    assert App(name="rooms", workflows=[rooms]).retention == Retention()  # the runtime's defaults
    custom = Retention(closed_tasks=timedelta(days=7), memory=timedelta(days=365))
    assert App(name="rooms", workflows=[rooms], retention=custom).retention.closed_tasks == timedelta(days=7)
    bad = Retention(
        closed_tasks=timedelta(minutes=5),
        receipts=timedelta(days=30),
        evidence=timedelta(days=365),
        memory=3600,  # type: ignore[arg-type]
    )
    with pytest.raises(ConfigError) as caught:
        App(name="rooms", workflows=[rooms], retention=bad)
    said = str(caught.value)
    assert "closed_tasks 0:05:00 is under the floor of 1 day" in said
    assert "receipts 30 days, 0:00:00 is over the runtime's TTL of 7 days" in said
    assert "evidence 365 days, 0:00:00 is over the runtime's TTL of 90 days" in said
    assert "memory must be a timedelta, not int" in said


DAY_MS = 86_400_000


@pytest.mark.parametrize(
    ("left_ms", "keep", "expected"),
    [
        (7 * DAY_MS, timedelta(days=1), False),  # just written
        (6 * DAY_MS, timedelta(days=1), False),  # a day old: not older than a day
        (6 * DAY_MS - 1, timedelta(days=1), True),
        (1, timedelta(days=6), True),
        (-1, timedelta(hours=1), False),  # no TTL: never taken by age
    ],
)
def test_a_receipt_goes_once_older_than_the_app_keeps_receipts(
    left_ms: int, keep: timedelta, expected: bool
) -> None:
    assert lapsed(left_ms, 7 * DAY_MS, keep) is expected


@pytest.mark.parametrize(
    ("age", "expires_in", "keep", "expected"),
    [
        (timedelta(days=1), timedelta(days=10), None, False),
        (timedelta(days=1), timedelta(0), None, True),  # at its own expiry
        (timedelta(days=400), timedelta(days=10), None, False),  # None: its own expiry only
        (timedelta(days=400), timedelta(days=10), timedelta(days=365), True),
        (timedelta(days=10), timedelta(days=10), timedelta(days=365), False),
    ],
)
def test_a_memory_record_goes_at_its_expiry_or_past_the_apps_memory_retention(
    age: timedelta, expires_in: timedelta, keep: timedelta | None, expected: bool
) -> None:
    assert memory_lapsed(NOW - age, NOW + expires_in, NOW, keep) is expected


@pytest.mark.parametrize(
    ("tagged", "tenant", "owned"),
    [
        ("t-1", "default", True),
        ("acme.t-1", "acme", True),
        ("acme.t-1", "default", False),
        ("acme.b.t-1", "acme.b", True),
        ("acme.b.t-1", "acme", False),  # another tenant whose name starts with this one's
        ("acme." + "a" * 64, "acme", True),  # an evidence document's tag
        ("default." + "a" * 64, "acme", False),
    ],
)
def test_a_sweep_scoped_to_a_tenant_reaches_only_its_keys(tagged: str, tenant: str, owned: bool) -> None:
    assert retention_sweeps._of_tenant(tagged, tenant) is owned


def test_a_task_that_waits_never_goes_whatever_its_stage() -> None:
    from wakeful.workflow.retention import Seen, seen_from, verdict

    at = datetime(2026, 1, 1, tzinfo=UTC)
    waiting = Seen("t-1", "refund", "closed", at, waits=1)
    later = datetime(2026, 12, 1, tzinfo=UTC)
    assert verdict(waiting, {"refund": frozenset({"closed"})}, later, later, timedelta(days=1)) == "waiting"
    summary = {"workflow": "refund", "stage": "closed", "updated_at": at.isoformat(), "waits": [{"for": "x"}]}
    assert seen_from(summary, "t-1") == waiting
