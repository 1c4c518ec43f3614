"""How a freeze is acknowledged: each gate and executor says which switches it has taken in.

Every switch an operator throws bumps `wk:authority:switched` after writing the switch itself.
Between two batches (every batch's handlers finished: they read their authority live, per wake),
a Progress writer reads that counter and records it in `wk:live` as "<counter> <ms>" under its
role and process. From then on every handler it starts reads the switch: so once every live
writer has recorded the new counter, no step judged before the switch is still running, and no
new intent is written for a frozen task (`wakeful freeze` waits for that, the acknowledgement).
Idle roles record it too, every TICK_S between batches: a freeze is taken in within a second
fleet-wide unless a batch runs longer. Times are the Redis server's, so no two hosts' clocks meet.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from wakeful.consumers.failures import TRANSIENT_IO
from wakeful.core.log import Log
from wakeful.state import keys

TICK_S = 0.2  # how often a role records what it has taken in, idle or busy
LIVE_S = 5.0  # a record older than this is of a process that stopped (or hangs): not waited for


def process_name(role: str) -> str:
    """`<role>:<host pid>-<random>`: one field of wk:live per running role process."""
    return f"{role}:{os.getpid()}-{uuid.uuid4().hex[:8]}"


def acker(client: Any, role: str, log: Log) -> Callable[[], None]:
    """The runner's between-batches step for a Progress writer (consumers/runner.py)."""
    name = process_name(role)
    last = [0.0]

    def ack() -> None:
        now = time.monotonic()
        if now - last[0] < TICK_S:
            return
        last[0] = now
        try:
            seen = client.get(keys.AUTH_SWITCHED)
            secs, micros = client.time()  # the server's clock: the CLI that waits reads the same one
            client.hset(keys.LIVE, name, f"{int(seen or 0)} {secs * 1000 + micros // 1000}")
        except (*TRANSIENT_IO, redis.RedisError) as exc:  # the next tick tries again: an
            # acknowledgement is the operator's to wait for, never a reason to stop the role
            log("role.ack_failed", error=repr(exc)[:200])

    return ack


def waiting_for(live: dict[str, str], switched: int, now_ms: int) -> tuple[list[str], list[str]]:
    """(live processes that have taken in `switched`, live ones that have not yet), from wk:live
    as read (field -> "<counter> <ms>"). A record that does not read as one is of no live process."""
    done: list[str] = []
    pending: list[str] = []
    for name, value in sorted(live.items()):
        try:
            seen, at = (int(part) for part in value.split())
        except ValueError:
            continue
        if now_ms - at > LIVE_S * 1000:
            continue
        (done if seen >= switched else pending).append(name)
    return done, pending
