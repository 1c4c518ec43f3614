"""The two reads of wakeful.log that `wakeful recover` and `recover --check` make (D86, D87).

The first read notes where each task's records end (state/rebuild_ends.py), judges each tombstone
by the purge's rule (workflow/tombstones.py, D92), and notes how far back the log vouches for the
role topics (state/redrive.Coverage: each change's source and the relay's watermarks); the second
folds the log partition by partition and hands each task over in batches
as soon as its records are all folded. Both read up to the same ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import redis

from wakeful.core.settings import Settings
from wakeful.operate import log_reader
from wakeful.state import keys
from wakeful.state.rebuild import Fold, Folded
from wakeful.state.rebuild_ends import Ends, Rule, fold_message, position, purged_for_good
from wakeful.state.redrive import Coverage

BATCH = 200  # tasks restored between two progress lines
Say = Callable[[str], None]


class Scan:
    """wakeful.log read twice up to the same ends (state/rebuild_ends.py): first where each task's
    records end and the re-drive's coverage, then folded partition by partition, each task handed
    over in batches as soon as its records are all folded. Holds the ends (one int per task living
    on the log), the coverage (state/redrive.Coverage: rising floors per source partition), the
    tasks re-driven wakes name, the tasks whose records span the read, and one batch: never the
    log's fold."""

    def __init__(self, say: Say, rule: Rule) -> None:
        self.say = say
        self.ends = Ends(rule)  # a tombstone `rule` refuses takes nothing (D92)
        self.fold = Fold()
        self.first = log_reader.Read()  # where tasks end, and the coverage (D87)
        self.read = log_reader.Read()  # the fold's
        self.spans: list[log_reader.Span] | None = None
        # The tasks re-driven wakes name (devstack/redrive.named), and those of them whose history
        # on the log ends in their tombstone, noted by the second read (D87).
        self.among: set[str] = set()
        self.purged: set[str] = set()

    @property
    def coverage(self) -> Coverage:
        return self.first.coverage

    def find_ends(self, settings: Settings) -> None:
        """The first read (once): where each task's records end, and the re-drive's coverage."""
        if self.spans is not None:
            return
        self.spans = log_reader.spans(settings)

        def noted(done: int, total: int) -> None:
            self.say(f"recover: found where {len(self.ends)} tasks end in {done} of {total} log messages")

        for partition, offset, marks in log_reader.read_marks(settings, self.first, self.spans, noted):
            self.ends.add(position(partition, offset), marks)

    def folds(self, settings: Settings) -> Iterator[list[Folded]]:
        self.find_ends(settings)
        spans = self.spans or []

        def progress(done: int, total: int) -> None:
            self.say(f"recover: read {done} of {total} log messages ({len(self.fold.tasks)} tasks open)")

        batch: list[Folded] = []
        # partition by partition: a task split over two (partitions added later) ends in the later
        read = log_reader.read_positioned(
            settings, self.read, spans, progress, one_by_one=True, wanted=self.ends.wanted
        )
        for partition, offset, items in read:
            self.purged.update(purged_for_good(self.ends, items, self.among))
            batch += fold_message(self.fold, self.ends, position(partition, offset), items)
            if len(batch) >= BATCH:
                yield batch
                batch = []
        rest = [*batch, *(self.fold.take(t) for t in list(self.fold.tasks))]
        for start in range(0, len(rest), BATCH):
            yield [t for t in rest[start : start + BATCH] if t is not None]


def uncovered(
    admin: redis.Redis, settings: Settings, say: Say, rule: Rule
) -> tuple[int, dict[str, str], Coverage]:
    """How many tasks live on the log, the tasks Redis holds that the log could not give back as
    they are now, and the re-drive's coverage (D87). A task is not covered when the log is behind
    it (the relay's lag, or a change made before the log carried checkpoints), its outbox holds
    records not yet published, or the log cannot restore it at all. None uncovered: a loss of
    Redis now would lose no task's progress."""
    found: dict[str, str] = {}
    scan = Scan(say, rule)
    for tasks in scan.folds(settings):
        pipe = admin.pipeline(transaction=False)
        for task in tasks:
            pipe.xrevrange(keys.ctr(task.task_id), "+", "-", count=1)
        for task, top in zip(tasks, pipe.execute(), strict=True):
            if not top:
                continue  # Redis does not hold it: nothing of it to lose
            held = int(top[0][0].split(b"-")[0])
            why = task.unrestorable()
            if why is None and task.last is not None and task.last.state_version < held:
                why = f"Redis is at version {held}, the log at {task.last.state_version}"
            if why is not None:
                found[task.task_id] = why
    outboxes = [k.decode() for k in admin.scan_iter(match=keys.PATTERN_OUTBOX, count=10_000)]
    pipe = admin.pipeline(transaction=False)
    for name in outboxes:
        pipe.xlen(name)
    for name, waiting in zip(outboxes, pipe.execute(), strict=True):
        if waiting:
            found[keys.task_of(name)] = f"{waiting} record(s) in its outbox not yet on the log"
    for name in admin.scan_iter(match=keys.PATTERN_CTR, count=10_000):
        task_id = keys.task_of(name.decode())
        if task_id not in scan.ends:
            found.setdefault(task_id, "the log holds nothing of it")
    return len(scan.ends), found, scan.coverage
