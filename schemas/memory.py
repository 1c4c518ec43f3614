"""A memory record as the store keeps it (state/memory.py) and the operator sees it.

Never trusted for being in Redis: each is decoded strictly, and the read door shows only records
that decode, belong to the tenant and subject asked for, and are active and unexpired.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import AfterValidator, AwareDatetime, Field, PlainSerializer

from wakeful.core import ids
from wakeful.schemas.base import Record
from wakeful.schemas.events import MAX_EVENT_BYTES

SUBJECT = rf"^[a-z][a-z0-9_]{{0,31}}:{ids.KEY_ID}$"  # "<kind>:<id>", e.g. supplier:acme-gmbh
FACT = r"^[a-z][a-z0-9_]{0,63}$"
RECORD_ID = r"^m-[0-9a-f]{24}$"
# What a record's provenance names: a signed event (by its signer's key and its id), an evidence
# document (by content digest), a tool's answer (by its op key), or the runtime's own deadline.
SOURCE = rf"^(event:{ids.KEY_ID}:{ids.EVENT_ID}|evidence:sha256:[0-9a-f]{{64}}|op:{ids.OP_KEY}|deadline)$"
WRITER = rf"^(principal:{ids.KEY_ID}|role:[a-z]{{1,16}})$"
VALUE_CHARS = 1000  # the most characters one record's value may hold
EVIDENCE_REF = "evidence:sha256:"  # + the content digest of the document (state/evidence.py)
EXCERPT_CHARS = 2000  # of an evidence document, kept in its task and shown in its window
# The verifier's signed event a high-impact record carries: any event the door accepts (its bytes
# are ASCII JSON, so one character each).
EVENT_CHARS = MAX_EVENT_BYTES


def evidence_ref(text: str) -> str:
    """An evidence document's reference: its content digest. Memory records read from a document
    cite it; `wakeful memory forget --lineage` takes it."""
    return EVIDENCE_REF + hashlib.sha256(text.encode()).hexdigest()


class Status(StrEnum):
    QUARANTINED = "quarantined"
    ACTIVE = "active"
    REVOKED = "revoked"


def stamp(at: datetime) -> str:
    """A time as records store it: UTC, to the microsecond, always the same length, so the write
    door's Lua compares two by their text (state/memory.py)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc(at: datetime) -> datetime:
    return at.astimezone(UTC)


When = Annotated[AwareDatetime, AfterValidator(_utc), PlainSerializer(stamp, return_type=str)]


class Change(Record):
    """One status change an operator (or the write door) made: who, why, when."""

    KIND: ClassVar[str] = "memory_change"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = Field(default=1, exclude=True)

    status: Status
    by: str = Field(max_length=200)
    reason: str = Field(max_length=400)
    at: When


class MemoryRecord(Record):
    """One durable fact: what, about whom, who wrote it, where from, and whether it may be shown."""

    KIND: ClassVar[str] = "memory"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    id: str = Field(pattern=RECORD_ID)
    tenant: str = Field(pattern=rf"^{ids.TENANT}$")
    subject: str = Field(pattern=SUBJECT)
    fact: str = Field(pattern=FACT)
    value: str = Field(max_length=VALUE_CHARS)
    writer: str = Field(pattern=WRITER)
    provenance: str = Field(pattern=SOURCE)  # where the words came from
    derived_from: tuple[Annotated[str, Field(pattern=RECORD_ID)], ...] = Field(
        default=(), max_length=16
    )  # records it was derived from
    task_id: str = Field(pattern=rf"^{ids.TASK_ID}$")  # the task whose decision remembered it
    status: Status
    verified_by: str | None = Field(default=None, pattern=WRITER)  # whose signed event made it active
    created_at: When
    expires_at: When
    history: tuple[Change, ...] = Field(default=(), max_length=64)
    # D93, after the fields above so that a record written before them reads as it did:
    # the verifier's signed event, as the door received it, on an active record of a high-impact
    # fact (the read door checks its signature); and the writer's seal over every other field
    # (state/memory_seal.py). A record without a seal is never shown.
    event: str | None = Field(default=None, max_length=EVENT_CHARS)
    seal: str | None = Field(default=None, max_length=200)

    def lineage(self) -> frozenset[str]:
        """Every source this record came from: its provenance and the records it was derived from."""
        return frozenset({self.provenance, *self.derived_from})
