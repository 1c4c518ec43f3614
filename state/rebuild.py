"""What `wakeful recover` restores, folded from wakeful.log (D70). Pure: no Kafka, no Redis.

The log holds, in commit order per task (one task's records ride one partition):
- each change (OutboxRecord): the sealed checkpoint as stored, its inbox mark (the message id), the
  receipt its transaction wrote, and what the task then waits for;
- each write to the task's action log (ActionRecord): an intent, a count of unavailable calls, an
  outcome;
- each quarantine marker set outside a change (QuarantineRecord); a release's change deletes it;
- a purged task's tombstone (PurgeRecord, D73): what the log held of the task is not restored.

A relay that crashed between publishing and trimming publishes a suffix of a task's records again:
the fold skips a record it has seen, by an id it derives from the record's content (a record that
claims another's id is refused, so it cannot hide the other). For each task it keeps the change of
the highest state_version that carries a checkpoint, every message id applied, the last write to
each op key and to each receipt. A task whose history on the log has a gap is not restored: its
action log may be missing an effect. Anything the fold cannot use is named, never dropped silently.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

import orjson

from wakeful.core import ids
from wakeful.schemas.changelog import (
    ActionRecord,
    LogItem,
    QuarantineRecord,
    action_record,
    quarantine_record,
)
from wakeful.schemas.logs import ActionLogEntry, ActionStatus, OutboxRecord
from wakeful.schemas.tombstone import PurgeRecord
from wakeful.schemas.tombstone import record_id as purge_record_id
from wakeful.state import keys
from wakeful.state.parked import RELEASABLE


@dataclass
class Folded:
    """One task as the log has it."""

    task_id: str
    last: OutboxRecord | None = None  # the newest change that carries a checkpoint
    blob: bytes = b""  # its sealed checkpoint
    versions: set[int] = field(default_factory=set)  # of every change on the log
    unsealed: int = 0  # changes written before the log carried checkpoints (schema < 3)
    inbox: set[str] = field(default_factory=set)
    ops: dict[str, ActionLogEntry] = field(default_factory=dict)
    # The receipts its changes wrote: key -> (value, the time of the change that wrote it: a
    # receipt's TTL counts from it).
    writes: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    quarantine: str | None = None  # the marker in force, as stored
    problems: list[str] = field(default_factory=list)

    @property
    def newest(self) -> int:
        """The highest state_version on the log, with a checkpoint or not."""
        return max(self.versions, default=0)

    def unrestorable(self) -> str | None:
        """Why the task cannot be restored from the log, or None."""
        if not self.versions:
            return "the log holds no change of it (only action or quarantine records)"
        missing = sorted(set(range(1, self.newest + 1)) - self.versions)
        if missing:
            return (
                f"its history on the log misses version(s) {missing[:10]}: its action log may be incomplete"
            )
        if self.unsealed:
            return (
                f"{self.unsealed} of its changes were written before the log carried checkpoints: "
                "its action log on the log may be incomplete"
            )
        if self.last is None or self.last.state_version != self.newest:
            return f"its newest change on the log (version {self.newest}) carries no readable checkpoint"
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
    purged: int = 0  # tasks whose tombstone dropped what the log held of them
    lives: dict[str, int] = field(default_factory=dict)  # tombstones folded, per task id
    problems: list[str] = field(default_factory=list)  # records no task could own

    def add(self, items: Iterable[LogItem]) -> None:
        for item in items:
            self.records += 1
            if not ids.TASK_ID_RE.fullmatch(item.task_id):
                self.problems.append(f"{item.record_id[:100]!r}: names no task id ({item.task_id[:100]!r})")
                continue
            if isinstance(item, PurgeRecord):
                self._purge(item)
                continue
            task = self.tasks.get(item.task_id)
            if task is None:
                task = self.tasks[item.task_id] = Folded(item.task_id)
            wrong = _misnamed(item)
            if wrong is not None:
                task.problems.append(f"{item.record_id}: {wrong}")
                continue
            # Only a record whose id is its own: none hides another. A task made again under the id
            # of a purged one is a life of its own: its records are not its predecessor's repeats.
            life = self.lives.get(item.task_id, 0)
            key = item.record_id if life == 0 else f"{item.record_id}#{life}"
            if key in self.seen:
                self.duplicates += 1
                continue
            self.seen.add(key)
            if isinstance(item, ActionRecord):
                _action(task, item)
            elif isinstance(item, QuarantineRecord):
                task.quarantine = task.quarantine or item.quarantine  # the first reason stands
            else:
                _change(task, item)

    def _purge(self, item: PurgeRecord) -> None:
        """A tombstone (D73): the task was finished and its keys deleted by retention. What the log
        held of it is dropped, never restored; its records come after all of them on the log (a
        purge takes a task only once its outbox is drained)."""
        own = purge_record_id(item.task_id, item.state_version, item.purged_at)
        if item.record_id != own:
            self.problems.append(f"{item.record_id[:100]!r}: not the id its content gives ({own})")
        elif item.record_id in self.seen:
            self.duplicates += 1
        else:
            self.seen.add(item.record_id)
            self.tasks.pop(item.task_id, None)
            self.lives[item.task_id] = self.lives.get(item.task_id, 0) + 1
            self.purged += 1


def _misnamed(item: OutboxRecord | ActionRecord | QuarantineRecord) -> str | None:
    """Why a record's id is not the one its content gives, or None."""
    if isinstance(item, ActionRecord):
        if item.action.task_id != item.task_id:
            return f"its entry names task {item.action.task_id!r}"
        own = action_record(item.action).record_id
    elif isinstance(item, QuarantineRecord):
        own = quarantine_record(item.task_id, item.quarantine.encode()).record_id
    else:
        own = f"{item.task_id}:{item.state_version}"
    return None if item.record_id == own else f"not the id its content gives ({own})"


def _action(task: Folded, item: ActionRecord) -> None:
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
    task.inbox.add(item.message_id)
    task.versions.add(item.state_version)
    for command in item.writes:
        problem = _unfit(task.task_id, command)
        if problem is not None:
            task.problems.append(f"{item.record_id}: {problem}")
        elif command[0] == "DEL":
            task.quarantine = _lifted(task.quarantine)
        else:
            task.writes[command[1]] = (command[2], item.at)
    if not item.sealed:
        task.unsealed += 1
        return
    if task.last is not None and task.last.state_version >= item.state_version:
        return
    try:
        blob = base64.b64decode(item.sealed, validate=True)
    except (binascii.Error, ValueError) as exc:
        task.problems.append(f"{item.record_id}: its sealed checkpoint is not base64 ({exc})")
        return
    task.last, task.blob = item, blob


def _lifted(marker: str | None) -> str | None:
    """The marker in force after a release's change lifted one: only a marker a person may release
    is lifted (state/parked.py); one set because a record failed a check stays, whatever the log's
    order says."""
    if marker is None:
        return None
    try:
        reason = orjson.loads(marker).get("reason")
    except (orjson.JSONDecodeError, AttributeError):
        return marker
    return None if reason in RELEASABLE else marker


def _unfit(task_id: str, command: tuple[str, ...]) -> str | None:
    """Why a logged write may not be replayed: only the kinds last_step.logged() keeps, each on a
    key of this task. A record is not trusted because it is on the log."""
    name, key = (command[0], command[1]) if len(command) >= 2 else ("", "")
    if name == "SET" and len(command) == 3 and key.startswith(keys.task_receipt_prefix(task_id)):
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
