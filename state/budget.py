"""The model token budget: tokens used per task, and per tenant per UTC day (state/keys.py).

The proposer reads both counters before a model call (one round trip) and makes no call once
either is spent; after a call it adds what the call cost to both (one more round trip, none when
the model reports no tokens). It is the only writer, as the `proposer` ACL user, whose rights
reach these counters and nothing else (state/acl.py).

A counter is not trusted for holding a number: one that does not read as a whole number of tokens
counts as spent, with the reason, so a damaged counter parks a task instead of lifting its limit.
Counting is at least once: a proposer that dies between a call and its charge has the call made
again by whichever process reads the request next, and both calls count.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from wakeful.core.retry import Retry
from wakeful.state import keys

# More than any model's context and reply together: a report above it is a broken adapter, never
# believed, and charged at this ceiling so that it cannot slip past a budget either.
MAX_CALL_TOKENS = 10_000_000
COUNTER_SHOWN_CHARS = 40  # of a damaged counter, in a reason


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

    def __post_init__(self) -> None:
        keys.tenant_tokens(self.tenant, self.day)  # ValueError: a part that cannot name its counter
        keys.tokens(self.task_id)

    @classmethod
    def at(cls, task_id: str, tenant: str, now: datetime) -> Account:
        return cls(task_id, tenant, now.astimezone(UTC).strftime("%Y%m%d"))

    @property
    def task_key(self) -> str:
        return keys.tokens(self.task_id)

    @property
    def tenant_key(self) -> str:
        return keys.tenant_tokens(self.tenant, self.day)


def used(raw: bytes | str | None) -> int | None:
    """The tokens a counter holds (0 when it does not exist), or None when it is not a count."""
    if raw is None:
        return 0
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    if not text.isascii() or not text.isdigit():
        return None
    return int(text)


def spent(limits: Limits, account: Account, task_raw: object, tenant_raw: object) -> str | None:
    """Why no model call may be made for the task now, or None when both budgets have room."""
    counts: list[int] = []
    for key, raw in ((account.task_key, task_raw), (account.tenant_key, tenant_raw)):
        count = used(raw) if raw is None or isinstance(raw, bytes | str) else None  # else: a read error
        if count is None:
            shown = repr(raw)[:COUNTER_SHOWN_CHARS]
            return f"token counter {key} holds {shown}, not a count of tokens: the budget is treated as spent"
        counts.append(count)
    task_used, tenant_used = counts
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
        if not self.limits.task and not self.limits.tenant:
            return None
        pipe = self.redis.pipeline(transaction=False)
        pipe.get(account.task_key)
        pipe.get(account.tenant_key)
        task_raw, tenant_raw = _run(pipe)
        return spent(self.limits, account, task_raw, tenant_raw)

    def charge(self, account: Account, tokens: int) -> list[str]:
        """Add one call's tokens to the task's and the tenant's day counters; what went wrong with a
        counter that could not take them (already damaged: the next check refuses on it)."""
        if tokens <= 0:
            return []
        pipe = self.redis.pipeline(transaction=False)
        pipe.incrby(account.task_key, tokens)
        pipe.incrby(account.tenant_key, tokens)
        pipe.expire(account.tenant_key, keys.TENANT_TOKENS_TTL_S)
        return [f"{type(r).__name__}: {r}" for r in _run(pipe) if isinstance(r, redis.ResponseError)]

    def tokens(self, task_id: str) -> int | None:
        """Tokens the task has used so far (None when its counter is damaged)."""
        return used(self.redis.get(keys.tokens(task_id)))


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
        "`wakeful dev up`, or `wakeful dev acl --apply` for a Redis of your own",
        after=1.0,
    )
