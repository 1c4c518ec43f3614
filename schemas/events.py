"""Wire records between upstream systems and the roles: signed events and the internal envelope."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from pydantic import Field

from wakeful.schemas.base import Record

# Event kinds upstream systems may send, and what their payload holds.
CREATE = "task.create"  # {amount, currency, note}; carries task_id
APPROVE = "approval.granted"  # {version}; carries correlation_id (or task_id)
AMEND = "task.amend"  # {amount}; carries task_id
RUN = "task.run"  # {}: asks a task to run now; carries task_id
REOPEN = "task.reopen"  # {wait_s?}: a person puts a reviewed task back into the flow; carries task_id
KINDS = (CREATE, APPROVE, AMEND, RUN, REOPEN)

MAX_EVENT_BYTES = 64 * 1024


class SignedEvent(Record):
    """What an upstream system publishes on wakeful.events.

    The signature covers every other field, the timestamp included, in the canonical encoding of
    `producers.signing.signing_bytes` (orjson, sorted keys, no signature field).
    """

    KIND: ClassVar[str] = "event"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    event_id: str = Field(min_length=8, max_length=128)
    kind: str
    task_id: str | None = None
    correlation_id: str | None = None
    key_id: str = Field(min_length=1, max_length=128)
    issued_at: datetime
    payload: dict[str, Any] = Field(default_factory=dict)
    signature: str  # base64 of the Ed25519 signature or the HMAC-SHA256 tag

    @property
    def routing_key(self) -> str:
        return self.correlation_id or self.task_id or self.event_id


class Envelope(Record):
    """Every message between roles: wakeful.wake, wakeful.proposals.request, wakeful.proposals."""

    KIND: ClassVar[str] = "envelope"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    message_id: str  # dedupe key downstream; derived from what caused it, never random per attempt
    task_id: str
    task_version: int  # the business version (or, for proposals, the state_version decided on)
    kind: str
    created_at: datetime
    trace_id: str
    payload: dict[str, Any] = Field(default_factory=dict)
