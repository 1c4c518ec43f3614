"""Progress in Redis: load and verify, create, and transition by compare-and-swap.

A transition reads as WATCH -> read -> verify -> guard -> MULTI -> write -> EXEC, in two round trips:

1. WATCH state, ctr, lease and quarantine (one command); MGET state, lease, quarantine; the last ctr
   entry; SISMEMBER inbox.
2. any writes to keys outside the task (`before`, e.g. a wake in wk:deadlines); MULTI; SET sealed
   state; XADD ctr <v>-1 (refused by Redis if it does not grow); SADD inbox; XADD outbox; EXEC;
   then SADD the outbox index (the commands of each step: state/first_step.py, state/last_step.py).

Everything between MULTI and EXEC names keys of the task's hash slot only, so it runs unchanged on
Redis Cluster. A write to a shared key goes outside it, where a crash cannot lose what it stands
for: `before` writes land ahead of EXEC, idempotent and harmless if the transaction then fails
(their readers check the task); the outbox index lands after EXEC, and a sweep re-finds what a
crash left out of it (docs/decisions.md D40). On a cluster each of those is its own round trip.

A caller with reads of its own to make first (the gate: the live authority, the evidence) sends step
1 itself, `first_step.reads()` in its batch on its own `Pinned`, and hands the replies to `create()` or
`transition()` as `first`: the change then costs one round trip of its own.

A lost race (EXEC returns nil) is re-read and re-validated from step 1, at most CAS_RETRIES times.
Any failed integrity check (state/checks.py) quarantines the task: a marker key that every later
load refuses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, NoReturn

import orjson
import redis

from wakeful.core import metrics
from wakeful.core.errors import (
    Contention,
    IntegrityError,
    StaleVersion,
    TamperedState,
    TaskExists,
)
from wakeful.schemas.changelog import quarantine_record
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.state import checks, first_step, keys, last_step
from wakeful.state.checks import Moves
from wakeful.state.last_step import Also, Shows
from wakeful.state.lease import Held, Lease, Leases
from wakeful.state.pinned import Pinned
from wakeful.state.seal import Sealer

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Keep:
    """What a transition's fn returns to write nothing: the task stays as read."""


Transition = Callable[[Checkpoint], Checkpoint | Keep]
# An outbox record's detail, or what makes it from the task as read and as the change writes it.
Detail = dict[str, Any] | Callable[[Checkpoint, Checkpoint], dict[str, Any]]


@dataclass(frozen=True)
class Change:
    """What a create or a transition did: "applied" (checkpoint is the new state), "duplicate"
    (its message id was applied before: checkpoint is the current state) or "kept" (fn returned
    Keep: nothing was written, checkpoint is the state fn saw)."""

    status: Literal["applied", "duplicate", "kept"]
    checkpoint: Checkpoint
    round_trips: int
    lost_races: int = 0  # EXEC aborts that were re-read and re-validated
    also: tuple[Any, ...] = ()  # the replies, inside EXEC, of the writes `also` added


class Store:
    def __init__(
        self,
        client: redis.Redis,
        sealer: Sealer,
        *,
        moves: Moves,
        clock: Clock = utcnow,
        shown: Shows | None = None,  # what a task shows its readers, on each change's record (D107)
    ) -> None:
        self.client = client
        self.sealer = sealer
        self.moves = moves
        self.clock = clock
        self.shown = shown

    # ---- reads -------------------------------------------------------------------------------

    def load(self, task_id: str) -> Checkpoint:
        """The task's verified checkpoint; raises TaskNotFound, TaskQuarantined or an IntegrityError."""
        return self.load_with(task_id, ())[0]

    def load_with(self, task_id: str, extra: Sequence[tuple[Any, ...]]) -> tuple[Checkpoint, list[Any]]:
        """load(), plus other reads the caller needs now, in the same round trip (their replies)."""
        with self.pinned(task_id) as pinned:
            replies = pinned.batch(
                [
                    ("GET", keys.state(task_id)),
                    ("XREVRANGE", keys.ctr(task_id), "+", "-", "COUNT", 1),
                    ("GET", keys.quarantine(task_id)),
                    *extra,
                ]
            )
        blob, ctr, marker = replies[:3]
        checks.raise_replies(task_id, *replies)
        return self._verify(task_id, blob, ctr, marker), replies[3:]

    def acquire_with(
        self, leases: Leases, task_id: str, extra: Sequence[tuple[Any, ...]], *, pinned: Pinned
    ) -> tuple[Lease, Checkpoint, list[Any], list[Any]]:
        """The task's lease taken, then its keys WATCHed and read (first_step.watch()) and `extra`
        read, in one round trip on `pinned`: (lease, checkpoint, replies to extra, replies to
        watch()). The last, with the reply to first_step.seen() after them, are a change's first
        step (transition's `first`).
        LeaseBusy, with nothing judged, when another worker holds the lease: reads made while it
        writes may straddle its EXEC."""
        replies = pinned.batch([leases.acquire_command(task_id), *first_step.watch(task_id), *extra])
        lease = leases.granted(task_id, replies[0])
        watched, more = replies[1 : 1 + first_step.WATCHED], replies[1 + first_step.WATCHED :]
        try:
            checks.raise_replies(task_id, *more)
            return lease, self.read_back(task_id, watched), more, watched
        except BaseException:
            with contextlib.suppress(redis.RedisError):  # else it lapses at its ttl
                leases.release(lease)
            raise

    def read_back(self, task_id: str, first: Sequence[Any]) -> Checkpoint:
        """The verified checkpoint in the replies to first_step.watch() or reads(), as load() would
        return it."""
        checks.raise_replies(task_id, *first)
        blob, ctr, _, marker = first_step.watched(first)
        return self._verify(task_id, blob, ctr, marker)

    def pinned(self, task_id: str) -> Pinned:
        """A connection that serves the task, for a caller that sends first_step.reads() in its own
        batch."""
        return Pinned(self.client, keys.state(task_id))

    def _pinned(self, task_id: str, pinned: Pinned | None) -> AbstractContextManager[Pinned]:
        return nullcontext(pinned) if pinned is not None else self.pinned(task_id)

    def quarantine_reason(self, task_id: str) -> dict[str, Any] | None:
        raw = self.client.get(keys.quarantine(task_id))
        return orjson.loads(raw) if raw else None

    # ---- writes ------------------------------------------------------------------------------

    def create(
        self,
        checkpoint: Checkpoint,
        message_id: str,
        detail: dict[str, Any] | None = None,
        also: Also | None = None,
        *,
        before: Also | None = None,
        pinned: Pinned | None = None,
        first: Sequence[Any] | None = None,
    ) -> Change:
        """Store a new task at state_version 1. The same message id twice is a duplicate, not an error.
        pinned, first: as for transition."""
        task_id = checkpoint.task_id
        with self._pinned(task_id, pinned) as conn:
            for lost in range(keys.CAS_RETRIES):
                replies = _first_step(conn, task_id, message_id, first if lost == 0 else None)
                blob, ctr, _, _ = first_step.watched(replies)
                if blob is not None:  # another creator won the race, or this message did before
                    if first_step.applied(replies):
                        return Change(
                            "duplicate", self._verify(task_id, blob, ctr, None), conn.round_trips, lost
                        )
                    raise TaskExists(task_id)
                if ctr:
                    self._quarantine(
                        task_id, TamperedState(task_id, "the counter exists but the state is gone")
                    )
                new = last_step.stamp(checkpoint, 1, checkpoint.execution.fence, self.clock())
                written = self._commit(conn, new, message_id, detail, also=also, before=before, release=None)
                if written is not None:
                    metrics.transition(new.business.workflow, new.stage)
                    return Change("applied", new, conn.round_trips, lost, written)
                # EXEC aborted: a WATCHed key moved (the task, or only its lease or marker): re-read
                metrics.cas_conflict("create")
        raise Contention(task_id, keys.CAS_RETRIES)

    def transition(
        self,
        task_id: str,
        expected_version: int | None,
        message_id: str,
        fn: Transition,
        *,
        lease: Lease | None,
        detail: Detail | None = None,
        restamp: bool = False,
        also: Also | None = None,
        before: Also | None = None,
        release: Held | None = None,
        pinned: Pinned | None = None,
        first: Sequence[Any] | None = None,
    ) -> Change:
        """Apply the pure fn to the task's state once per message id, by compare-and-swap. fn may
        return Keep to write nothing (status "kept"): the message id is not marked applied, and a
        caller's `pinned` keeps its WATCH.

        expected_version: the state_version the caller decided on; if the task has moved since,
        StaleVersion is raised and nothing is written. None re-applies fn to whatever is current.
        lease: the caller's lease on the task, or None for a change that needs none (the gate's:
        it calls nothing outside Redis). Such a change requires the lease free, as WATCHed since
        the first step: a holder's work is not judged mid-way (LeaseBusy), and one taken before
        EXEC aborts it. It keeps the fence of the last writer (docs/decisions.md D49).
        detail: the outbox record's detail (on wakeful.log, the task's history), or a function of
        the task as read and as changed that makes it (to record a migration the change made).
        restamp: fn may change the policy and tool-catalog stamps (a declared "migrate" rule).
        before: writes outside the task, sent ahead of MULTI; each must be idempotent and safe to
        find with no transition behind it.
        release: the caller's lease (`lease`, held), given back inside the transaction (and marked
        sent) when the change applies: nothing is left to do under it. A lost race keeps it for the
        retry.
        pinned, first: the caller's connection, on which it sent reads(task_id, message_id) (in a
        batch of its own), and their replies: the first attempt reads no more.
        """
        if release is not None and (lease is None or release.lease.token != lease.token):
            raise ValueError("release names a lease the change does not hold")
        with self._pinned(task_id, pinned) as conn:
            for lost in range(keys.CAS_RETRIES):
                replies = _first_step(conn, task_id, message_id, first if lost == 0 else None)
                blob, ctr, held, marker = first_step.watched(replies)
                seen = first_step.applied(replies)
                current = self._verify(task_id, blob, ctr, marker)
                if seen:
                    return Change("duplicate", current, conn.round_trips, lost)
                fence = checks.writer_fence(task_id, lease, held, current)
                if expected_version is not None and current.state_version != expected_version:
                    raise StaleVersion(task_id, expected_version, current.state_version)
                proposed = fn(current)
                if isinstance(proposed, Keep):
                    return Change("kept", current, conn.round_trips, lost)
                checks.guard(current, proposed, restamp, self.moves)
                new = last_step.stamp(proposed, current.state_version + 1, fence, self.clock())
                said = detail(current, new) if callable(detail) else detail
                written = self._commit(conn, new, message_id, said, also=also, before=before, release=release)
                if written is None:
                    metrics.cas_conflict("transition")
                    continue  # lost the race: re-read and re-validate
                metrics.transition(new.business.workflow, new.stage)
                return Change("applied", new, conn.round_trips, lost, written)
        raise Contention(task_id, keys.CAS_RETRIES)

    def quarantine(self, task_id: str, reason: str, detail: str) -> None:
        """Park the task for good with a recorded reason (first reason wins), and put the marker on
        wakeful.log through the task's outbox (D70): a Redis rebuilt from the log keeps it parked."""
        with self.pinned(task_id) as conn:
            replies = conn.batch(
                [("MULTI",), *self._quarantine_writes(task_id, reason, detail), ("EXEC",), *_dirty(task_id)]
            )
        checks.raise_replies(task_id, *replies)
        _counted(replies[-2], reason)

    def quarantine_watched(self, conn: Pinned, task_id: str, reason: str, detail: str) -> bool:
        """quarantine(), judged on a read that still holds: in a transaction on `conn`, whose WATCH
        since that read (first_step.reads) must not have been spent. False, with nothing written,
        when the task, its lease or its marker moved since: a change that takes no lease must not
        park a task in the middle of a holder's step (D49)."""
        replies = conn.batch(
            [("MULTI",), *self._quarantine_writes(task_id, reason, detail), ("EXEC",), *_dirty(task_id)]
        )
        checks.raise_replies(task_id, *replies[:-2])
        _counted(replies[-2], reason)
        return replies[-2] is not None

    def _quarantine_writes(self, task_id: str, reason: str, detail: str) -> list[tuple[Any, ...]]:
        """The marker (first reason wins) and its record on the task's outbox, for one MULTI."""
        marker = orjson.dumps({"reason": reason, "detail": detail, "at": self.clock().isoformat()})
        logged = quarantine_record(task_id, marker)
        return [
            ("SET", keys.quarantine(task_id), marker, "NX"),
            ("XADD", keys.outbox(task_id), "*", "id", logged.record_id, "r", logged.encode(), "k", "q"),
        ]

    # ---- internals ---------------------------------------------------------------------------

    def _commit(
        self,
        conn: Pinned,
        new: Checkpoint,
        message_id: str,
        detail: dict[str, Any] | None,
        *,
        also: Also | None,
        before: Also | None,
        release: Held | None,
    ) -> tuple[Any, ...] | None:
        """Send the change's last step (state/last_step.py), with `also`'s writes and then the
        lease's release inside its EXEC (a DEL: transition read the holder's token under the WATCH).
        Returns the replies of `also`'s writes, or None when EXEC aborted (a WATCHed key changed:
        the race is lost and nothing was written)."""
        extra = also(new) if also else []
        releasing = [Leases.release_inside(release)] if release else []
        inside = [*extra, *releasing]
        replies = conn.batch(
            last_step.commands(
                self.sealer, new, message_id, detail, also=inside, before=before, shown=self.shown
            )
        )
        if replies[-2] is None:
            return None
        checks.check_exec(new.task_id, replies)
        _sent(release)
        return tuple(replies[-2][last_step.WRITES : last_step.WRITES + len(extra)])

    def _verify(self, task_id: str, blob: bytes | None, ctr: Any, marker: bytes | None) -> Checkpoint:
        """The verified checkpoint; a failed integrity check quarantines the task, then is raised."""
        try:
            return checks.verified(self.sealer, task_id, blob, ctr, marker)
        except IntegrityError as exc:
            self._quarantine(task_id, exc)

    def _quarantine(self, task_id: str, exc: IntegrityError) -> NoReturn:
        self.quarantine(task_id, exc.reason_code, exc.detail)
        raise exc


def _first_step(conn: Pinned, task_id: str, message_id: str, first: Sequence[Any] | None) -> Sequence[Any]:
    """A change's first step: the caller's replies when it sent it (`first`), else read on `conn`."""
    replies = first if first is not None else conn.batch(first_step.reads(task_id, message_id))
    checks.raise_replies(task_id, *replies)
    return replies


def _dirty(task_id: str) -> list[tuple[Any, ...]]:
    """After a write to the task's outbox outside a change: the outbox index (state/outbox.py)."""
    return [("SADD", keys.OUTBOX_DIRTY, task_id)]


def _counted(done: Any, reason: str) -> None:
    """Count a quarantine whose marker this EXEC (`done`: its replies; None if aborted) newly set:
    the first reason wins, so a task quarantined again is not counted again."""
    if done and done[0]:
        metrics.quarantined(reason)


def _sent(held: Held | None) -> None:
    if held is not None:
        held.sent()
