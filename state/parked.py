"""A quarantined task, for the person who looks at it: read it, and release it.

A task parked by gate 4 ("incompatible": its versions are not ones the deployed app carries forward)
is sound: its seal, counter and schema verified. It stays readable (`read`), and an operator may
release it (`release`): one compare-and-swap writes the task as the release made it and removes
the marker, under the same WATCH as every change (the task, its counter, its lease, its marker),
so a release never lands on a task that moved since it was read. A task parked for any other reason
(a failed integrity check: its record cannot be trusted) is never released.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from wakeful.core.errors import Contention, IntegrityError, WakefulError
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.state import checks, first_step, keys, last_step
from wakeful.state.store import Change, Store

RELEASABLE = frozenset({"incompatible"})  # the marker reasons a person may release


class NotReleasable(WakefulError):
    """The task is not one a release may change: not quarantined, or parked for its record."""


def read(store: Store, task_id: str) -> tuple[Checkpoint | None, dict[str, Any] | None]:
    """The task's checkpoint as sealed (None when it is missing or fails a check) and its quarantine
    marker (None when it is not quarantined). Writes nothing, not even a marker."""
    with store.pinned(task_id) as conn:  # one batch: the blob and its counter as of one moment
        (blob, marker), ctr = conn.batch(
            [
                ("MGET", keys.state(task_id), keys.quarantine(task_id)),
                ("XREVRANGE", keys.ctr(task_id), "+", "-", "COUNT", 1),
            ]
        )
    found = _marker(marker)
    try:
        return checks.verified(store.sealer, task_id, blob, ctr, None), found
    except IntegrityError:  # a keyring this process cannot read is raised, not taken for damage
        return None, found


def release(
    store: Store,
    task_id: str,
    fn: Callable[[Checkpoint], Checkpoint],
    detail: Callable[[Checkpoint, Checkpoint], dict[str, Any]],
) -> Change:
    """Apply `fn` (the release: a pure function of the task as read) to a task gate 4 parked, and
    lift its marker, in one compare-and-swap. Raises NotReleasable (nothing written) for a task
    that is not so parked; fn's own errors are raised as they are, nothing written."""
    with store.pinned(task_id) as conn:
        for lost in range(keys.CAS_RETRIES):
            replies = conn.batch(first_step.reads(task_id, "release"))
            checks.raise_replies(task_id, *replies)
            blob, ctr, held, raw = first_step.watched(replies)
            marker = _marker(raw)
            if marker is None:
                raise NotReleasable(f"task {task_id} is not quarantined: there is nothing to release")
            if marker.get("reason") not in RELEASABLE:
                raise NotReleasable(
                    f"task {task_id} was quarantined for {marker.get('reason')!r} "
                    f"({marker.get('detail', '')}): its record failed a check and cannot be trusted, "
                    "so it is never released"
                )
            current = checks.verified(store.sealer, task_id, blob, ctr, None)
            fence = checks.writer_fence(task_id, None, held, current)
            new = fn(current)
            checks.guard(current, new, True, store.moves)
            stamped = last_step.stamp(new, current.state_version + 1, fence, store.clock())
            message_id = keys.runtime_id("release", current.state_version)
            said = detail(current, stamped) | {"quarantined": marker}
            written = store._commit(conn, stamped, message_id, said, also=_lift, before=None, release=None)
            if written is not None:
                return Change("applied", stamped, conn.round_trips, lost, written)
    raise Contention(task_id, keys.CAS_RETRIES)


def _lift(new: Checkpoint) -> list[tuple[Any, ...]]:
    """The release's own write inside the change's EXEC: the marker goes with the old state."""
    return [("DEL", keys.quarantine(new.task_id))]


def _marker(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"reason": "unreadable", "detail": "the quarantine marker is not JSON"}
    return doc if isinstance(doc, dict) else {"reason": "unreadable", "detail": "the marker is not a record"}
