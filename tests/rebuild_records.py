"""Log records for the fold's unit tests (tests/unit/test_rebuild*.py): a change, an action-log
write and a tombstone of one task, as the relay publishes them."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import UTC, datetime

from wakeful.schemas.changelog import ActionRecord, LogItem, action_record
from wakeful.schemas.logs import ActionLogEntry, ActionStatus, OutboxRecord
from wakeful.schemas.tombstone import PurgeRecord, purge_record
from wakeful.state.rebuild import Fold

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TASK = "t-1"


def change(version: int, *, sealed: bool = True, writes: tuple[tuple[str, ...], ...] = ()) -> OutboxRecord:
    return OutboxRecord(
        record_id=f"{TASK}:{version}",
        task_id=TASK,
        state_version=version,
        message_id=f"m-{version}",
        stage="ready",
        task_version=1,
        at=T0,
        sealed=base64.b64encode(f"blob-{version}".encode()).decode() if sealed else "",
        writes=writes,
    )


def action(status: ActionStatus, fence: int = 1, attempts: int = 0, task_id: str = TASK) -> ActionRecord:
    entry = ActionLogEntry(
        op_key=f"REFUND:{task_id}:v1",
        task_id=task_id,
        status=status,
        fence=fence,
        started_at=T0,
        attempts=attempts,
    )
    return action_record(entry)


def folded(items: Sequence[LogItem]) -> Fold:
    fold = Fold()
    fold.add(items)
    return fold


def tombstone(version: int) -> PurgeRecord:
    return purge_record(
        task_id=TASK,
        tenant="default",
        workflow="refund",
        stage="closed",
        state_version=version,
        last_change=T0,
        purged_at=T0,
        by="ops",
        reason="closed_tasks=30 days",
    )
