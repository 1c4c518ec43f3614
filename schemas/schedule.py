"""A schedule, as the authority store keeps it (authority/schedule_store.py): what starts a task of
which workflow, on what rule, on whose word, and what a restart after an outage runs of the ticks it
missed (workflow/schedules.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import Field, StringConstraints

from wakeful.schemas.base import Record

ScheduleName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,39}$")]


class ScheduleRecord(Record):
    """One schedule. `rule` is "cron:<5 fields>" or "every:<seconds>"; no tick at or before `since`
    (its creation, or its last resume) is owed."""

    KIND: ClassVar[str] = "schedule"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    name: ScheduleName
    rule: str = Field(max_length=200)
    workflow: str = Field(max_length=64)
    payload: dict[str, Any] = Field(default_factory=dict)
    catch_up: str = Field(max_length=8)
    by: str = Field(max_length=128)
    since: datetime
    paused: bool = False
