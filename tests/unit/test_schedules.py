"""Schedules' rules (workflow/schedules.py): the stored rule, the ticks owed from the newest one
published, and the one task id and event id each tick has, whichever timer publishes it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.core import ids
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.schemas.schedule import ScheduleRecord
from wakeful.workflow import schedules

pytestmark = pytest.mark.unit
SINCE = datetime(2030, 6, 1, 9, 0, 0, 250_000, tzinfo=UTC)


def record(rule: str, catch_up: str = "all", *, paused: bool = False) -> ScheduleRecord:
    return ScheduleRecord(
        name="nightly",
        rule=rule,
        workflow="refund",
        catch_up=catch_up,
        by="ops-lead",
        since=SINCE,
        paused=paused,
    )


@pytest.mark.parametrize(
    ("cron", "every", "stored"),
    [("0 3 * * *", None, "cron:0 3 * * *"), (None, "1h30m", "every:5400"), (None, "1s", "every:1")],
)
def test_a_schedule_stores_exactly_one_rule_checked(cron: str | None, every: str | None, stored: str) -> None:
    assert schedules.rule_text(cron, every) == stored


@pytest.mark.parametrize(
    ("cron", "every", "said"),
    [
        (None, None, "exactly one"),
        ("* * * * *", "1m", "exactly one"),
        ("0 25 * * *", None, "hour"),
        (None, "0s", "1 second"),
    ],
)
def test_a_wrong_rule_is_refused_saying_what_is_wrong(cron: str | None, every: str | None, said: str) -> None:
    with pytest.raises(ValueError, match=said):
        schedules.rule_text(cron, every)


def test_an_interval_ticks_from_its_since_to_the_second_and_owes_nothing_before_it() -> None:
    every = record("every:60")
    now = SINCE + timedelta(minutes=3, seconds=30)
    anchor = SINCE.replace(microsecond=0)
    assert schedules.due(every, None, now) == [anchor + timedelta(minutes=m) for m in (1, 2, 3)]
    assert schedules.due(every, anchor + timedelta(minutes=2), now) == [anchor + timedelta(minutes=3)]
    assert schedules.due(every, SINCE - timedelta(days=9), now)[0] > SINCE  # an older mark owes nothing older
    assert schedules.next_tick(every, anchor + timedelta(minutes=3)) == anchor + timedelta(minutes=4)


def test_a_paused_schedule_owes_no_tick_and_the_policy_keeps_what_it_says() -> None:
    now = SINCE + timedelta(hours=5)
    assert schedules.due(record("every:60", paused=True), None, now) == []
    assert len(schedules.due(record("every:3600", "one"), None, now)) == 1
    assert schedules.due(record("every:3600", "skip"), None, now + timedelta(minutes=30)) == []


@given(
    tick=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2200, 1, 1)).map(
        lambda d: d.replace(microsecond=0, tzinfo=UTC)
    )
)
def test_each_tick_has_one_task_id_and_one_event_id_both_valid_and_the_task_id_says_its_tick(
    tick: datetime,
) -> None:
    name = "a" * 40  # the longest name
    task, event = schedules.task_id(name, tick), schedules.event_id(name, tick)
    assert re.fullmatch(ids.OUTSIDE_TASK_ID, task) and re.fullmatch(ids.EVENT_ID, event), (task, event)
    assert schedules.tick_of(task, {name}) == (name, tick)
    assert schedules.tick_of(task, {"other"}) is None
    assert (task, event) == (schedules.task_id(name, tick), schedules.event_id(name, tick))


def test_another_tenants_ticks_are_signed_by_its_own_scheduler_a_valid_principal() -> None:
    assert schedules.signer_of(DEFAULT_TENANT) == "scheduler"
    assert schedules.signer_of("acme.eu") == "scheduler@acme.eu"
    assert ids.KEY_ID_RE.fullmatch(f"key-{schedules.signer_of('a' * 64)}")  # any tenant's name fits


def test_a_schedule_stored_before_tenants_reads_as_the_default_tenants_and_is_stored_as_it_was() -> None:
    old = ScheduleRecord.decode(
        b'{"schema_version":1,"name":"nightly","rule":"every:60","workflow":"refund","payload":{},'
        b'"catch_up":"one","by":"ops-lead","since":"2026-12-01T00:00:00Z","paused":false}'
    )
    assert old.tenant == DEFAULT_TENANT
    assert b"tenant" not in old.encode()  # a timer of the release before reads it still
    acme = ScheduleRecord.model_validate({**old.model_dump(), "tenant": "acme"})
    assert ScheduleRecord.decode(acme.encode()).tenant == "acme"
    with pytest.raises(ValueError):
        ScheduleRecord.model_validate({**old.model_dump(), "tenant": "no spaces"})
