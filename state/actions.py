"""The intent-first action log, the basis of execute-once.

Order for a side effect: begin(op_key) records the intent (in_flight) atomically -> call downstream
WITH the op key -> complete()/fail() records the outcome -> the stage advances. A second begin() of
the same key returns the existing entry instead, so the caller can tell "do it", "it is in flight
(look it up by key downstream)" and "done: skip and advance" apart. A `failed` outcome means the
downstream refused every attempt and booked nothing, so a later begin (after a person reopened the
task) re-arms it under the same key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import redis

from wakeful.core.errors import ActionError, LeaseLost
from wakeful.schemas.changelog import action_record
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.state import functions, keys
from wakeful.state.functions import Function, call
from wakeful.state.store import Clock, utcnow

# KEYS[1] the task's ops hash, KEYS[2] the task's lease, KEYS[3] the task's outbox; ARGV[1] op_key,
# ARGV[2] the in_flight entry (JSON), ARGV[3] the caller's lease token ("" to skip the lease check),
# ARGV[4] the entry's ActionRecord (JSON) and ARGV[5] its record id, for wakeful.log (D70).
# returns: {1, entry} this call recorded the intent (new, or re-armed after a failure, which by
#          definition booked nothing), and put its record on the outbox; {0, existing entry} an
#          intent or outcome is there; {-3, false} the caller no longer holds the lease: it must not
#          start a side effect.
BEGIN = Function(
    "action_begin",
    """
if ARGV[3] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[3] then return {-3, false} end
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if cur and cjson.decode(cur)['status'] ~= 'failed' then return {0, cur} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[3], '*', 'id', ARGV[5], 'r', ARGV[4], 'k', 'a')
return {1, ARGV[2]}
""",
)

# KEYS[1] the task's ops hash, KEYS[2] the task's outbox; ARGV[1] op_key, ARGV[2] the final entry
# (JSON), or the intent still in_flight with its unavailable calls counted (ActionLog.attempted);
# ARGV[3] caller's fence; ARGV[4] the entry's ActionRecord (JSON), ARGV[5] its record id (D70).
# returns: {1, entry} recorded, and its record put on the outbox; {0, existing} already final
#          (first outcome wins); {-1, false} no intent was recorded; {-2, existing} a newer lease
#          holder owns the intent.
FINISH = Function(
    "action_finish",
    """
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return {-1, false} end
local entry = cjson.decode(cur)
if entry['status'] ~= 'in_flight' then return {0, cur} end
if tonumber(ARGV[3]) < tonumber(entry['fence']) then return {-2, cur} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[2], '*', 'id', ARGV[5], 'r', ARGV[4], 'k', 'a')
return {1, ARGV[2]}
""",
)

FUNCTIONS = (BEGIN, FINISH)


@dataclass(frozen=True)
class Begun:
    inserted: bool  # True: this caller owns the first attempt; False: see entry.status
    entry: ActionLogEntry


class ActionLog:
    def __init__(self, client: redis.Redis, clock: Clock = utcnow) -> None:
        self.client = client
        self.clock = clock

    def begin(
        self,
        task_id: str,
        op_key: str,
        fence: int,
        lease_token: str = "",
        *,
        tool: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> Begun:
        """Record the intent. With lease_token, only while that token still holds the task's lease."""
        names, argv = self._intent(task_id, op_key, fence, lease_token, tool=tool, args=args)
        begun = self.begun(task_id, lease_token, call(self.client, BEGIN, names, argv))
        self.mark(task_id)
        return begun

    def mark(self, task_id: str) -> None:
        """Tell the relay the task's outbox holds a record (state/outbox.py): an action record
        waits for no change to carry it to wakeful.log (D70)."""
        self.client.sadd(keys.OUTBOX_DIRTY, task_id)

    @staticmethod
    def mark_command(task_id: str) -> tuple[str, str, str]:
        """mark() as a command, to ride in a caller's batch after its begin_command()."""
        return ("SADD", keys.OUTBOX_DIRTY, task_id)

    def begin_command(
        self,
        task_id: str,
        op_key: str,
        fence: int,
        lease_token: str = "",
        *,
        tool: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> tuple[Any, ...]:
        """begin() as a command, to ride in a caller's batch; its reply goes to begun()."""
        return functions.command(
            BEGIN, *self._intent(task_id, op_key, fence, lease_token, tool=tool, args=args)
        )

    def _intent(
        self,
        task_id: str,
        op_key: str,
        fence: int,
        lease_token: str,
        *,
        tool: str | None,
        args: dict[str, Any] | None,
    ) -> tuple[list[str], list[Any]]:
        """BEGIN's keys and arguments."""
        entry = ActionLogEntry(
            op_key=op_key,
            task_id=task_id,
            status=ActionStatus.IN_FLIGHT,
            fence=fence,
            started_at=self.clock(),
            tool=tool,
            args=args,
        )
        logged = action_record(entry)
        names = [keys.ops(task_id), keys.lease(task_id), keys.outbox(task_id)]
        return names, [op_key, entry.encode(), lease_token, logged.encode(), logged.record_id]

    def begun(self, task_id: str, lease_token: str, reply: Any) -> Begun:
        """What a batched begin_command() did, raising what begin() would have raised."""
        code, raw = functions.reply(BEGIN, reply)
        if code == -3:
            raise LeaseLost(task_id, lease_token, "lost before the intent was recorded")
        return Begun(code == 1, ActionLogEntry.decode(raw))

    def complete(
        self,
        task_id: str,
        op_key: str,
        fence: int,
        result: dict[str, Any],
        intent: ActionLogEntry | None = None,
    ) -> ActionLogEntry:
        """Record success. Pass the intent begin() returned to save a round trip."""
        return self._record(task_id, op_key, fence, ActionStatus.SUCCEEDED, result=result, intent=intent)

    def attempted(self, intent: ActionLogEntry, fence: int, *, attempts: int, reason: str) -> ActionLogEntry:
        """Count a call of the intent in flight that found its tool unavailable: the entry stays in
        flight with `attempts` and the reason (FINISH, as for an outcome: refused to a fence older
        than the entry's, a no-op on an entry already final)."""
        counted = intent.model_copy(update={"attempts": attempts, "reason": reason, "fence": fence})
        logged = action_record(counted)
        argv: list[Any] = [intent.op_key, counted.encode(), fence, logged.encode(), logged.record_id]
        reply = call(self.client, FINISH, [keys.ops(intent.task_id), keys.outbox(intent.task_id)], argv)
        self.mark(intent.task_id)
        return self.recorded(intent.op_key, fence, reply)

    def fail(self, task_id: str, op_key: str, fence: int, reason: str) -> ActionLogEntry:
        return self._record(task_id, op_key, fence, ActionStatus.FAILED, reason=reason)

    def lookup(self, task_id: str, op_key: str) -> ActionLogEntry | None:
        raw = self.client.hget(keys.ops(task_id), op_key)
        return ActionLogEntry.decode(raw) if isinstance(raw, bytes) else None

    def complete_command(
        self, task_id: str, op_key: str, fence: int, result: dict[str, Any], intent: ActionLogEntry
    ) -> tuple[Any, ...]:
        """complete() as a command, to ride in a caller's batch; its reply goes to recorded()."""
        names, args = self._finish(task_id, op_key, fence, ActionStatus.SUCCEEDED, intent, result=result)
        return functions.command(FINISH, names, args)

    def read_command(
        self,
        task_id: str,
        *,
        tool: str,
        op_key: str,
        result: Mapping[str, Any],
        args: Mapping[str, Any],
        fence: int,
        now: datetime,
    ) -> list[tuple[Any, ...]]:
        """A read-only call (`tool` under `op_key`, what it returned, its arguments) that shared its
        turn with another (D68), recorded as done, as commands for the close's transaction (the
        entry, and its record on the outbox): it wrote no intent, because calling it again after a
        crash changes nothing."""
        entry = ActionLogEntry(
            op_key=op_key,
            task_id=task_id,
            status=ActionStatus.SUCCEEDED,
            fence=fence,
            started_at=now,
            finished_at=now,
            result=dict(result),
            tool=tool,
            args=dict(args),
        )
        logged = action_record(entry)
        return [
            ("HSET", keys.ops(task_id), op_key, entry.encode()),
            ("XADD", keys.outbox(task_id), "*", "id", logged.record_id, "r", logged.encode(), "k", "a"),
        ]

    def recorded(self, op_key: str, fence: int, reply: Any) -> ActionLogEntry:
        """The entry a batched complete_command() left, raising what complete() would have raised."""
        code, raw = functions.reply(FINISH, reply)
        if code == -1:
            raise ActionError(op_key, "no intent was recorded: call begin() before the downstream call")
        if code == -2:
            raise ActionError(op_key, f"a newer lease holder owns this operation (fence {fence} is stale)")
        return ActionLogEntry.decode(raw)

    def _record(
        self,
        task_id: str,
        op_key: str,
        fence: int,
        status: ActionStatus,
        *,
        result: dict[str, Any] | None = None,
        reason: str | None = None,
        intent: ActionLogEntry | None = None,
    ) -> ActionLogEntry:
        # The script re-checks the stored entry atomically; this read only supplies started_at.
        current = intent if intent is not None and intent.op_key == op_key else self.lookup(task_id, op_key)
        if current is None:
            raise ActionError(op_key, "no intent was recorded: call begin() before the downstream call")
        names, args = self._finish(task_id, op_key, fence, status, current, result=result, reason=reason)
        recorded = self.recorded(op_key, fence, call(self.client, FINISH, names, args))
        self.mark(task_id)
        return recorded

    def _finish(
        self,
        task_id: str,
        op_key: str,
        fence: int,
        status: ActionStatus,
        current: ActionLogEntry,
        *,
        result: dict[str, Any] | None = None,
        reason: str | None = None,
    ) -> tuple[list[str], list[Any]]:
        """FINISH's keys and arguments, recording `status` over the intent `current`."""
        final = current.model_copy(
            update={
                "status": status,
                "finished_at": self.clock(),
                "result": result,
                "reason": reason,
                "fence": fence,
            }
        )
        logged = action_record(final)
        return [keys.ops(task_id), keys.outbox(task_id)], [
            op_key,
            final.encode(),
            fence,
            logged.encode(),
            logged.record_id,
        ]
