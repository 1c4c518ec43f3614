"""Writing what wakeful.log holds back into Redis: the admin's side of `wakeful recover` (D70).

Each task folded from the log (state/rebuild.py) is restored in two round trips on a connection of
its own slot: WATCH its counter and state, read them; then one MULTI ... EXEC that writes its sealed
checkpoint, moves its counter forward to that version, and puts back its inbox marks, action log,
fence counter, receipts and quarantine marker. A task Redis holds at the
log's version or past it is left as it is (recover runs twice safely; Redis may know more than the
log's last record). The checkpoint is opened and checked with the same code a worker loads it
with before anything is written: a log record is not trusted because it is on the log.

Outside the task's slot, after its transaction: each pending wait's deadline and correlation id
(the timer index), the task index, and a wake for an open task that waits for nothing (the message
that would have moved it on may have been read before Redis was lost: the gate judges it again
from its stored state, and asks the model only where its stage offers a tool).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import redis

from wakeful.core.errors import IntegrityError, KeyringError, TamperedState
from wakeful.core.index_signing import IndexKeys
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.state import checks, keys, last_step
from wakeful.state.index import Index
from wakeful.state.pinned import Pinned
from wakeful.state.rebuild import Folded, fence_after
from wakeful.state.seal import Sealer

# Whether a restored task must be woken: it is open and waits for nothing (the caller's app says).
Wakes = Callable[[Checkpoint], bool]


@dataclass
class Restored:
    """What one pass did, task by task: restored, left (Redis already holds it), or not restored."""

    restored: list[str] = field(default_factory=list)
    woken: list[str] = field(default_factory=list)
    left: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    index_skipped: list[str] = field(default_factory=list)

    def merge(self, other: Restored) -> None:
        self.restored += other.restored
        self.woken += other.woken
        self.left |= other.left
        self.failed |= other.failed
        self.index_skipped += other.index_skipped


class Restorer:
    def __init__(
        self,
        client: redis.Redis,
        sealer: Sealer,
        wakes: Wakes,
        now: datetime,
        index_keys: IndexKeys | None = None,
    ) -> None:
        self.client = client
        self.sealer = sealer
        self.wakes = wakes
        self.now = now
        self.index = Index(client, index_keys)  # the relay's key: what it rebuilds is signed

    def restore(self, tasks: Sequence[Folded]) -> Restored:
        done = Restored()
        latest: list[bytes] = []
        for task in tasks:
            why = task.unrestorable()
            if why is not None:
                done.failed[task.task_id] = why
                continue
            try:
                indexed = self._one(task, done)
            except IntegrityError as exc:
                done.failed[task.task_id] = f"its sealed checkpoint on the log does not verify: {exc.detail}"
                continue
            except KeyringError as exc:  # sealed under a key this keyring lacks: add it back, run again
                done.failed[task.task_id] = str(exc)
                continue
            if indexed and task.last is not None:
                latest.append(task.last.encode())
        if latest:  # idempotent: a rerun after a crash here applies them again
            done.index_skipped += self.index.apply(latest).skipped
        return done

    def _one(self, task: Folded, done: Restored) -> bool:
        """Restore one task in its own transaction, its timer writes and wake sent ahead of it;
        True when the task index must show the log's last change (restored, or left at it)."""
        assert task.last is not None
        task_id, version = task.task_id, task.last.state_version
        with Pinned(self.client, keys.state(task_id)) as conn:
            for _ in range(keys.CAS_RETRIES):
                replies = conn.batch(
                    [
                        ("WATCH", keys.state(task_id), keys.ctr(task_id), keys.fence(task_id)),
                        ("XREVRANGE", keys.ctr(task_id), "+", "-", "COUNT", 1),
                        ("GET", keys.fence(task_id)),
                    ]
                )
                checks.raise_replies(task_id, *replies)
                held = _version(replies[1])
                if held is not None and held > version:
                    conn.batch([("UNWATCH",)])
                    done.left[task_id] = f"Redis holds version {held}, the log {version}"
                    return False
                ctr = [(f"{version}-1".encode(), {b"v": str(version).encode()})]
                cp = checks.verified(self.sealer, task_id, task.blob, ctr, None)
                if cp.stage != task.last.stage:
                    raise TamperedState(task_id, "its stage disagrees with its log record")
                # Ahead of the transaction, as a change's `before` (D40): idempotent, harmless with
                # nothing behind them, and sent again by a rerun after a crash that came between.
                ahead = last_step.wait_writes(cp)
                if held == version:  # restored before, or never lost: its timers, once more
                    conn.batch([("UNWATCH",)])
                    self._send(ahead)
                    done.left[task_id] = f"Redis holds version {held}, the log's last"
                    return True
                woken = task.quarantine is None and self.wakes(cp)
                if woken:
                    now_ms = int(self.now.timestamp() * 1000)
                    ahead.append(("ZADD", keys.DEADLINES, now_ms, f"{cp.task_id}|{now_ms}"))
                self._send(ahead)
                fence = max(int(replies[2] or 0), fence_after(cp.execution.fence, task, self.now))
                result = conn.batch([("MULTI",), *self._writes(task, version, fence), ("EXEC",)])
                if result[-1] is not None:
                    checks.check_exec(task_id, [*result, None])
                    done.restored.append(task_id)
                    if woken:
                        done.woken.append(task_id)
                    return True
        done.failed[task_id] = "its keys kept changing while it was restored (is a worker running?)"
        return False

    def _send(self, commands: list[tuple[Any, ...]]) -> None:
        """Writes outside the task's slot, in one round trip (a pipeline: each to its own node)."""
        if commands:
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            pipe.execute()

    def _writes(self, task: Folded, version: int, fence: int) -> list[tuple[Any, ...]]:
        task_id = task.task_id
        writes: list[tuple[Any, ...]] = [
            ("SET", keys.state(task_id), task.blob),
            ("XADD", keys.ctr(task_id), "MAXLEN", 1, f"{version}-1", "v", version),
            ("SET", keys.fence(task_id), fence),
        ]
        if task.inbox:
            writes.append(("SADD", keys.inbox(task_id), *sorted(task.inbox)))
        for op_key, entry in task.ops.items():
            writes.append(("HSET", keys.ops(task_id), op_key, entry.encode()))
        for key, (value, at) in task.writes.items():
            left = keys.RECEIPT_TTL_S - int((self.now - at).total_seconds())
            if left > 0:
                writes.append(("SET", key, value, "EX", left))
        if task.quarantine is not None:
            writes.append(("SET", keys.quarantine(task_id), task.quarantine, "NX"))
        return writes


def _version(ctr: Any) -> int | None:
    if not ctr:
        return None
    return int(ctr[0][0].split(b"-")[0])
