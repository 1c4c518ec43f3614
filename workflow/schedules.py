"""Schedules, for any app: a task of a workflow started on a cron rule or an interval, exactly one
per tick, whatever the number of timers and restarts (consumers/timer/schedules.py).

Each tick has one task id and one event id, derived from the schedule's name and the tick's time:
the tick is a signed task.create like any upstream system's, so a tick published twice (two timers,
a crash before its progress was stored) is refused at the door or finds its task there, and starts
nothing more. After an outage the schedule's catch-up policy says which missed ticks still run:
`skip` (none, only one on time), `one` (the newest) or `all` (each, oldest first). Pure.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from wakeful.core import cron
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.schemas.schedule import ScheduleRecord

CRON, EVERY = "cron:", "every:"
TICK_FORMAT = "%Y%m%dT%H%M%S"
BATCH = 100  # ticks of one schedule published in one look, at most
SCHEDULER = "scheduler"  # the principal whose key signs the default tenant's ticks


def signer_of(tenant: str) -> str:
    """The principal whose key signs the ticks of a schedule of `tenant` (D113): `scheduler` for the
    default tenant, `scheduler@<tenant>` for another, a signer registered in that tenant, so that
    each tick's task is that tenant's, in its namespace, as any of its upstreams' creates are."""
    return SCHEDULER if tenant == DEFAULT_TENANT else f"{SCHEDULER}@{tenant}"


def rule_text(cron_expr: str | None, every: str | None) -> str:
    """The stored rule for exactly one of --cron and --every, checked; ValueError says what is wrong."""
    if (cron_expr is None) == (every is None):
        raise ValueError("give a schedule exactly one of a cron expression and an interval")
    if cron_expr is not None:
        cron.parse_cron(cron_expr)
        return f"{CRON}{cron_expr.strip()}"
    assert every is not None
    return f"{EVERY}{int(cron.parse_every(every).total_seconds())}"


def rule_of(schedule: ScheduleRecord) -> cron.Cron | cron.Every:
    """The schedule's rule; an interval's ticks count from its `since`, to the second."""
    if schedule.rule.startswith(CRON):
        return cron.parse_cron(schedule.rule.removeprefix(CRON))
    if schedule.rule.startswith(EVERY):
        seconds = int(schedule.rule.removeprefix(EVERY))
        return cron.Every(timedelta(seconds=seconds), schedule.since.replace(microsecond=0))
    raise ValueError(f"schedule {schedule.name}'s rule {schedule.rule!r} is neither cron: nor every:")


def due(
    schedule: ScheduleRecord, fired: datetime | None, now: datetime, limit: int = BATCH
) -> list[datetime]:
    """The ticks of `schedule` to publish now, oldest first: those after its newest published tick
    (`fired`) and after its `since`, up to `now`, as its catch-up policy keeps them. None while
    paused."""
    if schedule.paused:
        return []
    last = schedule.since if fired is None else max(fired, schedule.since)
    return cron.due(rule_of(schedule), last, now, schedule.catch_up, limit)


def next_tick(schedule: ScheduleRecord, fired: datetime | None) -> datetime:
    """When the schedule ticks next after what it published (`wakeful schedule list`)."""
    last = schedule.since if fired is None else max(fired, schedule.since)
    return cron.next_tick(rule_of(schedule), last)


def task_id(name: str, tick: datetime) -> str:
    """The task a tick starts, in the scheduler's tenant: `<name>-<yyyymmddThhmmss>` (UTC)."""
    return f"{name}-{tick.astimezone(UTC).strftime(TICK_FORMAT)}"


def event_id(name: str, tick: datetime) -> str:
    """The tick's task.create event id: the same from every timer, so the door sees one event."""
    return f"sched.{name}.{int(tick.timestamp() * 1000)}"


def tick_of(task: str, names: set[str]) -> tuple[str, datetime] | None:
    """(schedule, tick) of a task a tick of one of `names` started, else None (`wakeful recover`
    sets each schedule's newest published tick again from the tasks it restored)."""
    name, _, when = task.rpartition("-")
    if name not in names:
        return None
    try:
        return name, datetime.strptime(when, TICK_FORMAT).replace(tzinfo=UTC)
    except ValueError:
        return None
