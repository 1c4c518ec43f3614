"""Schedules on a cron expression or a fixed interval (core/cron.py), as pure rules: the next tick is
the first matching time strictly after, never one past a matching minute; a bad field is named in
its error; after an outage "all" fires each missed tick once in order, "one" the newest only and
"skip" only a tick that is on time, and none of them fires a tick already fired or still to come.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.core.cron import (
    CATCH_UP,
    Cron,
    Every,
    describe,
    due,
    grace,
    next_tick,
    parse_cron,
    parse_every,
)

pytestmark = pytest.mark.unit

MINUTE = timedelta(minutes=1)
US = timedelta(microseconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LONGEST = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
TIMES = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 12, 31), timezones=st.just(UTC))


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("expr", "after", "tick"),
    [
        ("*/15 * * * *", "2030-01-01 10:07", "2030-01-01 10:15"),
        ("*/15 * * * *", "2030-01-01 10:15", "2030-01-01 10:30"),  # strictly after
        ("*/15 * * * *", "2030-01-01 10:14:59.999999", "2030-01-01 10:15"),
        ("*/15 * * * *", "2030-01-01 23:50", "2030-01-02 00:00"),
        ("10-30/10 * * * *", "2030-01-01 10:30", "2030-01-01 11:10"),
        ("0 9 * * 1", "2030-06-02 12:00", "2030-06-03 09:00"),  # a Sunday, then Monday 09:00
        ("0 9 * * 1", "2030-06-03 09:00", "2030-06-10 09:00"),
        ("0 9 * * MON", "2030-06-03 08:59:59", "2030-06-03 09:00"),
        ("0 0 * * 7", "2030-06-03 00:00", "2030-06-09 00:00"),  # 7 is Sunday too
        ("0 0 * * sun", "2030-06-03 00:00", "2030-06-09 00:00"),
        ("0 0 13 * 5", "2030-06-01 00:00", "2030-06-07 00:00"),  # both restricted: the 13th OR a Friday
        ("0 0 13 * 5", "2030-06-10 00:00", "2030-06-13 00:00"),  # a Thursday, matched by its day
        ("0 0 13 * *", "2030-06-01 00:00", "2030-06-13 00:00"),
        ("0 0 */2 * 5", "2030-06-01 00:00", "2030-06-07 00:00"),  # */2 is unrestricted: odd AND Friday
        ("0 0 1 * *", "2030-01-31 12:00", "2030-02-01 00:00"),
        ("30 23 31 * *", "2030-04-01 00:00", "2030-05-31 23:30"),  # April has no 31st
        ("59 23 * * *", "2030-12-31 23:59", "2031-01-01 23:59"),
        ("0 0 1 1 *", "2030-01-01 00:00", "2031-01-01 00:00"),
        ("0 12 * jan-mar sat,sun", "2030-03-31 12:00", "2031-01-04 12:00"),
        ("0 0 29 2 *", "2027-01-01 00:00", "2028-02-29 00:00"),
        ("0 0 29 2 *", "2028-02-29 00:00", "2032-02-29 00:00"),
        ("0 0 29 2 *", "2096-03-01 00:00", "2104-02-29 00:00"),  # 2100 is no leap year
        ("0 0 29 2 */7", "2033-01-01 00:00", "2060-02-29 00:00"),  # a leap day on a Sunday
        ("0 0 31 2 1", "2030-03-01 00:00", "2031-02-03 00:00"),  # either day: Mondays in February
    ],
)
def test_the_next_cron_tick_is_the_first_matching_minute_strictly_after(
    expr: str, after: str, tick: str
) -> None:
    assert next_tick(parse_cron(expr), at(after)) == at(tick)


def test_a_parsed_expression_holds_its_text_and_the_values_each_field_allows() -> None:
    cron = parse_cron("*/20 1-3 1,15 JAN,jul 5-7")
    assert cron == Cron(
        text="*/20 1-3 1,15 JAN,jul 5-7",
        minutes=frozenset({0, 20, 40}),
        hours=frozenset({1, 2, 3}),
        days=frozenset({1, 15}),
        months=frozenset({1, 7}),
        weekdays=frozenset({5, 6, 0}),
        either_day=True,
    )
    assert cron.matches(at("2030-07-05 01:40"))  # a Friday
    assert cron.matches(at("2030-07-15 02:00"))  # a Monday, but the 15th
    assert not cron.matches(at("2030-07-03 01:40"))  # a Wednesday, the 3rd
    assert not cron.matches(at("2030-06-07 01:40"))  # a Friday in June
    assert not cron.matches(at("2030-07-05 01:41"))


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("60 * * * *", "cron field 1 (minute) '60' is out of 0-59"),
        ("0 25 * * *", "cron field 2 (hour) '25' is out of 0-23"),
        ("0 1-24 * * *", "cron field 2 (hour) '24' is out of 0-23"),
        ("0 0 0 * *", "cron field 3 (day-of-month) '0' is out of 1-31"),
        ("0 0 32 * *", "cron field 3 (day-of-month) '32' is out of 1-31"),
        ("0 0 * 13 *", "cron field 4 (month) '13' is out of 1-12"),
        ("0 0 * foo *", "cron field 4 (month) 'foo' is not a number 1-12 or jan-dec"),
        ("0 0 * * 8", "cron field 5 (day-of-week) '8' is out of 0-7"),
        (
            "0 0 * * jan",
            "cron field 5 (day-of-week) 'jan' is not a number 0-7 (0 and 7 are Sunday) or sun-sat",
        ),
        ("mon * * * *", "cron field 1 (minute) 'mon' is not a number 0-59"),
        ("*/0 * * * *", "cron field 1 (minute) '*/0' has a step below 1"),
        ("5-1 * * * *", "cron field 1 (minute) '5-1' starts after it ends"),
        ("5/2 * * * *", "cron field 1 (minute) '5/2' has a step without a range"),
        ("1-2-3 * * * *", "cron field 1 (minute) '1-2-3' is not *, a value, a-b, */n, a-b/n"),
        ("0 0 1,,2 * *", "cron field 3 (day-of-month) has an empty item"),
        ("0 0 * * 1,", "cron field 5 (day-of-week) has an empty item"),
        ("* * * *", "has 4 fields; it needs exactly 5"),
        ("* * * * * *", "has 6 fields; it needs exactly 5"),
        ("", "has 0 fields; it needs exactly 5"),
        ("0 0 31 2 *", "never fires"),
        ("0 0 30,31 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
    ],
)
def test_a_bad_expression_is_refused_naming_the_field_and_what_it_allows(expr: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_cron(expr)


def test_a_search_gives_up_at_the_end_of_the_calendar_instead_of_looping() -> None:
    with pytest.raises(ValueError, match="no tick"):
        next_tick(parse_cron("0 0 29 2 *"), at("9997-01-01 00:00"))  # no leap day left before 10000


@pytest.mark.parametrize(
    ("text", "interval"),
    [
        ("30s", timedelta(seconds=30)),
        ("5m", timedelta(minutes=5)),
        ("2h", timedelta(hours=2)),
        ("1d", timedelta(days=1)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d2h3m4s", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        (" 90M ", timedelta(minutes=90)),
        ("1s", timedelta(seconds=1)),
        ("366d", timedelta(days=366)),
    ],
)
def test_an_interval_reads_days_hours_minutes_and_seconds(text: str, interval: timedelta) -> None:
    assert parse_every(text) == interval


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0s", "under 1 second"),
        ("0h0m", "under 1 second"),
        ("367d", "over 366 days"),
        ("366d1s", "over 366 days"),
        ("99999999999999999999d", "over 366 days"),
        ("", "is not like 30s"),
        ("5", "is not like 30s"),
        ("5x", "is not like 30s"),
        ("30m1h", "is not like 30s"),  # units in order
        ("-5m", "is not like 30s"),
        ("1.5h", "is not like 30s"),
    ],
)
def test_a_bad_interval_is_refused_saying_why(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_every(text)


@pytest.mark.parametrize(
    ("interval", "anchor", "message"),
    [
        (timedelta(0), at("2030-01-01 00:00"), "under 1 second"),
        (timedelta(seconds=1.5), at("2030-01-01 00:00"), "whole number of seconds"),
        (timedelta(days=400), at("2030-01-01 00:00"), "over 366 days"),
        (timedelta(minutes=5), datetime(2030, 1, 1), "not timezone-aware"),
        (timedelta(minutes=5), at("2030-01-01 00:00:00.5"), "whole second"),
    ],
)
def test_an_every_rule_is_refused_unless_its_ticks_fall_on_whole_seconds(
    interval: timedelta, anchor: datetime, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Every(interval, anchor)


def test_a_time_without_a_timezone_is_refused() -> None:
    with pytest.raises(ValueError, match=r"after .* is not timezone-aware"):
        next_tick(parse_cron("* * * * *"), datetime(2030, 1, 1))
    with pytest.raises(ValueError, match=r"now .* is not timezone-aware"):
        due(parse_cron("* * * * *"), at("2030-01-01 00:00"), datetime(2030, 1, 1), "all")


def test_times_in_another_zone_are_read_as_the_same_instant_and_ticks_come_back_in_utc() -> None:
    paris = datetime(2030, 1, 1, 11, 7, tzinfo=timezone(timedelta(hours=1)))
    tick = next_tick(parse_cron("*/15 * * * *"), paris)
    assert tick == at("2030-01-01 10:15") and tick.tzinfo is UTC


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        (Every(timedelta(minutes=5), at("2030-01-01 00:00")), "every 5m"),
        (Every(timedelta(hours=1, minutes=30), at("2030-01-01 00:00")), "every 1h30m"),
        (Every(timedelta(days=2, seconds=1), at("2030-01-01 00:00")), "every 2d1s"),
        (parse_cron("*/5 * * * *"), "cron '*/5 * * * *'"),
    ],
)
def test_a_rule_describes_itself_briefly(rule: Cron | Every, text: str) -> None:
    assert describe(rule) == text


@given(st.integers(1, 366 * 86400))
def test_an_interval_described_reads_back_as_itself(seconds: int) -> None:
    interval = timedelta(seconds=seconds)
    assert parse_every(describe(Every(interval, EPOCH)).removeprefix("every ")) == interval


# ---- the properties, against a reference built from the same drawn fields ---------------------


@dataclass(frozen=True)
class Drawn:
    """A drawn expression and the values its fields must allow, worked out apart from the parser."""

    text: str
    fields: tuple[frozenset[int], ...]
    either_day: bool

    def day(self, day: date) -> bool:
        _, _, days, months, weekdays = self.fields
        in_month, in_week = day.day in days, day.isoweekday() % 7 in weekdays
        return day.month in months and ((in_month or in_week) if self.either_day else in_month and in_week)

    def fires(self, moment: datetime) -> bool:
        minutes, hours, *_ = self.fields
        return moment.minute in minutes and moment.hour in hours and self.day(moment.date())

    def can_fire(self) -> bool:
        _, _, days, months, _ = self.fields
        return self.either_day or min(days) <= max(LONGEST[m - 1] for m in months)


@st.composite
def items(draw: st.DrawFn, low: int, high: int, star_high: int) -> tuple[str, set[int]]:
    kind = draw(st.sampled_from(["*", "n", "a-b", "*/n", "a-b/n"]))
    step = draw(st.integers(1, high - low + 2))
    a, b = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
    if kind == "*":
        return "*", set(range(low, star_high + 1))
    if kind == "*/n":
        return f"*/{step}", set(range(low, star_high + 1, step))
    if kind == "n":
        return str(a), {a}
    if kind == "a-b":
        return f"{a}-{b}", set(range(a, b + 1))
    return f"{a}-{b}/{step}", set(range(a, b + 1, step))


@st.composite
def field(draw: st.DrawFn, low: int, high: int, star_high: int) -> tuple[str, frozenset[int]]:
    drawn = draw(st.lists(items(low, high, star_high), min_size=1, max_size=3))
    values = set().union(*(v for _, v in drawn))
    return ",".join(t for t, _ in drawn), frozenset(values)


@st.composite
def expressions(draw: st.DrawFn) -> Drawn:
    parts = [
        draw(field(0, 59, 59)),
        draw(field(0, 23, 23)),
        draw(field(1, 31, 31)),
        draw(field(1, 12, 12)),
        draw(field(0, 7, 6)),
    ]
    texts = [t for t, _ in parts]
    sets = [v for _, v in parts]
    sets[4] = frozenset(v % 7 for v in sets[4])
    either = not texts[2].startswith("*") and not texts[4].startswith("*")
    return Drawn(" ".join(texts), tuple(sets), either)


def minutes_between(start: datetime, end: datetime) -> list[datetime]:
    """Each whole minute in (start, end)."""
    moment = start.replace(second=0, microsecond=0) + MINUTE
    found = []
    while moment < end:
        found.append(moment)
        moment += MINUTE
    return found


@given(expressions(), TIMES)
def test_the_next_cron_tick_matches_and_no_matching_minute_comes_before_it(
    drawn: Drawn, after: datetime
) -> None:
    if not drawn.can_fire():
        with pytest.raises(ValueError, match="never fires"):
            parse_cron(drawn.text)
        return
    cron = parse_cron(drawn.text)
    assert (cron.minutes, cron.hours, cron.days, cron.months, cron.weekdays) == drawn.fields
    tick = next_tick(cron, after)
    assert tick > after and tick.tzinfo is UTC and (tick.second, tick.microsecond) == (0, 0)
    assert drawn.fires(tick) and cron.matches(tick)
    # No matching minute on after's day or tick's day before it, and no matching day in between.
    day_end = datetime.combine(after.date() + timedelta(days=1), datetime.min.time(), UTC)
    day_start = datetime.combine(tick.date(), datetime.min.time(), UTC) - US
    edges = minutes_between(after, min(tick, day_end)) + minutes_between(max(after, day_start), tick)
    assert not any(drawn.fires(m) for m in edges)
    day = after.date() + timedelta(days=1)
    while day < tick.date():
        assert not drawn.day(day), day
        day += timedelta(days=1)


@st.composite
def every_rules(draw: st.DrawFn) -> Every:
    seconds = draw(st.one_of(st.integers(1, 120), st.integers(1, 366 * 86400)))
    return Every(timedelta(seconds=seconds), draw(TIMES).replace(microsecond=0))


@given(every_rules(), TIMES)
def test_the_next_interval_tick_is_the_first_anchor_plus_whole_intervals_strictly_after(
    rule: Every, after: datetime
) -> None:
    tick = next_tick(rule, after)
    assert tick > after and tick >= rule.anchor and tick.tzinfo is UTC
    assert (tick - rule.anchor) % rule.interval == timedelta(0)
    assert tick == rule.anchor or tick - rule.interval <= after


def micros(moment: datetime) -> int:
    return (moment - EPOCH) // US


@st.composite
def every_outages(draw: st.DrawFn) -> tuple[Every, datetime, datetime]:
    """An interval rule and an outage (last, now] holding a few dozen of its ticks at most; last and
    now fall on a tick as often as not (a caller's last is the tick it fired last)."""
    interval = timedelta(seconds=draw(st.integers(1, 7200)))
    anchor = draw(TIMES).replace(microsecond=0)
    offset = st.one_of(st.just(timedelta(0)), st.timedeltas(timedelta(0), interval))
    last = anchor + draw(st.integers(-40, 40)) * interval + draw(offset)
    now = last + draw(st.integers(0, 40)) * interval + draw(offset)
    return Every(interval, anchor), last, now


@given(every_outages(), st.integers(1, 50))
def test_catching_up_an_interval_rule_fires_the_missed_ticks_by_policy(
    outage: tuple[Every, datetime, datetime], limit: int
) -> None:
    rule, last, now = outage
    step = micros(rule.anchor + rule.interval) - micros(rule.anchor)
    missed = [EPOCH + t * US for t in range(micros(rule.anchor), micros(now) + 1, step) if t > micros(last)]
    check_policies(rule, last, now, missed, limit)


@st.composite
def cron_outages(draw: st.DrawFn) -> tuple[Drawn, datetime, datetime]:
    """A cron rule and an outage of up to 6 hours, on whole minutes as often as not."""
    drawn = draw(expressions().filter(Drawn.can_fire))
    last = draw(st.one_of(TIMES, TIMES.map(lambda t: t.replace(second=0, microsecond=0))))
    gap = st.one_of(st.integers(0, 360).map(lambda n: n * MINUTE), st.timedeltas(timedelta(0), 360 * MINUTE))
    return drawn, last, last + draw(gap)


@given(cron_outages(), st.integers(1, 50))
def test_catching_up_a_cron_rule_fires_the_missed_ticks_by_policy(
    outage: tuple[Drawn, datetime, datetime], limit: int
) -> None:
    drawn, last, now = outage
    missed = [m for m in minutes_between(last, now + US) if drawn.fires(m)]
    check_policies(parse_cron(drawn.text), last, now, missed, limit)


def check_policies(
    rule: Cron | Every, last: datetime, now: datetime, missed: list[datetime], limit: int
) -> None:
    """`missed` is every tick in (last, now], oldest first, worked out by the test."""
    fired = due(rule, last, now, "all", limit=limit)
    assert fired == missed[:limit]
    assert all(last < t <= now for t in fired) and fired == sorted(set(fired))
    assert due(rule, last, now, "one") == missed[-1:]
    on_time = [t for t in missed[-1:] if now - t <= grace(rule)]
    assert due(rule, last, now, "skip") == on_time


@given(expressions().filter(Drawn.can_fire), TIMES, st.timedeltas(timedelta(0), timedelta(days=30 * 365)))
def test_after_a_long_outage_one_fires_the_newest_missed_tick_and_skip_only_if_on_time(
    drawn: Drawn, last: datetime, outage: timedelta
) -> None:
    cron, now = parse_cron(drawn.text), last + outage
    fired = due(cron, last, now, "one")
    assert due(cron, last, now, "skip") == [t for t in fired if now - t <= timedelta(seconds=60)]
    if fired:
        [newest] = fired
        assert last < newest <= now and drawn.fires(newest)
        assert next_tick(cron, newest) > now  # nothing newer was missed
    else:
        assert next_tick(cron, last) > now


@pytest.mark.parametrize(
    ("now", "policy", "fired"),
    [
        ("00:17", "all", ["00:05", "00:10", "00:15"]),
        ("00:15", "all", ["00:05", "00:10", "00:15"]),  # a tick at now is due now
        ("00:17", "one", ["00:15"]),
        ("00:17", "skip", []),  # two minutes late: over the minute of grace
        ("00:16", "skip", ["00:15"]),
        ("00:15", "skip", ["00:15"]),
        ("00:04:59", "all", []),
        ("00:00", "all", []),
    ],
)
def test_an_outage_of_an_every_5m_rule_by_policy(now: str, policy: str, fired: list[str]) -> None:
    rule = Every(timedelta(minutes=5), at("2030-01-01 00:00"))
    day = "2030-01-01 "
    assert due(rule, at(day + "00:00"), at(day + now), policy) == [at(day + t) for t in fired]


def test_grace_is_a_minute_or_one_interval_if_shorter() -> None:
    anchor = at("2030-01-01 00:00")
    assert grace(Every(timedelta(seconds=20), anchor)) == timedelta(seconds=20)
    assert grace(Every(timedelta(hours=1), anchor)) == timedelta(seconds=60)
    assert grace(parse_cron("* * * * *")) == timedelta(seconds=60)
    hourly, last = parse_cron("0 * * * *"), at("2030-01-01 10:00")
    assert due(hourly, last, at("2030-01-01 11:01"), "skip") == [at("2030-01-01 11:00")]  # 60 s late
    assert due(hourly, last, at("2030-01-01 11:01:01"), "skip") == []


def test_all_fires_the_oldest_ticks_up_to_the_limit_and_the_next_call_the_rest() -> None:
    cron, last, now = parse_cron("* * * * *"), at("2030-01-01 00:00"), at("2030-01-01 00:05:30")
    first = due(cron, last, now, "all", limit=3)
    assert first == [at("2030-01-01 00:01"), at("2030-01-01 00:02"), at("2030-01-01 00:03")]
    assert due(cron, first[-1], now, "all", limit=3) == [at("2030-01-01 00:04"), at("2030-01-01 00:05")]


def test_one_finds_the_newest_tick_of_an_80_year_outage_of_a_minute_rule() -> None:
    last, now = at("2000-01-01 00:00"), at("2080-06-01 12:34:56")
    assert due(parse_cron("* * * * *"), last, now, "one") == [at("2080-06-01 12:34")]
    assert due(parse_cron("* * * * *"), last, now, "skip") == [at("2080-06-01 12:34")]


@pytest.mark.parametrize(("policy", "limit"), [("latest", 1000), ("ALL", 1000), ("", 1000), ("all", 0)])
def test_an_unknown_policy_or_a_limit_under_one_is_refused(policy: str, limit: int) -> None:
    with pytest.raises(ValueError, match=r"not one of skip, one, all|under 1"):
        due(parse_cron("* * * * *"), at("2030-01-01 00:00"), at("2030-01-01 01:00"), policy, limit=limit)
    assert CATCH_UP == ("skip", "one", "all")
