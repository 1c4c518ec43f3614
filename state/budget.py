"""The model token budget: tokens used per task, and per tenant per UTC day (state/keys.py).

The proposer reads both counters before a model call (one round trip) and makes no call once
either is spent; after a call it adds what the call cost to both (two round trips, none when the
model reports no tokens). It is the only writer, as the `proposer` ACL user, whose rights reach
these counters and nothing else (state/acl.py).

A counter is the top id of a Redis stream: `<tokens>-0` for a task, `<day * DAY_SPAN + tokens used
that day>-0` for a tenant (one stream per tenant, days since 1970 in UTC). XADD refuses an id that
does not grow, and the proposer may only XADD and read, so no command it can send moves a counter
back: neither a negative add, nor a trim (the top id outlives its entries), nor a lapse (no TTL,
no EXPIRE, no DEL). A move forward only spends a budget sooner (docs/decisions.md D51).

Counters written before the streams (a string per task, and one per tenant per day) are moved into
them by the admin at `dev up` and `admin acl --apply` (state/upgrades.py).

A counter is not trusted for holding a number: one that does not read as a count of tokens counts
as spent, with the reason, so a damaged counter parks a task instead of lifting its limit.
Counting is at least once: a proposer that dies between a call and its charge has the call made
again by whichever process reads the request next, and both calls count.
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import redis

from wakeful.core.retry import Retry
from wakeful.state import keys

# More than any model's context and reply together: a report above it is a broken adapter, never
# believed, and charged at this ceiling so that it cannot slip past a budget either.
MAX_CALL_TOKENS = 10_000_000
COUNTER_SHOWN_CHARS = 40  # of a damaged counter, in a reason
# A tenant counter's top id is day * DAY_SPAN + the day's tokens: a new day starts above every
# count of the days before it. Days since 1970 times this stay inside a stream id's 64 bits until
# the year 2470; a day's count saturates one below it (a limit is at most DAY_SPAN - 1).
DAY_SPAN = 10**14
TASK_SPAN = 2**64  # a task's count saturates one below it: a stream id's 64 bits
# Charges of one tenant race for its stream: the loser reads the new top and adds again, after a
# pause that grows (a few ms, then doubling) so that racers spread out.
CHARGE_TRIES = 8
CHARGE_PAUSE_S = 0.002
# Proposers' clocks differ: within this of a UTC midnight, a count another proposer already put in
# the next day is that day's, not damage.
CLOCK_SKEW_S = 300
_EPOCH = date(1970, 1, 1)


@dataclass(frozen=True)
class Limits:
    """Tokens one task may use in all, and a tenant's tasks per UTC day; 0 is no limit."""

    task: int
    tenant: int


@dataclass(frozen=True)
class Account:
    """Whose budgets one call spends: its task's, and its tenant's on one UTC day (yyyymmdd)."""

    task_id: str
    tenant: str
    day: str
    turning: bool = False  # the clock that made it is within CLOCK_SKEW_S of the day's end

    def __post_init__(self) -> None:
        keys.tenant_spent(self.tenant)  # ValueError: a part that cannot name its counter
        keys.spent(self.task_id)

    @classmethod
    def at(cls, task_id: str, tenant: str, now: datetime) -> Account:
        utc = now.astimezone(UTC)
        left = 86_400 - (utc.hour * 3600 + utc.minute * 60 + utc.second)
        return cls(task_id, tenant, utc.strftime("%Y%m%d"), turning=left <= CLOCK_SKEW_S)

    @property
    def floor(self) -> int:
        """The tenant counter's top id at the start of this account's day."""
        day = self.day  # yyyymmdd; read by hand: strptime costs ten times as much, and it is read per call
        if len(day) != 8 or not (day.isascii() and day.isdigit()):
            raise ValueError(f"day {day[:20]!r} is not yyyymmdd")
        return (date(int(day[:4]), int(day[4:6]), int(day[6:])) - _EPOCH).days * DAY_SPAN

    @property
    def task_key(self) -> str:
        return keys.spent(self.task_id)

    @property
    def tenant_key(self) -> str:
        return keys.tenant_spent(self.tenant)

    @property
    def counters(self) -> tuple[Counter, Counter]:
        return Counter(self.task_key), Counter(self.tenant_key, self.floor, DAY_SPAN, self.turning)


@dataclass(frozen=True)
class Counter:
    """A stream counter, and the span it counts in: all time for a task, a day for a tenant."""

    key: str
    floor: int = 0  # the count at the start of the account's day (0: a count of all time)
    span: int = TASK_SPAN  # how far a count may go past its floor
    turning: bool = False  # as the account's

    def window(self, count: int) -> tuple[int, int] | None:
        """(floor, ceiling) that `count` is charged within: the account's day, or the next, which a
        proposer whose clock is ahead reached first while this clock is about to; None for a count
        further ahead (only a proposer's login, misused, writes one)."""
        if count < self.floor + self.span:
            return self.floor, self.floor + self.span
        if self.turning and count < self.floor + 2 * self.span:
            return self.floor + self.span, self.floor + 2 * self.span
        return None

    def after(self, count: int, tokens: int) -> int | NotAdded:
        """The count once `tokens` are added to a counter holding `count`, or why none are."""
        window = self.window(count)
        if window is None:
            return NotAdded.LATER_DAY
        grew = grown(count, window[0], tokens, window[1])
        return NotAdded.FULL if grew is None else grew


class NotAdded(enum.Enum):
    """Why a counter did not take a charge."""

    DAMAGED = "is not a stream counter"
    LATER_DAY = "holds a count of a later day"  # the charge's own day is over for it
    FULL = "is full"  # nothing left to add in its window
    LOST = f"lost {CHARGE_TRIES} races to add"  # others charged it every time between read and add


def top(reply: object) -> int | None:
    """The count a stream counter holds, from its XINFO STREAM reply (0 when the stream does not
    exist), or None when the key is not such a counter."""
    if isinstance(reply, redis.ResponseError):
        return 0 if str(reply).lower().startswith("no such key") else None
    if not isinstance(reply, dict):
        return None
    last = reply.get("last-generated-id")
    text = last.decode(errors="replace") if isinstance(last, bytes) else str(last)
    ms, _, _seq = text.partition("-")
    return int(ms) if ms.isascii() and ms.isdigit() else None


def damaged(key: str, reply: object) -> str:
    return f"token counter {key} is not a stream counter ({repr(reply)[:COUNTER_SHOWN_CHARS]})"


def grown(count: int, floor: int, tokens: int, ceiling: int) -> int | None:
    """The count after adding `tokens` to a counter that holds `count`, starting from `floor` at
    the least and saturating one below `ceiling`; None when there is nothing to add."""
    after = min(max(count, floor) + tokens, ceiling - 1)
    return after if after > count else None


def usage(account: Account, replies: list[object]) -> tuple[int, int] | str:
    """(the task's tokens, the tenant's tokens today) from check()'s replies (each stream's XINFO
    STREAM); or why the counters cannot say (a damaged one), which counts as spent."""
    task_info, tenant_info = replies
    task_top, tenant_top = top(task_info), top(tenant_info)
    if task_top is None:
        return damaged(account.task_key, task_info)
    if tenant_top is None:
        return damaged(account.tenant_key, tenant_info)
    window = account.counters[1].window(tenant_top)
    if window is None:
        return f"token counter {account.tenant_key} holds a count of a day after {account.day}"
    return task_top, max(0, tenant_top - window[0])


def spent(limits: Limits, account: Account, found: tuple[int, int] | str) -> str | None:
    """Why no model call may be made for the task now, or None when both budgets have room."""
    if isinstance(found, str):
        return f"{found}: the budget is treated as spent"
    task_used, tenant_used = found
    if limits.task and task_used >= limits.task:
        return f"token budget of {limits.task} for task {account.task_id} is spent ({task_used} used)"
    if limits.tenant and tenant_used >= limits.tenant:
        who = f"tenant {account.tenant} on {account.day}"
        return f"daily token budget of {limits.tenant} for {who} is spent ({tenant_used} used)"
    return None


def insane(tokens: int) -> str | None:
    """Why a model's report of what one call cost cannot be believed, or None."""
    if tokens > MAX_CALL_TOKENS:
        return (
            f"the model reported {tokens} tokens for one call, more than any call can use ({MAX_CALL_TOKENS})"
        )
    return None


class Budget:
    """The counters in Redis, through the proposer's own connection."""

    def __init__(self, client: redis.Redis, limits: Limits) -> None:
        self.redis = client
        self.limits = limits

    def check(self, account: Account) -> str | None:
        """Why the task may not call the model now (spent, or a damaged counter), or None."""
        return self.check_with(account, ())[0]

    def check_with(
        self, account: Account, also: Sequence[tuple[Any, ...]]
    ) -> tuple[str | None, list[object]]:
        """check(), with the read-only commands `also` in the same round trip (the freezes, D117):
        why the task may not call the model now, or None; and the replies to `also`."""
        counted = bool(self.limits.task or self.limits.tenant)
        if not counted and not also:
            return None, []
        pipe = self.redis.pipeline(transaction=False)
        for counter in account.counters if counted else ():
            pipe.xinfo_stream(counter.key)
        for command in also:
            pipe.execute_command(*command)  # type: ignore[no-untyped-call]
        replies = _run(pipe)
        first = len(account.counters) if counted else 0
        why = spent(self.limits, account, usage(account, replies[:first])) if counted else None
        return why, replies[first:]

    def usage(self, account: Account) -> tuple[int, int] | str:
        """(the task's tokens, the tenant's today), or why a damaged counter cannot say."""
        pipe = self.redis.pipeline(transaction=False)
        for counter in account.counters:
            pipe.xinfo_stream(counter.key)
        return usage(account, _run(pipe))

    def charge(self, account: Account, tokens: int) -> list[str]:
        """Add one call's tokens to the task's and the tenant's counters; what kept a counter from
        taking them (damaged, ahead of its day, full, or lost every race), for the log."""
        missed = add_to(self.redis, list(account.counters), tokens) if tokens > 0 else []
        return [f"token counter {c.key} {why.value}: {tokens} tokens not added" for c, why in missed]

    def tokens(self, task_id: str) -> int | None:
        """Tokens the task has used so far (None when a counter of it is damaged)."""
        return tasks_tokens(self.redis, [task_id])[0]


def add_to(client: redis.Redis, counters: list[Counter], tokens: int) -> list[tuple[Counter, NotAdded]]:
    """Add `tokens` to each counter: read the tops, XADD each grown, and where another charge got
    there between the read and the add, read and add again after a pause that grows; the counters
    that did not take them, each with why."""
    missed: list[tuple[Counter, NotAdded]] = []
    for attempt in range(CHARGE_TRIES):
        if attempt:
            time.sleep(random.uniform(0, CHARGE_PAUSE_S * 2**attempt))  # spreads racers
        counters = _add_once(client, counters, tokens, missed)
        if not counters:
            return missed
    return missed + [(c, NotAdded.LOST) for c in counters]


def _add_once(
    client: redis.Redis, counters: list[Counter], tokens: int, missed: list[tuple[Counter, NotAdded]]
) -> list[Counter]:
    """One try of add_to(); the counters that lost the race, to try again."""
    pipe = client.pipeline(transaction=False)
    for counter in counters:
        pipe.xinfo_stream(counter.key)
    adds: list[tuple[Counter, int]] = []
    for counter, reply in zip(counters, _run(pipe), strict=True):
        count = top(reply)
        after = NotAdded.DAMAGED if count is None else counter.after(count, tokens)
        if isinstance(after, NotAdded):
            missed.append((counter, after))
        else:
            adds.append((counter, after))
    if not adds:
        return []
    pipe = client.pipeline(transaction=False)
    for counter, after in adds:
        pipe.xadd(counter.key, {"n": tokens}, id=f"{after}-0", maxlen=1, approximate=False)
    lost = []
    for (counter, _), result in zip(adds, _run(pipe), strict=True):
        if isinstance(result, redis.ResponseError) and "equal or smaller" in str(result):
            lost.append(counter)  # another charge got there first: add on top of it
        elif isinstance(result, redis.ResponseError):
            raise result
    return lost


def tasks_tokens(client: redis.Redis, task_ids: list[str]) -> list[int | None]:
    """Tokens each task's model calls used (None where its counter is damaged), in one round trip."""
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.xinfo_stream(keys.spent(task_id))
    return [top(info) for info in pipe.execute(raise_on_error=False)]


def _run(pipe: redis.client.Pipeline) -> list[object]:
    """Execute, keeping a command's own error as its result; a user without the rights to its
    counters is waited out (an operator reloads the users), never taken as a poison message."""
    try:
        results: list[object] = pipe.execute(raise_on_error=False)
    except redis.exceptions.NoPermissionError as exc:
        raise _no_rights(exc) from exc
    for r in results:
        if isinstance(r, redis.exceptions.NoPermissionError):
            raise _no_rights(r) from r
    return results


def _no_rights(exc: Exception) -> Retry:
    return Retry(
        f"the proposer's Redis user may not use its token counters ({exc}): reload the users with "
        "`wakeful dev up`, or `wakeful admin acl --apply` for a Redis of your own",
        after=1.0,
    )
