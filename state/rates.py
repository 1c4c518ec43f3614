"""A tool's calls per second (D109) and its calls at once (D111), counted in Redis for its limits:
the executor asks before a tool's call, and a call that would go over waits its turn.

One key per app and tool holds the time its next call may go at no cost (the generic cell rate
algorithm): each call moves it on by the interval (1/rate), and a call may go while that time is
at most `burst` - 1 intervals ahead of now. The time is Redis's own clock, so executors on machines
whose clocks differ share one count. The key lapses once it is in the past: an idle tool costs
nothing.

A tool's calls at once are a sorted set of the op keys whose calls run now, each scored by when
its slot lapses: a slot lives a lease's time from its take, and the call's heartbeat takes it
again at each renewal of the task's lease, so a call that outlives an executor (SIGKILL) holds
its slot no longer than its lease. A slot is taken again under the same op key at no cost (a
redelivery, a renewal); the call's end gives it back (ZREM).
"""

from __future__ import annotations

import redis

from wakeful.state import keys
from wakeful.state.functions import Function, call

# KEYS[1] the tool's key; ARGV[1] the interval between calls (microseconds), ARGV[2] the burst
# (calls that may go at once after a quiet spell).
# returns: 0 when the call may go now (counted), else the microseconds until it may (not counted).
# The count never stands more than a burst ahead of now: a value further on (put there by hand, or
# left by a rate since lowered) is read as a full burst, so it can never hold the tool for longer.
TAKE = Function(
    "rate_take",
    """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local next_free = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if next_free < now then next_free = now end
if next_free > now + burst * interval then next_free = now + burst * interval end
local wait = next_free - now - (burst - 1) * interval
if wait > 0 then return wait end
next_free = next_free + interval
redis.call('SET', KEYS[1], string.format('%d', next_free), 'PX', math.ceil((next_free - now) / 1000) + 1)
return 0
""",
)

# KEYS[1] the tool's calls in flight; ARGV[1] the step's op key, ARGV[2] the most at once, ARGV[3]
# how long the slot lives (ms, Redis's clock).
# returns: 1 when the call holds a slot now (it did already, or there was room: it lives ARGV[3]
# from now), 0 when the tool is full (nothing changed but the lapsed slots gone). A slot said to
# live more than an hour (or ARGV[3], if longer) from now was planted or damaged, never taken:
# it goes with the lapsed ones, so no value can hold a tool's slot for longer.
SLOT = Function(
    "slot_take",
    """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '(' .. (now + math.max(3600000, tonumber(ARGV[3]))), '+inf')
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]) + 1)
return 1
""",
)

FUNCTIONS = (TAKE, SLOT)


def take(client: redis.Redis, app: str, tool: str, calls_per_s: float, burst: int) -> float:
    """Count a call of `tool` of `app` under its limit: 0.0 when it may go now, else the seconds
    until it may (nothing counted)."""
    interval = max(1, round(1_000_000 / calls_per_s))
    waited = call(client, TAKE, [keys.tool_rate(app, tool)], [interval, max(1, burst)])
    return int(waited) / 1_000_000


def slot_take(client: redis.Redis, app: str, tool: str, op_key: str, *, most: int, ttl_ms: int) -> bool:
    """Hold a slot of `tool` of `app` for the call under `op_key` for `ttl_ms` from now (True), or
    find the tool at `most` calls at once (False: nothing taken)."""
    slots = keys.tool_slots(app, tool)
    return bool(call(client, SLOT, [slots], [op_key, max(1, most), max(1, ttl_ms)]))


def slot_give_back(client: redis.Redis, app: str, tool: str, op_key: str) -> None:
    """The call under `op_key` ended: its slot is free; giving back one it does not hold changes nothing."""
    client.zrem(keys.tool_slots(app, tool), op_key)
