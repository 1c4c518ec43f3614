"""A purged task's tombstone on wakeful.log (docs/retention.md, D73).

`wakeful task purge` deletes a finished task's Redis keys and, in the same Lua call, adds a
PurgeRecord to the task's outbox (`k=p`); the relay publishes it like any record, after the task's
last change, so the log reads: the task's changes, then its tombstone. `wakeful recover` folds it:
everything the log held of the task before its tombstone is dropped and never restored, and a task
made later under the same id starts afresh.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

from wakeful.schemas import logs
from wakeful.schemas.base import Record

# Told apart from a change, an action record and a quarantine marker by this key (log_items).
PURGE_FIELD = logs.PURGE_FIELD
OUTBOX_KIND = b"p"  # the outbox entry's `k` field: not a change (the index skips it)


class PurgeRecord(Record):
    """A finished task's keys were deleted: what it was when it went, who took it, when."""

    KIND: ClassVar[str] = "purge_record"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    # Dedupe key, never change: "<task_id>:purge:<state_version>:<purged_at in ms>".
    record_id: str
    task_id: str
    tenant: str
    workflow: str
    stage: str
    state_version: int  # the last change's: every record of the task up to it is gone from Redis
    last_change: datetime
    purged_at: datetime
    by: str
    reason: str  # the rule that took it: "closed_tasks=30 days 0:00:00, before=..."


def record_id(task_id: str, state_version: int, purged_at: datetime) -> str:
    """A tombstone's record id, from its content (never change: readers dedupe by it)."""
    return f"{task_id}:purge:{state_version}:{int(purged_at.timestamp() * 1000)}"


def purge_record(
    *,
    task_id: str,
    tenant: str,
    workflow: str,
    stage: str,
    state_version: int,
    last_change: datetime,
    purged_at: datetime,
    by: str,
    reason: str,
) -> PurgeRecord:
    return PurgeRecord(
        record_id=record_id(task_id, state_version, purged_at),
        task_id=task_id,
        tenant=tenant,
        workflow=workflow,
        stage=stage,
        state_version=state_version,
        last_change=last_change,
        purged_at=purged_at,
        by=by,
        reason=reason,
    )
