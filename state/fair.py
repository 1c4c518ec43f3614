"""A tenant's tasks in flight and its held creates, counted in Redis for its limit (D108).

The gate admits a create with `take` (fair_take) once the workflow has decided it: the task goes
into the tenant's flight set while it is under its limit, or into its queue, by its workflow's
priority and then by arrival (`place`, D110), and the create is held. The gate and the executor
give a slot back (`give_back`) after a change whose stored state no longer occupies one
(workflow/limits.py). The timer lets held creates in, in the queue's order, as slots free
(`heads`, then `release`: fair_release) and wakes each, and unmarks a tenant whose queue is empty
(`unmark`). The sets are the gate's and the executor's own count, not the
task index, which the relay fills behind a flood.

Both functions name only the tenant's two keys (one hash tag, one Redis Cluster slot). The set of
tenants with a queue is another slot's: the gate marks a tenant after its create is queued, and
the timer unmarks one only after it has found the queue empty, and then looks again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from wakeful.state import keys
from wakeful.state.functions import Function, call

# KEYS[1] the tenant's flight set, KEYS[2] its queue; ARGV[1] its limit, ARGV[2] now (ms),
# ARGV[3] the task id, ARGV[4] its place in the queue (place(): its priority, then now).
# returns: 1 when the task holds a slot (it did already: a redelivery or a replay costs nothing;
# or it fits: room under the limit, and nothing queued before it that would not fit too), 0 when
# it is held: queued at its first arrival's place (NX), behind those before it.
TAKE = Function(
    "fair_take",
    """
local task = ARGV[3]
if redis.call('ZSCORE', KEYS[1], task) then return 1 end
local room = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
if room > 0 then
  local rank = redis.call('ZRANK', KEYS[2], task)
  if (not rank and redis.call('ZCARD', KEYS[2]) == 0) or (rank and rank < room) then
    redis.call('ZREM', KEYS[2], task)
    redis.call('ZADD', KEYS[1], ARGV[2], task)
    return 1
  end
end
redis.call('ZADD', KEYS[2], 'NX', ARGV[4], task)
return 0
""",
)

# KEYS[1] the tenant's flight set, KEYS[2] its queue; ARGV[1] its limit, ARGV[2] now (ms),
# ARGV[3...] the queued tasks the timer has woken, oldest first.
# Moves each of them that is still queued into the flight set while there is room.
# returns: how many tasks the queue holds after.
RELEASE = Function(
    "fair_release",
    """
local room = tonumber(ARGV[1]) - redis.call('ZCARD', KEYS[1])
for i = 3, #ARGV do
  if room <= 0 then break end
  if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 then
    redis.call('ZADD', KEYS[1], ARGV[2], ARGV[i])
    room = room - 1
  end
end
return redis.call('ZCARD', KEYS[2])
""",
)

FUNCTIONS = (TAKE, RELEASE)


PRIORITIES = 10  # a workflow's priority is 0 to 9, the higher let in first
_BAND = 10**14  # ms: past any time until the year 5138, so a priority outranks any age


def place(priority: int, now_ms: int) -> int:
    """A held create's place in its tenant's queue: every create of a higher priority before it,
    and among its own priority, the older first. Below 2**53, as a Redis score must be."""
    return (PRIORITIES - 1 - max(0, min(PRIORITIES - 1, priority))) * _BAND + now_ms


def take(
    client: redis.Redis, tenant: str, task_id: str, limit: int, now_ms: int, *, priority: int = 0
) -> bool:
    """Admit `task_id`'s create under `tenant`'s `limit` (True), or queue it by its `priority`
    (False). A queued tenant is marked for the timer after its queue holds the task, never before."""
    flight, queue = keys.fair_flight(tenant), keys.fair_queue(tenant)
    admitted = call(client, TAKE, [flight, queue], [limit, now_ms, task_id, place(priority, now_ms)])
    if not admitted:
        client.sadd(keys.FAIR_QUEUED, tenant)
    return bool(admitted)


def give_back(client: redis.Redis, tenant: str, task_id: str) -> None:
    """The task no longer occupies a slot; giving back one it never took changes nothing."""
    client.zrem(keys.fair_flight(tenant), task_id)


def count_again(client: redis.Redis, tenant: str, task_id: str, now_ms: int) -> None:
    """A parked task a person let go on takes a slot again, whatever the room (never held)."""
    client.zadd(keys.fair_flight(tenant), {task_id: now_ms}, nx=True)


def queued(client: redis.Redis) -> list[str]:
    """The tenants with held creates, as marked."""
    found: Any = client.smembers(keys.FAIR_QUEUED)
    return sorted(t.decode() for t in found)


def heads(client: redis.Redis, tenant: str, limit: int, most: int) -> tuple[list[str], bool]:
    """The queued tasks that fit under `limit` now, in the queue's order (the highest priority,
    then the oldest, first; at most `most`), and whether the queue is empty."""
    pipe = client.pipeline(transaction=False)  # one slot: the tenant's
    pipe.zcard(keys.fair_flight(tenant))
    pipe.zrange(keys.fair_queue(tenant), 0, max(1, min(limit, most)) - 1)
    pipe.zcard(keys.fair_queue(tenant))
    in_flight, first, waiting = pipe.execute()
    room = max(0, limit - int(in_flight))
    return [t.decode() for t in first[:room]], int(waiting) == 0


def release(client: redis.Redis, tenant: str, limit: int, now_ms: int, woken: Sequence[str]) -> int:
    """Move the woken tasks still queued into the flight set while there is room; the number
    queued after."""
    flight, queue = keys.fair_flight(tenant), keys.fair_queue(tenant)
    return int(call(client, RELEASE, [flight, queue], [limit, now_ms, *woken]))


def unmark(client: redis.Redis, tenant: str) -> None:
    """Unmark a tenant whose queue was found empty, then look again: a create queued meanwhile
    marked it before or after, and either way it stays marked."""
    client.srem(keys.FAIR_QUEUED, tenant)
    if client.zcard(keys.fair_queue(tenant)):
        client.sadd(keys.FAIR_QUEUED, tenant)
