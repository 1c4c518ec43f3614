"""The Redis side of the outbox: which tasks have records waiting, reading them, trimming them.

Writers XADD to `wk:{T}:outbox` inside their transaction, then SADD T to `wk:outbox:dirty`.
The relay SPOPs tasks from the index *before* it reads their outbox, so a record added after the
read re-adds its task to the index. A writer that died between EXEC and SADD is found by sweep():
a SCAN over every outbox key, run at relay start and every OUTBOX_SWEEP_S. The relay's trim deletes
an outbox it empties (TRIM, in one function: a record added meanwhile keeps the stream), so the
sweep reads only outboxes that hold records, not one per task Redis has ever held.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from wakeful.state import functions, keys
from wakeful.state.functions import Function

# An outbox entry's `k` field when it holds another record than a change (schemas/changelog.py);
# only entries without one feed the task index.
ACTION = b"a"
QUARANTINE = b"q"
PURGE = b"p"  # a purged task's tombstone (schemas/tombstone.py)

# KEYS[1] a task's outbox; ARGV the entry ids the broker has acknowledged (or dead-lettered), or
# none (the sweep: an outbox left empty by an older relay). returns: how many entries were deleted.
# The stream goes with its last entry. allow-oom: it only frees memory, and a full Redis is drained
# by it.
TRIM = Function(
    "outbox_trim",
    """
local n = 0
if #ARGV > 0 then n = redis.call('XDEL', KEYS[1], unpack(ARGV)) end
if redis.call('XLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[1]) end
return n
""",
    ("allow-oom",),
)
# KEYS[1] a task's outbox. returns: the id of its oldest entry, or false when it has none. Only the
# id leaves Redis: the relay's sweep reads it from every outbox that holds records, for its
# watermark (D87), and a backlog's first records are kilobytes each.
FIRST = Function(
    "outbox_first",
    """
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if #first == 0 then return false end
return first[1][1]
""",
    ("no-writes",),
)
FUNCTIONS = (TRIM, FIRST)


@dataclass(frozen=True)
class Malformed:
    """An outbox entry that cannot go on wakeful.log; dead-lettered with its reason, then trimmed."""

    task_id: str
    entry_id: bytes
    fields: dict[bytes, bytes]
    reason: str = "malformed outbox entry: it lacks the id or r field every writer sets"


@dataclass(frozen=True)
class Pending:
    task_id: str
    entry_ids: list[bytes]
    record_ids: list[str]  # the readers' dedupe keys, "<task_id>:<state_version>" for a change
    records: list[bytes]  # OutboxRecord or ActionRecord JSON (schemas/changelog.py), in write order
    changes: list[bytes]  # the OutboxRecords among them (any other record's entry has a `k` field)
    trace: bytes = b""  # the traceparent of the latest change that carries one (docs/tracing.md)


class Outbox:
    def __init__(self, client: redis.Redis, batch: int = 500) -> None:
        self.client = client
        self.batch = batch
        # The last sweep's oldest entry still waiting, as its stream id's milliseconds (Redis's
        # time when it was added), or None: every outbox was empty (the relay's watermark, D87).
        self.oldest_ms: int | None = None

    def time_ms(self) -> int:
        """Redis's clock, in milliseconds: what outbox entry ids are stamped with."""
        seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def claim(self, tasks: int = 200) -> list[str]:
        """Take up to `tasks` task ids off the index."""
        popped: list[bytes] = self.client.spop(keys.OUTBOX_DIRTY, tasks) or []  # type: ignore[assignment]
        return [t.decode() for t in popped]

    def read(self, task_ids: list[str]) -> tuple[list[Pending], list[Malformed]]:
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.xrange(keys.outbox(task_id), count=self.batch)
        pending, malformed = [], []
        for task_id, entries in zip(task_ids, pipe.execute(), strict=True):
            good = [e for e in entries if b"id" in e[1] and b"r" in e[1]]
            malformed += [
                Malformed(task_id, e[0], e[1]) for e in entries if b"id" not in e[1] or b"r" not in e[1]
            ]
            if good:
                pending.append(
                    Pending(
                        task_id,
                        [e[0] for e in good],
                        [e[1][b"id"].decode() for e in good],
                        [e[1][b"r"] for e in good],
                        [e[1][b"r"] for e in good if b"k" not in e[1]],
                        next((e[1][b"tp"] for e in reversed(good) if b"tp" in e[1]), b""),
                    )
                )
            if len(entries) == self.batch:  # more behind this page: keep the task indexed
                self.client.sadd(keys.OUTBOX_DIRTY, task_id)
        return pending, malformed

    def trim(self, done: Sequence[Pending], malformed: Sequence[Malformed] = ()) -> None:
        """Delete records the broker has acknowledged (and dead-lettered malformed entries)."""
        entries: dict[str, list[bytes]] = {}
        for p in done:
            entries.setdefault(p.task_id, []).extend(p.entry_ids)
        for m in malformed:
            entries.setdefault(m.task_id, []).append(m.entry_id)
        self._trim({keys.outbox(task_id): ids for task_id, ids in entries.items()})

    def _delete_if_empty(self, outboxes: list[str]) -> None:
        self._trim({key: [] for key in outboxes})

    def _trim(self, entries: dict[str, list[bytes]]) -> None:
        if not entries:
            return
        pipe = self.client.pipeline(transaction=False)
        for key, ids in entries.items():
            pipe.execute_command(*functions.command(TRIM, [key], ids))  # type: ignore[no-untyped-call]
        for value in pipe.execute(raise_on_error=False):
            functions.raise_if_missing(TRIM, value)
            if isinstance(value, redis.ResponseError):
                raise value

    def requeue(self, task_ids: list[str]) -> None:
        if task_ids:
            self.client.sadd(keys.OUTBOX_DIRTY, *task_ids)

    def sweep(self) -> int:
        """Re-index every task whose outbox holds records; returns how many were found. An empty
        outbox (left by a relay from before the trim deleted them) is deleted on the way."""
        found: list[str] = []
        chunk: list[bytes] = []
        self.oldest_ms = None
        for key in self.client.scan_iter(match=keys.PATTERN_OUTBOX, count=1000, _type="stream"):
            chunk.append(key)
            if len(chunk) == 500:
                found += self._nonempty(chunk)
                chunk = []
        found += self._nonempty(chunk)
        self.requeue(found)
        return len(found)

    def _nonempty(self, outboxes: list[bytes]) -> list[str]:
        pipe = self.client.pipeline(transaction=False)
        for key in outboxes:
            pipe.execute_command(*functions.command(FIRST, [key.decode()], []))  # type: ignore[no-untyped-call]
        replies = pipe.execute(raise_on_error=False)
        for value in replies:
            functions.raise_if_missing(FIRST, value)
            if isinstance(value, redis.ResponseError):
                raise value
        counted = list(zip(outboxes, replies, strict=True))
        self._delete_if_empty([k.decode() for k, first in counted if not first])
        for _, first in counted:
            if first:
                ms = int(first.split(b"-")[0])
                self.oldest_ms = ms if self.oldest_ms is None else min(self.oldest_ms, ms)
        return [keys.task_of(k.decode()) for k, first in counted if first]
