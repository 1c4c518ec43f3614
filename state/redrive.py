"""How far back `wakeful recover` re-drives each partition of the role topics (D87). Pure: no Kafka,
no Redis.

The gate and the executor store their Kafka offsets once a change is in Redis; the relay puts the
change on wakeful.log later. A Redis lost in between loses changes whose messages no group will
read again. Recover moves the groups back to where the log says nothing after is certain:

- each change a handler made carries its message's partition and the run loop's floor for it then
  (schemas/redrive.MessageSource): every message below the floor was handled, its change made,
  before this change was;
- a watermark of the relay (schemas/redrive.LogWatermark) says every change made before it had
  appended the log's records below `covers` is on the log.

So for a change on log partition L below the newest watermark's covers[L], every message of its
source partition below its floor made its change before a change the watermark covers: that
change is on the log, and so is every one before it. The start of a partition is the highest such
floor; a partition no covered change names starts at the earliest offset its topic still keeps.
A floor lower than another only adds work, never loses any: any covered change's floor is a safe
start, and the highest is the least work.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wakeful.schemas.redrive import LogWatermark, MessageSource

Where = tuple[str, int]  # topic, partition


@dataclass
class Coverage:
    """The log's changes' floors and the relay's watermarks, folded in any order of partitions.

    Memory: per (log partition, source partition), the changes since the last watermark read whose
    floor is higher than every earlier one's (a later change with a lower floor adds nothing: the
    earlier one is covered whenever it is), and one entry for everything before it."""

    covers: dict[int, int] = field(default_factory=dict)  # log partition -> end offset vouched for
    watermarks: int = 0
    changes: int = 0  # changes that named their source
    steps: dict[tuple[int, str, int], list[tuple[int, int]]] = field(default_factory=dict)

    def change(self, log_partition: int, log_offset: int, source: MessageSource) -> None:
        self.changes += 1
        steps = self.steps.setdefault((log_partition, source.topic, source.partition), [])
        if steps and steps[-1][1] >= source.floor:
            return
        steps.append((log_offset, source.floor))

    def watermark(self, mark: LogWatermark) -> None:
        self.watermarks += 1
        for partition, end in mark.covers:
            if end > self.covers.get(partition, 0):
                self.covers[partition] = end
        for (log_partition, _, _), steps in self.steps.items():
            end = self.covers.get(log_partition, 0)
            below = sum(1 for offset, _ in steps if offset < end)
            if below > 1:  # the rising floors below the covered end: the last stands for all of them
                del steps[: below - 1]

    def floors(self) -> dict[Where, int]:
        """Per source partition, the highest floor of a change the watermarks cover."""
        found: dict[Where, int] = {}
        for (log_partition, topic, partition), steps in self.steps.items():
            end = self.covers.get(log_partition, 0)
            covered = [floor for offset, floor in steps if offset < end]
            if covered:
                found[(topic, partition)] = max(found.get((topic, partition), 0), covered[-1])
        return found


@dataclass(frozen=True)
class Start:
    """Where one partition's group reads from after a recover, and why."""

    topic: str
    partition: int
    offset: int  # the group's next read: `committed`, or lower when the log asks for more
    floor: int | None  # what the log vouches for (None: no covered change of this partition)
    low: int  # the earliest offset the topic still keeps
    committed: int | None  # the group's committed offset before the recover (None: none)
    gone: int  # messages from `floor` up that retention deleted: they cannot be re-driven
    high: int = 0  # the end of the partition when it was planned

    @property
    def first(self) -> int:
        """The first message the log does not vouch for that the topic still keeps."""
        return min(max(self.low if self.floor is None else self.floor, self.low), self.high)

    @property
    def moved(self) -> bool:
        """Some message the group has read already must be read again (from `offset`)."""
        return self.committed is not None and self.offset < self.committed

    @property
    def again(self) -> tuple[int, int]:
        """The offsets [from, to) the group read already and must read again: what is published
        again. What it has not read yet it reads anyway."""
        if self.committed is None or not self.moved:
            return (self.offset, self.offset)
        return (self.offset, min(self.committed, self.high))

    def why(self) -> str:
        where = f"{self.topic}[{self.partition}]"
        if self.gone:
            return (
                f"{where}: the log asks to re-drive from offset {self.floor}, but the topic keeps "
                f"only from {self.low}: {self.gone} message(s) the log may not reflect are deleted"
            )
        said = (
            f"from {self.floor}, the floor of the last change the relay's watermark covers"
            if self.floor is not None
            else f"from {self.low}, the earliest offset kept (no change of this partition is covered yet)"
        )
        if self.committed is None:
            return f"{where}: {said}; the group has no offset: it reads from the earliest kept"
        if not self.moved:
            return f"{where}: {said}; the group reads from {self.committed} yet, nothing to read again"
        return f"{where}: {said}; its group had read up to {self.committed}"


def start(where: Where, floor: int | None, low: int, high: int, committed: int | None) -> Start:
    """Where the group of `where` must read from: the log's floor, or the earliest offset kept when
    the log has none; never below what the topic keeps nor past its end, and never forward of what
    the group committed (it reads from there anyway). `committed` None: the group has no offset,
    and reads from the earliest kept (auto.offset.reset=earliest), which covers any start."""
    wanted = low if floor is None else floor
    gone = max(0, low - wanted)
    offset = min(max(wanted, low), high)
    if committed is not None:
        offset = min(offset, committed)
    return Start(where[0], where[1], offset, floor, low, committed, gone, high)
