"""Cron rules on a zone's wall clock (core/cron.py, `CRON_TZ=<zone> ` before the fields): a tick
is at the wall time the fields name, whatever the zone's offset that day; on the day its clocks go
forward a wall time in the gap fires once, at the instant it names with the offset before; on the
day they go back a wall time read twice fires once, at its first occurrence; ticks only ever move
forward."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.core.cron import due, next_tick, parse_cron

pytestmark = pytest.mark.unit
BERLIN = "CRON_TZ=Europe/Berlin"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def ticks(expr: str, after: str, until: str) -> list[str]:
    rule, out, t = parse_cron(expr), [], utc(after)
    while (t := next_tick(rule, t)) <= utc(until):
        out.append(t.strftime("%m-%dT%H:%M"))
    return out


@pytest.mark.parametrize(
    ("expr", "after", "tick"),
    [
        (f"{BERLIN} 0 9 * * *", "2026-12-06T00:00", "2026-12-06T08:00"),  # CET, UTC+1
        (f"{BERLIN} 0 9 * * *", "2026-07-01T00:00", "2026-07-01T07:00"),  # CEST, UTC+2
        ("CRON_TZ=America/New_York 30 17 * * fri", "2026-12-06T00:00", "2026-12-11T22:30"),
        ("CRON_TZ=UTC 0 9 * * *", "2026-12-06T00:00", "2026-12-06T09:00"),
        ("0 9 * * *", "2026-12-06T00:00", "2026-12-06T09:00"),  # no zone: UTC, as before
        ("CRON_TZ=Asia/Kolkata 0 0 1 * *", "2026-12-06T00:00", "2026-12-31T18:30"),  # UTC+5:30
    ],
)
def test_a_zoned_rule_ticks_at_the_wall_time_its_fields_name(expr: str, after: str, tick: str) -> None:
    assert next_tick(parse_cron(expr), utc(after)) == utc(tick)


def test_a_wall_time_the_clocks_skip_fires_once_at_the_instant_it_names_with_the_offset_before() -> None:
    # 2026-03-29: Berlin goes from 02:00 CET to 03:00 CEST. 02:30 does not exist: it fires at 01:30Z
    # (03:30 CEST), once, though 03:30 names the same instant.
    assert ticks(f"{BERLIN} 30 2,3 * * *", "2026-03-28T23:00", "2026-03-29T23:59") == ["03-29T01:30"]
    assert ticks(f"{BERLIN} 30 2 * * *", "2026-03-27T12:00", "2026-03-30T12:00") == [
        "03-28T01:30",
        "03-29T01:30",
        "03-30T00:30",
    ]


def test_a_wall_time_the_clocks_read_twice_fires_once_at_its_first_occurrence() -> None:
    # 2026-10-25: Berlin goes back from 03:00 CEST to 02:00 CET; 02:30 happens at 00:30Z and 01:30Z.
    assert ticks(f"{BERLIN} 30 2 * * *", "2026-10-24T12:00", "2026-10-25T23:59") == ["10-25T00:30"]
    hourly = ticks(f"{BERLIN} 0 * * * *", "2026-10-24T22:30", "2026-10-25T03:30")
    assert hourly == ["10-24T23:00", "10-25T00:00", "10-25T02:00", "10-25T03:00"]  # 02:00 CET passed over


def test_a_zone_this_machine_does_not_know_is_refused_saying_what_to_name() -> None:
    with pytest.raises(ValueError, match="IANA zone"):
        parse_cron("CRON_TZ=Mars/Olympus 0 9 * * *")
    with pytest.raises(ValueError, match="exactly 5"):
        parse_cron(f"{BERLIN} 0 9 * *")


ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago"]


@given(
    zone=st.sampled_from(ZONES),
    minute=st.sampled_from(["*/7", "0", "30", "0,15,45"]),
    hour=st.sampled_from(["*", "2", "1-3", "*/5"]),
    start=st.datetimes(
        min_value=datetime(2020, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
    ),
)
def test_zoned_ticks_only_move_forward_and_each_lands_on_an_allowed_minute(
    zone: str, minute: str, hour: str, start: datetime
) -> None:
    rule = parse_cron(f"CRON_TZ={zone} {minute} {hour} * * *")
    t = start
    for _ in range(40):
        nxt = next_tick(rule, t)
        assert nxt > t and nxt.second == 0
        wall = nxt.astimezone(ZoneInfo(zone))
        # a wall time the clocks skipped lands shifted by the change (Lord Howe's is 30 minutes)
        changed = (nxt - timedelta(hours=3)).astimezone(ZoneInfo(zone)).utcoffset() != wall.utcoffset()
        assert wall.minute in rule.minutes or changed, (wall, rule.text)
        t = nxt
    # and catching up after an outage gives the same ticks, in order, never one twice
    assert due(rule, start, t, "all") == sorted(set(due(rule, start, t, "all")))
