"""What a transition refuses, as pure checks: a stored blob that fails verification, a writer
whose lease or fence no longer holds the task, a proposed checkpoint its guard forbids, and Redis
replies that report an error.

verified() runs the verify step of WATCH -> read -> verify -> guard -> MULTI -> write -> EXEC on
the replies of the read, and guard() the guard step on what the transition's function proposed.
Neither writes anything: the store quarantines the task when one raises an IntegrityError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import redis

from wakeful.core.errors import (
    DecodeError,
    IllegalTransition,
    LeaseBusy,
    LeaseLost,
    PermissionRefused,
    RollbackDetected,
    TamperedState,
    TaskNotFound,
    TaskQuarantined,
    UnreadableState,
)
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.state.lease import Lease
from wakeful.state.seal import Sealer

# The loaded app's transition table: may a task of this workflow move from one stage to another?
Moves = Callable[[str, str, str], bool]


def verified(sealer: Sealer, task_id: str, blob: bytes | None, ctr: Any, marker: bytes | None) -> Checkpoint:
    """The checkpoint sealed in `blob`, read beside the task's last counter entry and quarantine
    marker. Raises TaskQuarantined, TaskNotFound, or an IntegrityError (the task must be
    quarantined): a bad seal, a missing counter, a rollback, an unreadable schema version, or
    sealed content that disagrees with its header."""
    if marker is not None:
        raise TaskQuarantined(task_id, orjson.loads(marker).get("reason", "unknown"))
    if blob is None:
        if ctr:
            raise TamperedState(task_id, "the state is gone but its counter is not")
        raise TaskNotFound(task_id)
    head, plain = sealer.unseal(task_id, blob)
    counter = _counter(ctr)
    if counter is None:
        raise TamperedState(task_id, "the monotonic counter is missing")
    if head.state_version < counter:
        raise RollbackDetected(
            task_id, f"stored blob is version {head.state_version}, the counter is at {counter}"
        )
    if head.state_version != counter:
        raise TamperedState(task_id, f"blob version {head.state_version} is ahead of counter {counter}")
    try:
        checkpoint = Checkpoint.decode(plain)
    except DecodeError as exc:  # gate 3: a schema version no migration knows never resumes
        raise UnreadableState(task_id, f"{exc.reason}; a person must migrate or discard it") from exc
    if checkpoint.task_id != task_id or checkpoint.state_version != head.state_version:
        raise TamperedState(task_id, "the sealed content disagrees with its header")
    return checkpoint


def guard(old: Checkpoint, new: Checkpoint, restamp: bool, moves: Moves) -> None:
    """A transition may change the business, execution and external layers, never identity or scope.

    restamp: a declared "migrate" rule may also move the policy and tool-catalog stamps.
    """
    if new.task_id != old.task_id or new.security != old.security:
        raise TamperedState(old.task_id, "a transition tried to change the task id or security scope")
    fixed: dict[str, Any] = {"state_version": 0}
    if restamp:
        fixed |= {"policy": "", "tool_catalog": ""}
    if new.versions.model_copy(update=fixed) != old.versions.model_copy(update=fixed):
        raise TamperedState(old.task_id, "a transition tried to change the version stamps")
    if new.business.workflow != old.business.workflow or not moves(
        old.business.workflow, old.stage, new.stage
    ):
        raise IllegalTransition(old.task_id, old.stage, new.stage)


def _counter(ctr: Any) -> int | None:
    """The last counter entry id "<version>-1" as an int; None when the stream is empty or missing."""
    if not ctr:
        return None
    entry_id = ctr[0][0]
    return int(entry_id.split(b"-")[0])


def raise_replies(task_id: str, *replies: Any) -> None:
    """Raise the first error among a batch's replies: NOPERM as PermissionRefused, others as they are."""
    for reply in replies:
        if isinstance(reply, redis.exceptions.NoPermissionError):
            raise PermissionRefused(f"task {task_id}: Redis refused this role: {reply}")
        if isinstance(reply, redis.ResponseError):
            raise reply


def check_exec(task_id: str, replies: list[Any]) -> None:
    """Raise on an error reply around EXEC (the next to last reply), or on a write refused inside it."""
    raise_replies(task_id, *replies[:-2], *replies[-1:])
    results = replies[-2]
    for result in results:
        if isinstance(result, redis.ResponseError):
            # A write inside EXEC was refused (e.g. the counter would not grow): someone moved the
            # counter outside a transition. The state written beside it cannot be trusted.
            raise TamperedState(task_id, f"a write in the transaction was refused: {result}")


def writer_fence(task_id: str, lease: Lease | None, held: bytes | None, current: Checkpoint) -> int:
    """The fence a change writes, from the lease holder read under its WATCH (`held`): the caller's,
    if its lease still holds the task and is not older than the last writer's (else LeaseLost); the
    last writer's, for a lease-free change while no one holds it (else LeaseBusy; D49)."""
    if lease is None:
        if held is not None:
            raise LeaseBusy(task_id)
        return current.execution.fence
    if held is None or held.decode() != lease.token:
        raise LeaseLost(task_id, lease.token, "expired or taken by another worker")
    if lease.fence < current.execution.fence:
        raise LeaseLost(task_id, lease.token, f"fence {lease.fence} < {current.execution.fence}")
    return lease.fence
