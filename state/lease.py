"""Per-task leases: a token-owned key plus a monotonic fencing token.

A lease is `wk:{T}:lease = "<owner>:<fence>"` with a PX ttl. The fence comes from INCR on
`wk:{T}:fence` at every grant, so a newer holder always has a larger fence than any older one; the
store refuses a write whose fence is older than the one that last wrote the task, and downstream
calls carry the fence too. Extend and release go through functions that check the token
(state/functions.py: the admin loads them, the executor only calls them), but for a release inside
a close's transaction: a plain DEL under the WATCH that read the holder's token (`release_inside`).
Only the executor holds leases; the gate needs a task's lease free (docs/decisions.md D49).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any

import redis

from wakeful.core.errors import LeaseBusy, LeaseLost
from wakeful.state import functions, keys
from wakeful.state.functions import Function, call

# KEYS[1] lease key, KEYS[2] fence counter; ARGV[1] owner id, ARGV[2] ttl in ms.
# returns: the new fencing token, or false when another owner holds the lease.
ACQUIRE = Function(
    "lease_acquire",
    """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local fence = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. ':' .. fence, 'PX', ARGV[2])
return fence
""",
)

# KEYS[1] lease key; ARGV[1] token "<owner>:<fence>", ARGV[2] ttl in ms.
# returns: 1 when extended, 0 when the token no longer holds the lease.
# allow-oom: it only moves an expiry, so a full Redis still lets a holder keep its lease.
EXTEND = Function(
    "lease_extend",
    """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
""",
    ("allow-oom",),
)

# KEYS[1] lease key; ARGV[1] token "<owner>:<fence>".
# returns: 1 when released, 0 when the token did not hold the lease (nothing is touched).
# allow-oom: it only frees memory, so a full Redis still lets a holder hand its lease back.
RELEASE = Function(
    "lease_release",
    """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
""",
    ("allow-oom",),
)

FUNCTIONS = (ACQUIRE, EXTEND, RELEASE)


@dataclass(frozen=True)
class Lease:
    task_id: str
    owner: str
    fence: int
    ttl_ms: int

    @property
    def token(self) -> str:
        return f"{self.owner}:{self.fence}"


class Leases:
    """Acquire, extend and release per-task leases for one worker (`owner`)."""

    def __init__(
        self, client: redis.Redis, owner: str | None = None, ttl_ms: int = keys.LEASE_TTL_MS
    ) -> None:
        self.owner = owner or f"w-{secrets.token_hex(6)}"
        self.ttl_ms = ttl_ms
        self.client = client

    def acquire(self, task_id: str) -> Lease:
        fence = call(
            self.client, ACQUIRE, [keys.lease(task_id), keys.fence(task_id)], [self.owner, self.ttl_ms]
        )
        if not fence:
            raise LeaseBusy(task_id)
        return Lease(task_id, self.owner, int(fence), self.ttl_ms)

    def extend(self, lease: Lease) -> Lease:
        if not call(self.client, EXTEND, [keys.lease(lease.task_id)], [lease.token, self.ttl_ms]):
            raise LeaseLost(lease.task_id, lease.token, "expired or taken before it was extended")
        return Lease(lease.task_id, lease.owner, lease.fence, self.ttl_ms)

    def release(self, lease: Lease) -> bool:
        """True when this call released it; False when it had already expired or moved on."""
        return bool(call(self.client, RELEASE, [keys.lease(lease.task_id)], [lease.token]))

    # ---- the same, riding in a caller's batch: a lease then costs no round trip of its own ----

    def acquire_command(self, task_id: str) -> tuple[Any, ...]:
        """acquire() as a command. Put it first in a batch: the reads after it run under the lease."""
        return functions.command(
            ACQUIRE, [keys.lease(task_id), keys.fence(task_id)], [self.owner, self.ttl_ms]
        )

    def granted(self, task_id: str, reply: Any) -> Lease:
        """The lease that acquire_command's reply grants; LeaseBusy when another owner holds it."""
        fence = functions.reply(ACQUIRE, reply)
        if not fence:
            raise LeaseBusy(task_id)
        return Lease(task_id, self.owner, int(fence), self.ttl_ms)

    @staticmethod
    def release_inside(held: Held) -> tuple[Any, ...]:
        """release() as a plain DEL for the caller's transaction, only between a MULTI and an EXEC
        whose WATCH covers the lease since a read that found this holder's token: the EXEC then
        deletes this holder's lease or nothing, as RELEASE would, for one command instead of three
        (docs/decisions.md D49). Call `held.sent()` once the EXEC has returned; a lease not marked
        sent is released on its own by `finish`."""
        return ("DEL", keys.lease(held.lease.task_id))

    def finish(self, held: Held) -> None:
        """Release the lease unless a batch already did (a handler's `finally`)."""
        if not held.released:
            self.release(held.lease)


@dataclass
class Held:
    """A lease in use by one handler, and whether a batch of its has released it yet."""

    lease: Lease
    released: bool = field(default=False)

    def sent(self) -> None:
        self.released = True
