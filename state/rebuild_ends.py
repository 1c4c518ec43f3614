"""Where each task's records end on wakeful.log, so `wakeful recover` restores a task as soon as its
fold is complete instead of holding the whole log's fold (D86). Pure: no Kafka, no Redis.

Recover reads the log twice, up to the same ends. The first read notes, for each task that lives
on the log (one with a record after its last tombstone), the position of the message that carries
its last record: one int per such task, the tasks a restored Redis holds. The second read goes
partition by partition, in offset order, folds only the records of those tasks (a task purged for
good is never folded: its tombstone would drop it), and hands a task over once the message
holding its last record is folded. What it holds at any moment is the tasks whose records span
the position it reads, not the log.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass, field

from wakeful.core import ids
from wakeful.schemas.changelog import LogItem, Mark
from wakeful.schemas.tombstone import PurgeRecord
from wakeful.schemas.tombstone import record_id as purge_record_id
from wakeful.state.rebuild import Fold, Folded, Recent

_OFFSET_BITS = 48  # a Kafka offset is below 2**48 long after a log of a trillion messages


def position(partition: int, offset: int) -> int:
    """A message's place in the second read's order (partition by partition, then offset)."""
    return (partition << _OFFSET_BITS) | offset


@dataclass
class Ends:
    """The first read: the position of the last message of each task living on the log."""

    at: dict[str, int] = field(default_factory=dict)
    tombstones: Recent = field(default_factory=Recent)  # a repeat takes nothing, as in the fold

    def add(self, where: int, marks: Iterable[Mark]) -> None:
        """One message's records, each as its task id and the tombstone it is, if one."""
        for task_id, tombstone in marks:
            if not ids.TASK_ID_RE.fullmatch(task_id):
                continue  # named by the fold, owned by no task
            if tombstone is None:
                self.at[task_id] = max(self.at.get(task_id, -1), where)
                continue
            own = purge_record_id(task_id, tombstone.state_version, tombstone.purged_at)
            if tombstone.record_id == own and not self.tombstones.seen(tombstone.record_id):
                self.at.pop(task_id, None)  # the fold drops it here; a later life starts afresh

    def wanted(self, task_id: str) -> bool:
        """Whether the second read folds a record of this task: one living on the log, or an id that
        is none (the fold names the record)."""
        return task_id in self.at or not ids.TASK_ID_RE.fullmatch(task_id)

    def __len__(self) -> int:
        return len(self.at)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self.at


def purged_for_good(ends: Ends, items: Iterable[LogItem], among: Container[str]) -> Iterator[str]:
    """The tasks of `among` whose history on the log a tombstone in `items` ends: their own
    tombstone, and the first read found no record of theirs after it (`ends` does not hold them).
    `wakeful recover` leaves out their re-driven wakes (D87): `among` is the tasks those wakes name,
    so what it keeps is bounded by the re-drive, not by the log's purged history."""
    for item in items:
        if not isinstance(item, PurgeRecord) or item.task_id in ends or item.task_id not in among:
            continue
        if item.record_id == purge_record_id(item.task_id, item.state_version, item.purged_at):
            yield item.task_id


def marks(items: Iterable[LogItem]) -> list[Mark]:
    """Records as the first read sees them (schemas/changelog.log_marks)."""
    return [(i.task_id, i if isinstance(i, PurgeRecord) else None) for i in items]


def fold_message(fold: Fold, ends: Ends, where: int, items: list[LogItem]) -> list[Folded]:
    """The second read, one message: fold its records (read only for tasks living on the log, and
    every tombstone, which the fold counts), then take each task whose last message this is."""
    kept = [i for i in items if isinstance(i, PurgeRecord) or ends.wanted(i.task_id)]
    fold.records += len(items) - len(kept)  # read and passed over: their task is purged for good
    fold.add(kept)
    done: list[Folded] = []
    for task_id in dict.fromkeys(i.task_id for i in kept):
        if ends.at.get(task_id) == where:
            task = fold.take(task_id)
            if task is not None:
                done.append(task)
    return done
