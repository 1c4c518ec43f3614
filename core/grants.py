"""Per-step credentials (D120), the rules: what a step asks the minter for (a Grant), whether the
minter may mint it, and the name and rights of the Redis user it makes.

A tool that declares `credential = "<downstream>"` is given, for each call, lookup and undo, a Redis
user of its own that exists for that step only: made just before the call, removed just after, and
removed by the minter's reaper once its lifetime is past if the step never said it ended. The
minter mints only for a step that is really running: the task's lease is at the grant's fence,
and an effect's op key has its intent in flight for that tool (a read-only call writes no intent,
so for one the lease is the proof). The user reaches the downstream's keys with the downstream's commands
and nothing else; the downstream itself refuses a stale fence (state/downstreams.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson

from wakeful.core import ids

PREFIX = "wkc-"  # every minted user's name starts so; no role's or downstream's does
NAME = re.compile(r"wkc-[0-9a-f]{24}")


@dataclass(frozen=True)
class Grant:
    """What one step asks for: the downstream (scope) for the tool, bound to the task, the op key
    and the fence the step runs under. `effect`: the tool changes the world (an intent is written)."""

    scope: str
    tool: str
    task_id: str
    op_key: str
    fence: int
    effect: bool = True

    def problems(self) -> list[str]:
        found = []
        if not ids.TASK_ID_RE.fullmatch(self.task_id):
            found.append(f"task id {self.task_id[:80]!r} is not a task id")
        if not ids.OP_KEY_RE.fullmatch(self.op_key):
            found.append(f"op key {self.op_key[:80]!r} is not an op key")
        if self.fence < 1:
            found.append(f"fence {self.fence} is not a fence a lease was granted")
        if not self.scope or not self.tool:
            found.append("a grant names its scope and its tool")
        return found

    def record(self, user: str, expires_ms: int) -> bytes:
        """What the store keeps of a minted credential: never its secret."""
        return orjson.dumps(
            {
                "user": user,
                "scope": self.scope,
                "tool": self.tool,
                "task_id": self.task_id,
                "op_key": self.op_key,
                "fence": self.fence,
                "expires_ms": expires_ms,
            }
        )


def unfit(grant: Grant, scopes: dict[str, str]) -> str | None:
    """Why `grant` can never be minted, whatever is stored: a malformed part, or a scope its tool
    does not declare (None: it may be, if its step is running)."""
    if problems := grant.problems():
        return "; ".join(problems)
    if scopes.get(grant.tool) != grant.scope:
        return f"tool {grant.tool!r} declares no credential for {grant.scope!r}"
    return None


def running(grant: Grant, lease: bytes | None, intent: bytes | None) -> str | None:
    """Why `grant`, already found fit (unfit), is not for a step that is running: `lease` is the
    task's lease ("<owner>:<fence>") and `intent` the op key's action-log entry, both read in the
    minter's batch (None: it is)."""
    held = lease.decode(errors="replace").rpartition(":")[2] if lease else ""
    if held != str(grant.fence):
        return f"the lease of {grant.task_id} is not held at fence {grant.fence}"
    if not grant.effect:
        return None
    try:
        entry = orjson.loads(intent) if intent else None
    except orjson.JSONDecodeError:
        entry = None
    if not isinstance(entry, dict) or entry.get("status") != "in_flight" or entry.get("tool") != grant.tool:
        return f"no intent of {grant.tool} is in flight under {grant.op_key}"
    fence = entry.get("fence")
    # a lookup after a crash runs under a newer lease than the intent was written with
    if not isinstance(fence, int) or fence > grant.fence or entry.get("task_id") != grant.task_id:
        return f"the intent under {grant.op_key} is not this step's"
    return None
