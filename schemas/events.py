"""Wire records between upstream systems and the roles: signed events and the internal envelope."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any, ClassVar, Self, cast

from pydantic import Field, PrivateAttr, StringConstraints

from wakeful.core import ids
from wakeful.schemas.base import Record, dumps_any_int

# Event kinds upstream systems may send, and what their payload holds.
CREATE = "task.create"  # {workflow?, then the workflow's own fields}; carries task_id
APPROVE = "approval.granted"  # {version}; carries correlation_id (or task_id)
AMEND = "task.amend"  # {amount}; carries task_id
RUN = "task.run"  # {}: asks a task to run now; carries task_id
REOPEN = "task.reopen"  # {wait_s?}: a person puts a reviewed task back into the flow; carries task_id
CANCEL = "task.cancel"  # {reason}: ends a task not finished, its steps undone (workflow/cancels.py)
# {handle, result: {name: value}} or {handle, failed: reason}: an asynchronous tool's call is done
# (Tool.completed_by signs it); carries task_id.
COMPLETE = "tool.completed"
KINDS = (CREATE, APPROVE, AMEND, RUN, REOPEN, COMPLETE, CANCEL)
# {letter: "<partition>:<offset>", event: "<the dead-lettered event's JSON text>"}: an operator vouches
# for an event replayed from wakeful.dlq (`wakeful dlq replay`, docs/decisions.md D71). The door
# verifies it, then the event inside against the signer registry as it is now; it carries no task_id.
REPLAY = "event.replay"
# No event: what a key must be registered for to sign a release as one of its app's owners
# (`wakeful release sign`, authority/signoffs.py, D121). The door refuses an event of this kind.
SIGNOFF = "release.signoff"

MAX_EVENT_BYTES = 64 * 1024
# How a webhook's record (schemas/webhook.py) starts, as its encode() writes it: one comparison tells
# it from an event. Written any other way, it is no event at all (malformed).
WEBHOOK_PREFIX = b'{"schema_version":1,"webhook":'
FUTURE_SKEW = timedelta(seconds=30)  # how far ahead of the door's clock a sender's clock may run

# Ids from outside are checked here, at decode time, so a bad one is a DecodeError the door
# dead-letters with its reason, never a Redis key. The alphabets are core/ids.py's, which every key
# builder (state/keys.py) checks again.
TaskId = Annotated[str, StringConstraints(pattern=f"^{ids.TASK_ID}$")]  # the runtime's (ids.task_in)
OutsideTaskId = Annotated[str, StringConstraints(pattern=f"^{ids.OUTSIDE_TASK_ID}$")]  # a tenant's own
EventId = Annotated[str, StringConstraints(pattern=f"^{ids.EVENT_ID}$")]
CorrelationId = Annotated[str, StringConstraints(pattern=f"^{ids.CORRELATION_ID}$")]
KeyId = Annotated[str, StringConstraints(pattern=f"^{ids.KEY_ID}$")]
# Message and trace ids are derived inside wakeful ("propreq:<task>:<state_version>") and name no
# key (a message id is a member of the task's inbox set), so they may hold colons; nothing more.
MESSAGE_ID = r"[A-Za-z0-9_.@:-]{1,320}"
MessageId = Annotated[str, StringConstraints(pattern=f"^{MESSAGE_ID}$")]


class SignedEvent(Record):
    """What an upstream system publishes on wakeful.events.

    The signature covers every other field, the timestamp included, in the canonical encoding of
    `producers.signing.signing_bytes` (orjson, sorted keys, no signature field).
    """

    KIND: ClassVar[str] = "event"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    event_id: EventId
    kind: str = Field(max_length=64)
    task_id: OutsideTaskId | None = None  # in its signer's tenant's namespace: no `.` reaches another's
    correlation_id: CorrelationId | None = None
    key_id: KeyId
    issued_at: datetime
    payload: dict[str, Any] = Field(default_factory=dict)
    signature: str  # base64 of the Ed25519 signature or the HMAC-SHA256 tag; "webhook:v1=..." for one
    # Set for an event that came as a webhook (schemas/webhook.py): (t, raw body, its hex tags, the
    # Webhook record's bytes). Its signature covers those bytes, so it verifies and encodes from them.
    _webhook: tuple[int, bytes, tuple[str, ...], bytes] | None = PrivateAttr(default=None)

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        """As any record; a Webhook record (WIRE_PREFIX) opens into the event its body names."""
        if raw.startswith(WEBHOOK_PREFIX):
            from wakeful.schemas import webhook  # it builds on this module

            return cast(Self, webhook.opened(raw))
        return super().decode(raw)

    def encode(self) -> bytes:
        """As any record, except that a payload from outside may hold integers past 64 bits, and a
        webhook's event is its Webhook record: the only form its signature covers."""
        if self._webhook is not None:
            return self._webhook[3]
        return dumps_any_int(self.model_dump(mode="json", by_alias=True))

    @property
    def webhook(self) -> tuple[int, bytes, tuple[str, ...]] | None:
        """(t, raw body, hex tags) of an event that came as a webhook, else None."""
        return self._webhook[:3] if self._webhook is not None else None

    @property
    def routing_key(self) -> str:
        return self.correlation_id or self.task_id or self.event_id


def request_id(task_id: str, state_version: int) -> str:
    """The id of the one proposal request a task at this state_version has outstanding."""
    return f"propreq:{task_id}:{state_version}"


# An envelope's kind for the runtime's own request of a cancelling task (workflow/cancels.py): the gate
# asks, the proposer passes it on with no model call, the executor undoes under the lease.
UNDO_REQUEST = "cancel.undo"


class Envelope(Record):
    """Every message between roles: wakeful.wake, wakeful.proposals.request, wakeful.proposals."""

    KIND: ClassVar[str] = "envelope"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    message_id: MessageId  # dedupe key downstream; derived from what caused it, never random per attempt
    task_id: TaskId
    task_version: int  # the business version (or, for proposals, the state_version decided on)
    kind: str = Field(max_length=64)
    created_at: datetime
    trace_id: MessageId
    payload: dict[str, Any] = Field(default_factory=dict)
    in_reply_to: MessageId | None = None  # a proposal names the one request it answers
