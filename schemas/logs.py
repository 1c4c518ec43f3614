"""Action-log, inbox and outbox records."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import Field

from wakeful.schemas.base import Record


class ActionStatus(StrEnum):
    IN_FLIGHT = "in_flight"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ActionLogEntry(Record):
    """Intent first: inserted as in_flight before the downstream call, then its outcome."""

    KIND: ClassVar[str] = "action"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    op_key: str  # names the business operation and version, e.g. REFUND:{task}:v2; never per attempt
    task_id: str
    status: ActionStatus
    fence: int
    started_at: datetime
    finished_at: datetime | None = None
    result: dict[str, Any] | None = None
    reason: str | None = None


class InboxRecord(Record):
    """Why a message was accepted or refused at the door (the dedupe itself is a Redis set)."""

    KIND: ClassVar[str] = "inbox"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    message_id: str
    task_id: str | None
    accepted: bool
    reason: str | None = None
    at: datetime


class OutboxRecord(Record):
    """One Progress change, published on wakeful.log. record_id is the readers' dedupe key."""

    KIND: ClassVar[str] = "outbox"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    # Dedupe key format, never change: "<task_id>:<state_version>".
    record_id: str
    task_id: str
    state_version: int
    message_id: str
    stage: str
    task_version: int
    at: datetime
    detail: dict[str, Any] = Field(default_factory=dict)


class DeadLetter(Record):
    """What went to wakeful.dlq, and why; the raw input is kept so nothing is lost."""

    KIND: ClassVar[str] = "dead_letter"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    source: str  # the role that refused it
    reason: str
    task_id: str | None = None
    raw: str  # the refused input, decoded as UTF-8 with replacement, or base64 if binary
    at: datetime
