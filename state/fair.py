"""A tenant's tasks in flight and its held creates, counted in Redis for its limits (D108), and
each workflow's of them for the workflow's limit (D112).

The gate admits a create with `take` (fair_take) once the workflow has decided it: the task goes
into the tenant's flight set and its workflow's while both are under their limits, or into a
queue, by its workflow's priority and then by arrival (`place`, D110), and the create is held. A
create waits in its workflow's own queue while a limit holds the workflow, else in the tenant's:
a workflow at its limit holds back none of the tenant's other creates. While any of the tenant's
creates is held, a new one is queued too, so that a slot freed goes to the held ones first.
The gate and the executor give a slot back (`give_back`) after a change whose stored state no
longer occupies one (workflow/limits.py). The timer lets held creates in, queue by queue, in each
queue's order, as slots free (`heads`, then `release`: fair_release) and wakes each, and unmarks a
tenant whose queues are empty (`unmark`). The sets are the gate's and the executor's own count, not
the task index, which the relay fills behind a flood.

Both functions name only the tenant's keys (one hash tag, one Redis Cluster slot). The set of
tenants with a queue is another slot's: the gate marks a tenant after its create is queued, and
the timer unmarks one only after it has found its queues empty, and then looks again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from wakeful.state import keys, orphans
from wakeful.state.functions import Function, call

# KEYS[1] the tenant's flight set, KEYS[2] the queue the create waits in (its workflow's or the
# tenant's), KEYS[3] its workflow's flight set, KEYS[4] the tenant's set of queues with creates,
# KEYS[5] the tenant's own queue; ARGV[1] the tenant's limit, ARGV[2] now (ms), ARGV[3] the task
# id, ARGV[4] its place in the queue (place(): its priority, then now), ARGV[5] the workflow's
# limit, ARGV[6] the queue's name in KEYS[4].
# returns: 1 when the task holds a slot (it did already: a redelivery or a replay costs nothing;
# or it fits: room under both limits, and no create of the tenant held, or it is queued where it
# would fit), 0 when it is held: queued at its first arrival's place (NX), behind those before it.
TAKE = Function(
    "fair_take",
    """
local task = ARGV[3]
if redis.call('ZSCORE', KEYS[1], task) then
  redis.call('ZADD', KEYS[3], 'NX', ARGV[2], task)
  return 1
end
local room = math.min(tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1]),
                      tonumber(ARGV[5]) - redis.call('ZCARD', KEYS[3]))
if room > 0 then
  local rank = redis.call('ZRANK', KEYS[2], task)
  local none_held = redis.call('SCARD', KEYS[4]) == 0 and redis.call('ZCARD', KEYS[5]) == 0
    and redis.call('ZCARD', KEYS[2]) == 0
  if (not rank and none_held) or (rank and rank < room) then
    redis.call('ZREM', KEYS[2], task)
    redis.call('ZADD', KEYS[1], ARGV[2], task)
    redis.call('ZADD', KEYS[3], ARGV[2], task)
    return 1
  end
end
redis.call('ZADD', KEYS[2], 'NX', ARGV[4], task)
redis.call('SADD', KEYS[4], ARGV[6])
return 0
""",
)

# KEYS[1] the tenant's flight set, KEYS[2] a queue of its, KEYS[3] the queue's workflow's flight
# set (the tenant's again for the tenant's queue), KEYS[4] the tenant's set of queues with
# creates; ARGV[1] the tenant's limit, ARGV[2] now (ms), ARGV[3] the workflow's limit, ARGV[4] the
# queue's name in KEYS[4], ARGV[5...] the queued tasks the timer has woken, oldest first.
# Moves each of them that is still queued into the flight sets while there is room under both.
# returns: how many tasks the queue holds after (at 0 it leaves KEYS[4]).
RELEASE = Function(
    "fair_release",
    """
local room = math.min(tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1]),
                      tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[3]))
for i = 5, #ARGV do
  if room <= 0 then break end
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i])
    redis.call('ZADD', KEYS[3], ARGV[2], ARGV[i])
    room = room - 1
  end
end
local left = redis.call('ZCARD', KEYS[2])
if left == 0 then redis.call('SREM', KEYS[4], ARGV[4]) end
return left
""",
)

FUNCTIONS = (TAKE, RELEASE)


MOST = 1_000_000  # no limit: as many as a record may say (authority/limit_store.MAX_IN_FLIGHT)
PRIORITIES = 10  # a workflow's priority is 0 to 9, the higher let in first
_BAND = 10**14  # ms: past any time until the year 5138, so a priority outranks any age


def place(priority: int, now_ms: int) -> int:
    """A held create's place in its tenant's queue: every create of a higher priority before it,
    and among its own priority, the older first. Below 2**53, as a Redis score must be."""
    return (PRIORITIES - 1 - max(0, min(PRIORITIES - 1, priority))) * _BAND + now_ms


TENANT_QUEUE = "-"  # the tenant's own queue's name in its set of queues


@dataclass(frozen=True)
class Line:
    """Where a create is counted and held: its tenant, its workflow (app, name: None counts it
    under the tenant only), and whether it waits in its workflow's own queue (a limit holds the
    workflow) or in the tenant's."""

    tenant: str
    workflow: tuple[str, str] | None = None
    own_queue: bool = False

    @property
    def flight(self) -> str:
        return keys.fair_flight(self.tenant)

    @property
    def wflight(self) -> str:
        return keys.fair_wflight(self.tenant, *self.workflow) if self.workflow else self.flight

    @property
    def queue(self) -> str:
        if self.own_queue and self.workflow:
            return keys.fair_wqueue(self.tenant, *self.workflow)
        return keys.fair_queue(self.tenant)

    @property
    def name(self) -> str:
        """The queue's name in the tenant's set of queues."""
        if self.own_queue and self.workflow:
            return orjson.dumps(list(self.workflow)).decode()
        return TENANT_QUEUE


def take(
    client: redis.Redis,
    line: Line,
    task_id: str,
    limit: int,
    now_ms: int,
    *,
    priority: int = 0,
    workflow_limit: int = MOST,
) -> bool:
    """Admit `task_id`'s create under its tenant's `limit` and its workflow's (True), or queue it
    by its `priority` (False). A queued tenant is marked for the timer after its queue holds the
    task, never before."""
    names = [
        line.flight,
        line.queue,
        line.wflight,
        keys.fair_queues(line.tenant),
        keys.fair_queue(line.tenant),
    ]
    said: list[str | int] = [limit, now_ms, task_id, place(priority, now_ms), workflow_limit, line.name]
    admitted = call(client, TAKE, names, said)
    if not admitted:
        client.sadd(keys.FAIR_QUEUED, line.tenant)
    return bool(admitted)


def give_back(
    client: redis.Redis, tenant: str, task_id: str, workflow: tuple[str, str] | None = None
) -> None:
    """The task no longer occupies a slot; giving back one it never took changes nothing."""
    pipe = client.pipeline(transaction=False)  # one slot: the tenant's
    pipe.zrem(keys.fair_flight(tenant), task_id)
    if workflow is not None:
        pipe.zrem(keys.fair_wflight(tenant, *workflow), task_id)
    pipe.execute()


def count_again(
    client: redis.Redis, tenant: str, task_id: str, now_ms: int, workflow: tuple[str, str] | None = None
) -> None:
    """A parked task a person let go on takes a slot again, whatever the room (never held)."""
    pipe = client.pipeline(transaction=False)
    pipe.zadd(keys.fair_flight(tenant), {task_id: now_ms}, nx=True)
    if workflow is not None:
        pipe.zadd(keys.fair_wflight(tenant, *workflow), {task_id: now_ms}, nx=True)
    pipe.execute()


def queued(client: redis.Redis) -> list[str]:
    """The tenants with held creates, as marked."""
    found: Any = client.smembers(keys.FAIR_QUEUED)
    return sorted(t.decode() for t in found)


def lines(client: redis.Redis, tenant: str) -> tuple[list[Line], list[bytes]]:
    """The tenant's queues: its own first, then each workflow's with creates, as its set of
    queues names them; and the names that do not read as one (to be dropped)."""
    found: Any = client.smembers(keys.fair_queues(tenant))
    every, bad = [Line(tenant)], []
    for raw in sorted(found):
        if raw == TENANT_QUEUE.encode():
            continue
        pair = _pair(raw)
        if pair is None:
            bad.append(raw)
        else:
            every.append(Line(tenant, pair, own_queue=True))
    return every, bad


def _pair(raw: bytes) -> tuple[str, str] | None:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    ok = isinstance(doc, list) and len(doc) == 2 and all(isinstance(n, str) and n for n in doc)
    return (doc[0], doc[1]) if ok else None


def heads(
    client: redis.Redis, line: Line, limit: int, most: int, *, workflow_limit: int = MOST
) -> tuple[list[str], bool]:
    """The creates queued in `line`'s queue that fit under `limit` and its workflow's now, in the
    queue's order (the highest priority, then the oldest, first; at most `most`), and whether the
    queue is empty."""
    pipe = client.pipeline(transaction=False)  # one slot: the tenant's
    pipe.zcard(line.flight)
    pipe.zcard(line.wflight)
    pipe.zrange(line.queue, 0, max(1, min(limit, workflow_limit, most)) - 1)
    pipe.zcard(line.queue)
    in_flight, of_workflow, first, waiting = pipe.execute()
    room = max(0, min(limit - int(in_flight), workflow_limit - int(of_workflow)))
    return [t.decode() for t in first[:room]], int(waiting) == 0


def release(
    client: redis.Redis,
    line: Line,
    limit: int,
    now_ms: int,
    woken: Sequence[str],
    *,
    workflow_limit: int = MOST,
) -> int:
    """Move the woken creates still queued in `line`'s queue into the flight sets while there is
    room; the number queued there after."""
    names = [line.flight, line.queue, line.wflight, keys.fair_queues(line.tenant)]
    return int(call(client, RELEASE, names, [limit, now_ms, workflow_limit, line.name, *woken]))


def forget(client: redis.Redis, tenant: str, names: Sequence[bytes]) -> None:
    """Drop names from the tenant's set of queues that name no queue (planted, or damaged)."""
    if names:
        client.srem(keys.fair_queues(tenant), *names)


def drop_if_empty(client: redis.Redis, line: Line) -> None:
    """Drop a queue found empty from its tenant's set of queues, then look again, as `unmark` does."""
    client.srem(keys.fair_queues(line.tenant), line.name)
    if client.zcard(line.queue):
        client.sadd(keys.fair_queues(line.tenant), line.name)


def mend(client: redis.Redis, before_ms: int) -> int:
    """Give back every slot admitted before `before_ms` whose task has no state: removed by hand or
    by a purge while it held one, or let in and then refused at its replay, where no change gave it
    back. A slot is never taken from a stored task, and a create let in and not yet replayed takes
    its slot again (or is held again) at its replay. How many went."""
    patterns = (keys.PATTERN_FAIR_FLIGHT, keys.PATTERN_FAIR_WFLIGHT)
    return sum(orphans.drop_missing(client, p, keys.state, before=before_ms) for p in patterns)


def unmark(client: redis.Redis, tenant: str) -> None:
    """Unmark a tenant whose queues were found empty, then look again: a create queued meanwhile
    marked it before or after, and either way it stays marked."""
    client.srem(keys.FAIR_QUEUED, tenant)
    if client.zcard(keys.fair_queue(tenant)) or client.scard(keys.fair_queues(tenant)):
        client.sadd(keys.FAIR_QUEUED, tenant)
