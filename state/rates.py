"""A tool's calls per second, counted in Redis for its limit (D109): the executor asks before a
tool's call, and a call that would go over waits its turn.

One key per app and tool holds the time its next call may go at no cost (the generic cell rate
algorithm): each call moves it on by the interval (1/rate), and a call may go while that time is
at most `burst` - 1 intervals ahead of now. The time is Redis's own clock, so executors on machines
whose clocks differ share one count. The key lapses once it is in the past: an idle tool costs
nothing.
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

FUNCTIONS = (TAKE,)


def take(client: redis.Redis, app: str, tool: str, calls_per_s: float, burst: int) -> float:
    """Count a call of `tool` of `app` under its limit: 0.0 when it may go now, else the seconds
    until it may (nothing counted)."""
    interval = max(1, round(1_000_000 / calls_per_s))
    waited = call(client, TAKE, [keys.tool_rate(app, tool)], [interval, max(1, burst)])
    return int(waited) / 1_000_000
