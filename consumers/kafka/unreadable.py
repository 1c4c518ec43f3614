"""Tasks a worker cannot open: sealed under a key its keyring lacks (D9, D88).

That is this worker's configuration, not the task's state (a worker deployed before a `wakeful keys
rotate` reached it, or a key dropped from its keyring), so the task is not quarantined. Nor is its
message retried: a retry holds every task behind it on the partition for as long as the keyring
stays short, which may be for ever. The gate holds the wake on the task's held list (consumers/gate/hold.py)
and the executor drops the proposal; either marks the task here, in `wk:unreadable`, and in
`wk:held` (so the timer's sweep leaves it be), and logs `<role>.unreadable` with the fix.

The fix is the key back in the keyring and the worker restarted, so a gate or executor wakes every
marked task when it starts (wake()): a deadline due now, through the timer. A worker that still
lacks the key marks the task again; one that has it drains the held wakes, oldest first.
"""

from __future__ import annotations

import time
from typing import Any

import redis

from wakeful.core.errors import KeyringError
from wakeful.core.log import Log
from wakeful.state import keys
from wakeful.state.pinned import Command

FIX = (
    "add the key back to this worker's keyring (WAKEFUL_KEYRING; `wakeful keys list` shows its ids) "
    "and restart it: a gate or executor wakes every task marked unreadable when it starts"
)
UPGRADE = (
    "this role's Redis user lacks this release's rights: run `wakeful dev up` or `wakeful admin acl --apply`"
)
BATCH = 500  # tasks woken per round trip
UNDECODED = (
    "its stored state does not decode in this release (written by a newer one, or damaged): run the "
    "release that wrote it, or look with `wakeful task show`; a gate or executor wakes it when it starts"
)


def fix_for(exc: Exception) -> str:
    """What to do about a task this worker could not open: the key back, or the release that reads it."""
    return FIX if isinstance(exc, KeyringError) else UNDECODED


def marks(task_id: str) -> list[Command]:
    """The writes that mark task_id unreadable here (and held, so no sweep wakes it meanwhile)."""
    return [("SADD", keys.UNREADABLE_TASKS, task_id), ("SADD", keys.HELD_TASKS, task_id)]


def mark(client: Any, task_id: str) -> None:
    pipe = client.pipeline(transaction=False)
    for command in marks(task_id):
        pipe.execute_command(*command)
    pipe.execute()


def wake(client: Any, log: Log) -> list[str]:
    """Wake every task marked unreadable (a deadline due now) and unmark it: this worker may hold
    the key now. Returns the tasks woken."""
    marked = sorted(t.decode() for t in client.smembers(keys.UNREADABLE_TASKS))
    now_ms = int(time.time() * 1000)
    for start in range(0, len(marked), BATCH):
        batch = marked[start : start + BATCH]
        client.zadd(keys.DEADLINES, {f"{task}|{now_ms}": now_ms for task in batch})
        client.srem(keys.UNREADABLE_TASKS, *batch)
        client.srem(keys.HELD_TASKS, *batch)
    if marked:
        log("role.unreadable_woken", tasks=len(marked))
    return marked


def wake_at_start(client: Any, log: Log) -> None:
    """wake(), at a role's start: a failure is logged, not raised (the role's work comes first; the
    next start, or a thaw, wakes the marked tasks)."""
    try:
        wake(client, log)
    except redis.exceptions.NoPermissionError as exc:
        log("role.unreadable_unwoken", error=repr(exc), fix=UPGRADE)
    except redis.RedisError as exc:
        log("role.unreadable_unwoken", error=repr(exc))
