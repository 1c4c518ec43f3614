"""How a freeze is acknowledged: each gate and executor says which switches it has taken in.

Every switch an operator throws bumps `wk:authority:switched` after writing the switch itself.
Between two batches (every batch's handlers finished: they read their authority live, per wake),
a Progress writer reads that counter and records it in `wk:live` as "<counter> <ms>" under its
role and process. From then on every handler it starts reads the switch: so once every live
writer has recorded the new counter, no step judged before the switch is still running, and no
new intent is written for a frozen task (`wakeful freeze` waits for that, the acknowledgement).
Idle roles read it too, every TICK_S between batches, and record it as soon as it moves (and
every REFRESH_S anyway, to show they live): a freeze is taken in within a second fleet-wide unless
a batch runs longer. Times are the Redis server's, so no two hosts' clocks meet.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis

from wakeful.consumers.kafka.failures import TRANSIENT_IO
from wakeful.core.log import Log
from wakeful.state import keys

TICK_S = 0.2  # how often a role reads the switch counter, idle or busy
# How often a role restamps an unchanged record, so it reads as live (LIVE_S). A batch starts with
# its record at most REFRESH_S + TICK_S old; one that runs past LIVE_S less that is not waited for.
REFRESH_S = 0.5
LIVE_S = 5.0  # a record older than this is of a process that stopped (or hangs): not waited for


def process_name(role: str) -> str:
    """`<role>:<host pid>-<random>`: one field of wk:live per running role process."""
    return f"{role}:{os.getpid()}-{uuid.uuid4().hex[:8]}"


def due(now: float, last_read: float, seen: int | None, written: int | None, last_write: float) -> str:
    """What an acknowledging role does at `now` (monotonic seconds): "wait" until TICK_S after its
    last read; "read" the counter; once read (`seen`), "write" the record when the counter moved
    since the last one written, or REFRESH_S after it so the record stays live; else "skip"."""
    if seen is None:
        return "read" if now - last_read >= TICK_S else "wait"
    if seen != written or now - last_write >= REFRESH_S:
        return "write"
    return "skip"


def acker(client: Any, role: str, log: Log) -> Callable[[], None]:
    """The runner's between-batches step for a Progress writer (consumers/kafka/runner.py). An idle
    role reads the counter every TICK_S, one command, and writes its record only when the counter
    moved or every REFRESH_S: an idle fleet keeps Redis busy with little more than the reads."""
    name = process_name(role)
    last_read, last_write = [0.0], [0.0]
    written: list[int | None] = [None]

    def ack() -> None:
        now = time.monotonic()
        if due(now, last_read[0], None, written[0], last_write[0]) == "wait":
            return
        last_read[0] = now
        try:
            seen = int(client.get(keys.AUTH_SWITCHED) or 0)
            if due(now, last_read[0], seen, written[0], last_write[0]) != "write":
                return
            secs, micros = client.time()  # the server's clock: the CLI that waits reads the same one
            client.hset(keys.LIVE, name, f"{seen} {secs * 1000 + micros // 1000}")
            written[0], last_write[0] = seen, now
        except (*TRANSIENT_IO, redis.RedisError, ValueError) as exc:  # the next tick tries again:
            # an acknowledgement is the operator's to wait for, never a reason to stop the role (a
            # counter that is no number is the admin's to mend; it is not read as one)
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
