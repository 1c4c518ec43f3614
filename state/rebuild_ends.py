"""Where each task's records end on wakeful.log, so `wakeful recover` restores a task as soon as its
fold is complete instead of holding the whole log's fold (D86). Pure: no Kafka, no Redis.

Recover reads the log twice, up to the same ends. The first read notes, for each task that lives
on the log (one with a record after its last tombstone), the position of the message that carries
its last record: one int per such task, the tasks a restored Redis holds. The second read goes
partition by partition, in offset order, folds only the records of those tasks (a task purged for
good is never folded: its tombstone would drop it), and hands a task over once the message
holding its last record is folded. What it holds at any moment is the tasks whose records span
the position it reads, not the log.

A tombstone is judged in the first read, against what the log shows of its task up to it (D92):
the mark of its newest change and the quarantine marker in force (a `Tip` per task living on the
log). One a purge could not have made (an open task, a version the log does not end at, a task
finished too lately for the app's retention: the `Rule` says) takes nothing: the task lives on,
both reads fold it, and the refusal is named. The second read drops the refused tombstones, so the
two reads can never disagree about a task.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from wakeful.core import ids
from wakeful.schemas.changelog import ChangeMark, LogItem, Mark, QuarantineMark, log_marks
from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL
from wakeful.schemas.tombstone import PurgeRecord
from wakeful.schemas.tombstone import record_id as purge_record_id
from wakeful.state import keys
from wakeful.state.rebuild import Fold, Folded, Recent, lifted

_OFFSET_BITS = 48  # a Kafka offset is below 2**48 long after a log of a trillion messages


def position(partition: int, offset: int) -> int:
    """A message's place in the second read's order (partition by partition, then offset)."""
    return (partition << _OFFSET_BITS) | offset


class Tip(NamedTuple):
    """What the log shows of a task so far, for judging a tombstone: its newest change's mark (None:
    no readable change yet) and the quarantine marker in force."""

    change: ChangeMark | None = None
    marker: str | None = None


# Why a tombstone is refused (it takes nothing), or None: it is one a purge could have made.
Rule = Callable[[PurgeRecord, Tip], str | None]
REFUSALS_NAMED = 50  # refused tombstones named one by one; the rest counted


@dataclass
class Ends:
    """The first read: the position of the last message of each task living on the log, what a
    tombstone of it is judged by, and the tombstones refused (by record id: the second read drops
    them too)."""

    rule: Rule
    at: dict[str, int] = field(default_factory=dict)
    tips: dict[str, Tip] = field(default_factory=dict)
    tombstones: Recent = field(default_factory=Recent)  # a repeat takes nothing, as in the fold
    # Tombstone record id -> why, said for the first REFUSALS_NAMED ("" after: counted, not named).
    refused: dict[str, str] = field(default_factory=dict)

    def add(self, where: int, marks: Iterable[Mark]) -> None:
        """One message's records, each as its task id and its mark (schemas/changelog.log_marks)."""
        for task_id, mark in marks:
            if not ids.TASK_ID_RE.fullmatch(task_id):
                continue  # named by the fold, owned by no task
            if not isinstance(mark, PurgeRecord):
                self.at[task_id] = max(self.at.get(task_id, -1), where)
                if mark is not None:
                    self._note(task_id, mark)
                continue
            own = purge_record_id(task_id, mark.state_version, mark.purged_at)
            if mark.record_id != own or self.tombstones.seen(mark.record_id):
                continue  # the fold names the first, and the second is a repeat
            why = self.rule(mark, self.tips.get(task_id, Tip()))
            if why is not None:  # the task lives on: both reads fold it
                named = len(self.refused) < REFUSALS_NAMED
                self.refused[mark.record_id] = (
                    f"{task_id}: tombstone {mark.record_id}: {why}" if named else ""
                )
                continue
            self.at.pop(task_id, None)  # the fold drops it here; a later life starts afresh
            self.tips.pop(task_id, None)

    def _note(self, task_id: str, mark: ChangeMark | QuarantineMark) -> None:
        tip = self.tips.get(task_id)
        if isinstance(mark, QuarantineMark):
            held = tip or Tip()
            self.tips[task_id] = held._replace(marker=held.marker or mark.marker)  # the first stands
            return
        if tip is None:
            self.tips[task_id] = Tip(mark)
            return
        marker = tip.marker
        if mark.deleted and keys.quarantine(task_id) in mark.deleted:
            marker = lifted(marker)
        if tip.change is None or tip.change.version < mark.version or marker is not tip.marker:
            newest = mark if tip.change is None or tip.change.version < mark.version else tip.change
            self.tips[task_id] = Tip(newest, marker)

    def judged(self, item: LogItem) -> bool:
        """Whether the second read folds this tombstone (or any other record): not one refused."""
        return not isinstance(item, PurgeRecord) or item.record_id not in self.refused

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
        if not ends.judged(item):
            continue  # a tombstone refused takes nothing: the wakes of its task are sent again
        if item.record_id == purge_record_id(item.task_id, item.state_version, item.purged_at):
            yield item.task_id


def marks(items: Iterable[LogItem]) -> list[Mark]:
    """Records as the first read sees them (schemas/changelog.log_marks)."""
    return log_marks(LOG_BATCH_HEAD + b",".join(i.encode() for i in items) + LOG_BATCH_TAIL)[0]


def fold_message(fold: Fold, ends: Ends, where: int, items: list[LogItem]) -> list[Folded]:
    """The second read, one message: fold its records (read only for tasks living on the log, and
    every tombstone, which the fold counts), then take each task whose last message this is."""
    kept = [i for i in items if (isinstance(i, PurgeRecord) or ends.wanted(i.task_id)) and ends.judged(i)]
    fold.records += len(items) - len(kept)  # read and passed over: their task is purged for good
    fold.add(kept)
    done: list[Folded] = []
    for task_id in dict.fromkeys(i.task_id for i in kept):
        if ends.at.get(task_id) == where:
            task = fold.take(task_id)
            if task is not None:
                done.append(task)
    return done
