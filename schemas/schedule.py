"""A schedule, as the authority store keeps it (authority/schedule_store.py): what starts a task of
which workflow in which tenant, on what rule, on whose word, and what a restart after an outage
runs of the ticks it missed (workflow/schedules.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, StringConstraints

from wakeful.core.ids import DEFAULT_TENANT, TENANT
from wakeful.schemas.base import Record

ScheduleName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_-]{0,39}$")]
Tenant = Annotated[str, StringConstraints(pattern=f"^{TENANT}$")]


class ScheduleRecord(Record):
    """One schedule. `rule` is "cron:<5 fields>" or "every:<seconds>"; no tick at or before `since`
    (its creation, or its last resume) is owed. Its tasks are `tenant`'s (D113): a record written
    before tenants had none, and is the default tenant's. A purge's (`job`, D114) has no workflow."""

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
    tenant: Tenant = DEFAULT_TENANT
    # What a tick does (D114): start a task of `workflow`, or run the app's retention purge.
    job: Literal["create", "purge"] = "create"

    def encode(self) -> bytes:
        """As stored: a schedule of the default tenant's creates without its tenant and job, as the
        release before wrote it and reads it (a timer of that release, in a rolling upgrade, reads
        it still)."""
        left = {k for k, v in (("tenant", DEFAULT_TENANT), ("job", "create")) if getattr(self, k) == v}
        return self.__pydantic_serializer__.to_json(self, by_alias=True, exclude=left or None)
