"""Schedules that start a task on a cron expression or at a fixed interval, and which of their ticks
are due when the scheduler comes back from an outage (the catch-up policy).

Pure: times in and out are timezone-aware and come back in UTC. Cron fields are read in UTC, or in
the zone a `CRON_TZ=<IANA zone> ` prefix names (as cronie reads it): on the day a zone's clocks go
forward, a wall time that does not exist fires at the instant it names with the offset before the
change (02:30 in a gap of 02:00-03:00 fires at 03:30), once; on the day they go back, a wall time
that occurs twice fires at its first occurrence only.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, UTC, date, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# What to fire after an outage: only a tick that is on time, only the newest missed one, or all.
CATCH_UP = ("skip", "one", "all")

MIN_INTERVAL = timedelta(seconds=1)
MAX_INTERVAL = timedelta(days=366)
_SECOND = timedelta(seconds=1)
_MINUTE = timedelta(minutes=1)
_GRACE = timedelta(seconds=60)  # how late a tick may fire under "skip", at most one interval
# Every pairing of a date with a weekday recurs within one Gregorian cycle, and parse_cron rejects
# the expressions that can never fire, so a search this long only gives up near year 9999.
_HORIZON_YEARS = 400

_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_NAMES = {3: {name: i for i, name in enumerate(_MONTHS, 1)}, 4: {name: i for i, name in enumerate(_WEEKDAYS)}}
_ALLOWED = {3: "a number 1-12 or jan-dec", 4: "a number 0-7 (0 and 7 are Sunday) or sun-sat"}
_LONGEST_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ITEM = re.compile(r"(\*|[0-9a-z]+(?:-[0-9a-z]+)?)(?:/([0-9]+))?")
_EVERY = re.compile(r"(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")
_UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))


@dataclass(frozen=True)
class Cron:
    """A parsed 5-field cron expression: the values each field allows (day-of-week 0 = Sunday)."""

    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]
    either_day: bool  # both day fields restricted: a day matches on either (the standard cron rule)
    zone: tzinfo = UTC  # the fields' wall clock

    def day_matches(self, day: date) -> bool:
        in_month, in_week = day.day in self.days, day.isoweekday() % 7 in self.weekdays
        return (in_month or in_week) if self.either_day else (in_month and in_week)

    def matches(self, moment: datetime) -> bool:
        """Whether the minute of `moment`, on the rule's wall clock, is one this expression fires in."""
        at = _utc(moment, "moment").astimezone(self.zone)
        in_day = at.month in self.months and self.day_matches(at.date())
        return at.minute in self.minutes and at.hour in self.hours and in_day


@dataclass(frozen=True)
class Every:
    """Ticks at anchor + k * interval for every whole k >= 0."""

    interval: timedelta
    anchor: datetime

    def __post_init__(self) -> None:
        _check_interval(self.interval.total_seconds(), str(self.interval))
        _utc(self.anchor, "anchor")
        if self.anchor.microsecond:
            raise ValueError(f"anchor {self.anchor.isoformat()} is not at a whole second")


Rule = Cron | Every


ZONE_PREFIX = "CRON_TZ="


def parse_cron(expr: str) -> Cron:
    """Read `[CRON_TZ=<zone> ]minute hour day-of-month month day-of-week` (UTC without a zone);
    ValueError names the bad field or zone."""
    zone: tzinfo = UTC
    if expr.startswith(ZONE_PREFIX):
        name, _, rest = expr.removeprefix(ZONE_PREFIX).partition(" ")
        zone = _zone(name)
        expr_fields = rest
    else:
        expr_fields = expr
    fields = expr_fields.split()
    if len(fields) != 5:
        raise ValueError(
            f"cron expression '{expr}' has {len(fields)} fields; it needs exactly 5: "
            "minute hour day-of-month month day-of-week"
        )
    minutes, hours, days, months, weekdays = (_field(i, text) for i, text in enumerate(fields))
    # Vixie cron's reading, which crontab(5) describes: a field that starts with * is unrestricted.
    either_day = not fields[2].startswith("*") and not fields[4].startswith("*")
    if not either_day and min(days) > max(_LONGEST_MONTH[m - 1] for m in months):
        raise ValueError(f"cron expression '{expr}' never fires: none of its months has any of its days")
    return Cron(expr, minutes, hours, days, months, weekdays, either_day, zone)


def _zone(name: str) -> tzinfo:
    if name in ("UTC", "Etc/UTC"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"time zone {name[:60]!r} is not one this machine knows: name an IANA zone such as "
            "Europe/Berlin or America/New_York (Debian's tzdata package holds them)"
        ) from None


def _field(index: int, text: str) -> frozenset[int]:
    where = f"cron field {index + 1} ({_FIELDS[index][0]})"
    values: set[int] = set()
    for item in text.lower().split(","):
        values.update(_item(index, item, where))
    return frozenset(v % 7 for v in values) if index == 4 else frozenset(values)


def _item(index: int, item: str, where: str) -> range:
    _, low, high = _FIELDS[index]
    match = _ITEM.fullmatch(item)
    if not item:
        raise ValueError(f"{where} has an empty item in its comma list")
    if match is None:
        raise ValueError(f"{where} '{item}' is not *, a value, a-b, */n, a-b/n or a comma list of them")
    span, step_text = match.groups()
    step = 1 if step_text is None else int(step_text)
    if step < 1:
        raise ValueError(f"{where} '{item}' has a step below 1")
    if span == "*":
        return range(low, high + 1, step)  # day-of-week 7 folds into 0 below
    if step_text is not None and "-" not in span:
        raise ValueError(f"{where} '{item}' has a step without a range: write */n or a-b/n")
    first, _, last = span.partition("-")
    start, end = _value(index, first, where), _value(index, last or first, where)
    if start > end:
        raise ValueError(f"{where} '{item}' starts after it ends")
    return range(start, end + 1, step)


def _value(index: int, token: str, where: str) -> int:
    _, low, high = _FIELDS[index]
    names = _NAMES.get(index, {})
    if token in names:
        return names[token]
    if not token.isdigit():
        raise ValueError(f"{where} '{token}' is not {_ALLOWED.get(index, f'a number {low}-{high}')}")
    if not low <= int(token) <= high:
        raise ValueError(f"{where} '{token}' is out of {low}-{high}")
    return int(token)


def parse_every(text: str) -> timedelta:
    """Read an interval such as 30s, 5m, 2h, 1d or 1h30m (units in that order), 1 s to 366 days."""
    match = _EVERY.fullmatch(text.strip().lower())
    if not text.strip() or match is None:
        raise ValueError(
            f"interval '{text}' is not like 30s, 5m, 2h, 1d or 1h30m (units d, h, m, s in order)"
        )
    seconds = sum(int(count or 0) * size for count, (_, size) in zip(match.groups(), _UNITS, strict=True))
    _check_interval(seconds, text)
    return timedelta(seconds=seconds)


def _check_interval(seconds: float, text: str) -> None:
    if seconds < MIN_INTERVAL.total_seconds():
        raise ValueError(f"interval '{text}' is under 1 second")
    if seconds > MAX_INTERVAL.total_seconds():
        raise ValueError(f"interval '{text}' is over 366 days")
    if seconds != int(seconds):
        raise ValueError(f"interval '{text}' is not a whole number of seconds")


def next_tick(rule: Rule, after: datetime) -> datetime:
    """The first tick strictly after `after`, in UTC."""
    after = _utc(after, "after")
    if isinstance(rule, Every):
        if after < rule.anchor:
            return rule.anchor.astimezone(UTC)
        return (rule.anchor + ((after - rule.anchor) // rule.interval + 1) * rule.interval).astimezone(UTC)
    # On the rule's wall clock. A wall time read twice (clocks going back) is taken at its first
    # occurrence (fold 0): one `after` in the second reads wall times already past, passed over.
    start = after.astimezone(rule.zone).replace(second=0, microsecond=0, tzinfo=None) + _MINUTE
    while True:
        wall = _next_wall(rule, start)
        if wall is None:
            break
        tick = wall.replace(tzinfo=rule.zone).astimezone(UTC)
        if tick > after:
            return tick
        start = wall + _MINUTE
    raise ValueError(
        f"cron '{rule.text}' has no tick within {_HORIZON_YEARS} years after {after.isoformat()}"
    )


def _next_wall(rule: Cron, start: datetime) -> datetime | None:
    """The first wall time (naive) at or after `start` the rule's fields allow, within the horizon."""
    for day in _days(rule, start.date()):
        at = _time_of_day(rule, *((start.hour, start.minute) if day == start.date() else (0, 0)))
        if at is not None:
            return datetime(day.year, day.month, day.day, *at)
    return None


def _days(rule: Cron, first: date) -> Iterator[date]:
    """The days from `first` on that the month and day fields allow, skipping whole months."""
    for year in range(first.year, min(first.year + _HORIZON_YEARS, MAXYEAR) + 1):
        for month in sorted(m for m in rule.months if (year, m) >= (first.year, first.month)):
            low = first.day if (year, month) == (first.year, first.month) else 1
            for day in range(low, calendar.monthrange(year, month)[1] + 1):
                if rule.day_matches(date(year, month, day)):
                    yield date(year, month, day)


def _time_of_day(rule: Cron, hour: int, minute: int) -> tuple[int, int] | None:
    """The first allowed (hour, minute) at or after hour:minute of a day, if any."""
    for h in sorted(h for h in rule.hours if h >= hour):
        for m in sorted(rule.minutes):
            if h > hour or m >= minute:
                return h, m
    return None


def due(rule: Rule, last: datetime, now: datetime, catch_up: str, limit: int = 1000) -> list[datetime]:
    """The ticks to fire at `now`, oldest first, when every tick up to and including `last` fired.

    "all": each tick in (last, now], the oldest `limit` of them (call again for the rest);
    "one": the newest of them; "skip": the newest only if it is at most grace(rule) late.
    """
    if catch_up not in CATCH_UP:
        raise ValueError(f"catch-up policy '{catch_up}' is not one of {', '.join(CATCH_UP)}")
    if limit < 1:
        raise ValueError(f"limit {limit} is under 1")
    last, now = _utc(last, "last"), _utc(now, "now")
    if catch_up == "all":
        ticks: list[datetime] = []
        tick = next_tick(rule, last)
        while tick <= now and len(ticks) < limit:
            ticks.append(tick)
            tick = next_tick(rule, tick)
        return ticks
    newest = _newest(rule, last, now)
    if newest is None or (catch_up == "skip" and now - newest > grace(rule)):
        return []
    return [newest]


def _newest(rule: Rule, last: datetime, now: datetime) -> datetime | None:
    """The newest tick in (last, now], found by bisection so a long outage costs few searches."""
    if next_tick(rule, last) > now:
        return None
    # next_tick(lo) <= now < next_tick(hi); ticks lie on whole seconds at least 1 s apart, so once
    # hi - lo is at most 1 s the newest tick is the only one in (lo, hi].
    lo, hi = last, now
    while hi - lo > _SECOND:
        mid = lo + (hi - lo) / 2
        lo, hi = (mid, hi) if next_tick(rule, mid) <= now else (lo, mid)
    return next_tick(rule, lo)


def grace(rule: Rule) -> timedelta:
    """How late a tick may be and still fire under "skip": a minute, or one interval if shorter."""
    return min(_GRACE, rule.interval if isinstance(rule, Every) else _MINUTE)


def describe(rule: Rule) -> str:
    """A short description for people: "every 1h30m", "cron '*/5 * * * *'"."""
    if isinstance(rule, Cron):
        return f"cron '{rule.text}'"
    seconds, parts = int(rule.interval.total_seconds()), []
    for unit, size in _UNITS:
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return f"every {''.join(parts)}"


def _utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} {moment.isoformat()} is not timezone-aware: pass a UTC datetime")
    return moment.astimezone(UTC)
