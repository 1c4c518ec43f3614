"""What `wakeful recover` restores, folded from wakeful.log (D70). Pure: no Kafka, no Redis.

The log holds, in commit order per task (one task's records ride one partition):
- each change (OutboxRecord): the sealed checkpoint as stored, its inbox mark (the message id), the
  receipt and evidence references its transaction wrote, and what the task then waits for;
- each write to the task's action log (ActionRecord): an intent, a count of unavailable calls, an
  outcome;
- each quarantine marker set outside a change (QuarantineRecord); a release's change deletes it.

A relay that crashed between publishing and trimming publishes a suffix of a task's records again:
the fold skips a record id it has seen. For each task it keeps the change of the highest
state_version that carries a checkpoint, every message id applied, the last write to each op key
and to each receipt or evidence field. Anything it cannot use is named in `problems`, never dropped
silently.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from wakeful.schemas.changelog import ActionRecord, LogItem, QuarantineRecord
from wakeful.schemas.logs import ActionLogEntry, ActionStatus, OutboxRecord
from wakeful.state import keys


@dataclass
class Folded:
    """One task as the log has it."""

    task_id: str
    last: OutboxRecord | None = None  # the newest change that carries a checkpoint
    blob: bytes = b""  # its sealed checkpoint
    newest: int = 0  # the highest state_version on the log, with a checkpoint or not
    inbox: set[str] = field(default_factory=set)
    ops: dict[str, ActionLogEntry] = field(default_factory=dict)
    # The receipts (key, "") and evidence references (key, field) its changes wrote: each value,
    # and the time of the change that wrote it (a receipt's TTL counts from it).
    writes: dict[tuple[str, str], tuple[str, datetime]] = field(default_factory=dict)
    quarantine: str | None = None  # the marker in force, as stored
    problems: list[str] = field(default_factory=list)

    def unrestorable(self) -> str | None:
        """Why the task cannot be restored from the log, or None."""
        if self.last is None and self.newest == 0:
            return "the log holds no change of it (only action or quarantine records)"
        if self.last is None or self.last.state_version != self.newest:
            return (
                f"its newest change on the log (version {self.newest}) carries no checkpoint "
                "(written before the log carried checkpoints, or unreadable)"
            )
        return None

    @property
    def fence(self) -> int:
        """The highest fence the log shows for the task's action log."""
        return max((e.fence for e in self.ops.values()), default=0)


@dataclass
class Fold:
    """The log folded so far: feed it items in log order, read `tasks`."""

    tasks: dict[str, Folded] = field(default_factory=dict)
    seen: set[str] = field(default_factory=set)
    records: int = 0
    duplicates: int = 0

    def add(self, items: Iterable[LogItem]) -> None:
        for item in items:
            self.records += 1
            if item.record_id in self.seen:
                self.duplicates += 1
                continue
            self.seen.add(item.record_id)
            task = self.tasks.get(item.task_id)
            if task is None:
                task = self.tasks[item.task_id] = Folded(item.task_id)
            if isinstance(item, ActionRecord):
                _action(task, item)
            elif isinstance(item, QuarantineRecord):
                task.quarantine = task.quarantine or item.quarantine  # the first reason stands
            else:
                _change(task, item)


def _action(task: Folded, item: ActionRecord) -> None:
    if item.action.task_id != task.task_id:
        task.problems.append(f"{item.record_id}: its entry names task {item.action.task_id!r}")
        return
    held = task.ops.get(item.action.op_key)
    if held is None or _rank(item.action) >= _rank(held):
        task.ops[item.action.op_key] = item.action


def _rank(entry: ActionLogEntry) -> tuple[int, int, int]:
    """Where an entry stands in its op key's history, whatever order the log gives them in (a task's
    records split over partitions added later): a newer lease's write (fence) beats an older's, an
    outcome beats its intent, a call counted beats the one before. Every write the action log's
    functions allow moves this forward; on a tie, the later record on the log stands."""
    return entry.fence, 0 if entry.status is ActionStatus.IN_FLIGHT else 1, entry.attempts


def _change(task: Folded, item: OutboxRecord) -> None:
    if item.record_id != f"{item.task_id}:{item.state_version}":
        task.problems.append(f"{item.record_id}: not the record id of version {item.state_version}")
        return
    task.inbox.add(item.message_id)
    task.newest = max(task.newest, item.state_version)
    for command in item.writes:
        problem = _unfit(task.task_id, command)
        if problem is not None:
            task.problems.append(f"{item.record_id}: {problem}")
        elif command[0] == "DEL":
            task.quarantine = None  # a release lifted it
        elif command[0] == "SET":
            task.writes[(command[1], "")] = (command[2], item.at)
        else:
            for i in range(2, len(command), 2):
                task.writes[(command[1], command[i])] = (command[i + 1], item.at)
    if not item.sealed:
        return
    if task.last is not None and task.last.state_version >= item.state_version:
        return
    try:
        blob = base64.b64decode(item.sealed, validate=True)
    except (binascii.Error, ValueError) as exc:
        task.problems.append(f"{item.record_id}: its sealed checkpoint is not base64 ({exc})")
        return
    task.last, task.blob = item, blob


def _unfit(task_id: str, command: tuple[str, ...]) -> str | None:
    """Why a logged write may not be replayed: only the kinds last_step.logged() keeps, each on a
    key of this task. A record is not trusted because it is on the log."""
    name, key = (command[0], command[1]) if len(command) >= 2 else ("", "")
    if name == "SET" and len(command) == 3 and key.startswith(keys.task_receipt_prefix(task_id)):
        return None
    if name == "HSET" and len(command) >= 4 and len(command) % 2 == 0 and key == keys.evidence(task_id):
        return None
    if name == "DEL" and len(command) == 2 and key == keys.quarantine(task_id):
        return None
    return f"a write recovery does not replay: {name} {key!r}"


# A fence counter restored from the log moves this far past the highest fence it shows: leases
# granted while the log lagged behind Redis (their intents not yet published) are never outranked
# by a lease granted after the recovery, at the store or at a downstream that checks fences.
FENCE_MARGIN = 1000


def fence_after(checkpoint_fence: int, folded: Folded) -> int:
    return max(checkpoint_fence, folded.fence) + FENCE_MARGIN
