"""What `wakeful recover` restores, folded from wakeful.log (D70). Pure: no Kafka, no Redis.

The log holds, in commit order per task (one task's records ride one partition):
- each change (OutboxRecord): the sealed checkpoint as stored, its inbox mark (the message id), the
  receipt its transaction wrote, and what the task then waits for;
- each write to the task's action log (ActionRecord): an intent, a count of unavailable calls, an
  outcome;
- each quarantine marker set outside a change (QuarantineRecord); a release's change deletes it;
- a purged task's tombstone (PurgeRecord, D73): what the log held of the task is not restored.

A relay that crashed between publishing and trimming publishes a suffix of a task's records again.
The fold tells a repeat by what the record says, never by remembering record ids (a log kept for
years holds more of them than any memory): a change at or below the task's newest version and in
none of its gaps is a repeat; an action-log write equal to, or outranked by, the entry held for its
op key changes nothing; a quarantine record is kept by id (a task has few); a tombstone by id among
the last TOMBSTONES_KEPT. A record whose id is not the one its content gives is refused, so none can
hide another. For each task it keeps the change of the highest state_version that carries a
checkpoint, every message id applied, the last write to each op key and to each receipt: what its
restore writes into Redis, and nothing else. A task whose history on the log has a gap is not
restored: its action log may be missing an effect. Anything the fold cannot use is named, never
dropped silently.
"""

from __future__ import annotations

import base64
import binascii
from collections import OrderedDict
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

# A relay re-publishes a tombstone only while the task's outbox page holding it is not yet trimmed:
# it lands a page or so after the first copy, with the records that followed it in the outbox. A
# purge takes a task only once its outbox is drained, so no record from before a tombstone is ever
# repeated after it. The fold keeps this many tombstone ids to tell such a repeat, which takes
# nothing (a task made again under the id and republished with it is kept).
TOMBSTONES_KEPT = 10_000


@dataclass
class Recent:
    """The last TOMBSTONES_KEPT tombstone ids: whether one was seen lately (and note it)."""

    ids: OrderedDict[str, None] = field(default_factory=OrderedDict)

    def seen(self, record_id: str) -> bool:
        if record_id in self.ids:
            return True
        self.ids[record_id] = None
        if len(self.ids) > TOMBSTONES_KEPT:
            self.ids.popitem(last=False)
        return False

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class Folded:
    """One task as the log has it: only what its restore writes, and what tells a repeat."""

    task_id: str
    last: OutboxRecord | None = None  # the newest change that carries a checkpoint
    blob: bytes = b""  # its sealed checkpoint
    # The task's changes: the highest state_version folded, and the versions below it not seen
    # (inclusive ranges: a gap, or records a partition added later carries). A change at or below
    # `newest` and in no gap is a repeat, so no record id is kept for changes.
    newest: int = 0
    gaps: list[tuple[int, int]] = field(default_factory=list)
    unsealed: int = 0  # changes written before the log carried checkpoints (schema < 3)
    inbox: set[str] = field(default_factory=set)  # every message applied: Redis keeps them all
    ops: dict[str, ActionLogEntry] = field(default_factory=dict)
    # The receipts its changes wrote: key -> (value, the time of the change that wrote it: a
    # receipt's TTL counts from it).
    writes: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    quarantine: str | None = None  # the marker in force, as stored
    quarantines: set[str] = field(default_factory=set)  # the quarantine records folded (rare)
    problems: list[str] = field(default_factory=list)

    @property
    def versions(self) -> set[int]:
        """Every state_version on the log (built when asked: the fold keeps `newest` and `gaps`)."""
        missing = {v for lo, hi in self.gaps for v in range(lo, hi + 1)}
        return set(range(1, self.newest + 1)) - missing

    def unrestorable(self) -> str | None:
        """Why the task cannot be restored from the log, or None."""
        if not self.newest:
            return "the log holds no change of it (only action or quarantine records)"
        if self.gaps:
            missing = [v for lo, hi in self.gaps for v in range(lo, min(hi, lo + 9) + 1)][:10]
            return f"its history on the log misses version(s) {missing}: its action log may be incomplete"
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

    def first_sight(self, version: int) -> bool:
        """Whether a change of this version is new to the fold (and note it), or a repeat."""
        if version > self.newest:
            if version > self.newest + 1:
                self.gaps.append((self.newest + 1, version - 1))
            self.newest = version
            return True
        for i, (lo, hi) in enumerate(self.gaps):
            if lo <= version <= hi:  # a gap filled: keep what is still missing on either side
                self.gaps[i : i + 1] = [r for r in ((lo, version - 1), (version + 1, hi)) if r[0] <= r[1]]
                return True
        return False


@dataclass
class Fold:
    """The log folded so far: feed it items in log order; `take` a task once its records are all
    folded (recover knows where each task's records end), read `tasks` for the rest. It holds the
    tasks not yet taken and the last TOMBSTONES_KEPT tombstone ids: nothing per record, nothing per
    purged task."""

    tasks: dict[str, Folded] = field(default_factory=dict)
    records: int = 0
    duplicates: int = 0  # records repeated, or superseded by one folded before (the action log)
    purged: int = 0  # tombstones that took a task (or came after what the log held of it)
    problems: list[str] = field(default_factory=list)  # records no task could own
    tombstones: Recent = field(default_factory=Recent)

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
            if wrong is not None:  # only a record whose id is its own is folded
                task.problems.append(f"{item.record_id}: {wrong}")
                continue
            if isinstance(item, ActionRecord):
                fresh = _action(task, item)
            elif isinstance(item, QuarantineRecord):
                fresh = item.record_id not in task.quarantines
                if fresh:
                    task.quarantines.add(item.record_id)
                    task.quarantine = task.quarantine or item.quarantine  # the first reason stands
            else:
                fresh = task.first_sight(item.state_version)
                if fresh:
                    _change(task, item)
            if not fresh:
                self.duplicates += 1

    def take(self, task_id: str) -> Folded | None:
        """The task's fold, dropped from the fold: its records are all folded."""
        return self.tasks.pop(task_id, None)

    def _purge(self, item: PurgeRecord) -> None:
        """A tombstone (D73): the task was finished and its keys deleted by retention. What the log
        held of it is dropped, never restored; its records come before it on the log (a purge
        takes a task only once its outbox is drained), and a task made again under its id starts
        afresh."""
        own = purge_record_id(item.task_id, item.state_version, item.purged_at)
        if item.record_id != own:
            self.problems.append(f"{item.record_id[:100]!r}: not the id its content gives ({own})")
        elif self.tombstones.seen(item.record_id):
            self.duplicates += 1
        else:
            self.tasks.pop(item.task_id, None)
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


def _action(task: Folded, item: ActionRecord) -> bool:
    """Fold an action-log write; False when it changes nothing (a repeat of the entry held, or an
    entry the held one supersedes), so no record id is kept for the action log either."""
    held = task.ops.get(item.action.op_key)
    if held is not None and (held == item.action or _rank(item.action) < _rank(held)):
        return False
    task.ops[item.action.op_key] = item.action
    return True


def _rank(entry: ActionLogEntry) -> tuple[int, int, int]:
    """Where an entry stands in its op key's history, whatever order the log gives them in (a task's
    records split over partitions added later): a newer lease's write (fence) beats an older's, an
    outcome beats its intent, a call counted beats the one before. Every write the action log's
    functions allow moves this forward; on a tie, the later record on the log stands."""
    return entry.fence, 0 if entry.status is ActionStatus.IN_FLIGHT else 1, entry.attempts


def _change(task: Folded, item: OutboxRecord) -> None:
    task.inbox.add(item.message_id)
    for command in item.writes:
        problem = _unfit(task.task_id, command)
        if problem is not None:
            task.problems.append(f"{item.record_id}: {problem}")
        elif command[0] == "DEL":
            task.quarantine = lifted(task.quarantine)
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


def lifted(marker: str | None) -> str | None:
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


# A fence counter restored from the log is moved to the recovery's clock in tenths of a millisecond,
# at least (D86). Each lease grant is one INCR in the executor's lease_acquire, made for one proposal
# it read for the task (one in flight per task, after the gate's hops through Kafka: milliseconds):
# a counter that started at 0, or at a recovery's clock in these ticks, stays below the clock's
# ticks unless a task averaged 10,000 grants a second since, whatever leases the log never saw
# (their intents in the relay's lag), as long as the clock does not step back across a loss. So a
# lease granted after the recovery outranks every lease granted before it, at the store and at a
# downstream that checks fences, with no guessed margin. The tick is no finer because Lua prints a
# number with 14 significant digits (lease_acquire writes the token "<owner>:<fence>" that way):
# 10**14 ticks is the year 2286.
TICKS_PER_S = 10_000


def fence_floor(now: datetime) -> int:
    """The recovery's clock in tenths of a millisecond: above every fence granted before it."""
    return int(now.timestamp() * TICKS_PER_S)


def fence_after(checkpoint_fence: int, folded: Folded, now: datetime) -> int:
    """The fence counter a restored task gets: past the highest fence its checkpoint and its action
    log show, and past every fence granted before `now` (fence_floor)."""
    return max(checkpoint_fence, folded.fence, fence_floor(now))
