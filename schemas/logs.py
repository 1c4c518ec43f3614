"""Action-log, inbox and outbox records."""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime
from enum import StrEnum
from typing import Any, ClassVar

import orjson
from pydantic import Field

from wakeful.core.errors import DecodeError
from wakeful.schemas.base import Record, cut, migration
from wakeful.schemas.custody import ApprovalBound, ProposalTrail
from wakeful.schemas.redrive import WATERMARK_FIELD, MessageSource


class ActionStatus(StrEnum):
    IN_FLIGHT = "in_flight"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


# An undo's op key is its operation's behind this prefix (never change: it names action-log entries).
UNDO_PREFIX = "UNDO:"


class ActionLogEntry(Record):
    """Intent first: inserted as in_flight before the downstream call, then its outcome."""

    KIND: ClassVar[str] = "action"
    SCHEMA: ClassVar[int] = 2
    schema_version: int = SCHEMA

    op_key: str  # names the business operation and version, e.g. {tool}:{task}:v2; never per attempt
    task_id: str
    status: ActionStatus
    fence: int
    started_at: datetime
    finished_at: datetime | None = None
    result: dict[str, Any] | None = None
    reason: str | None = None
    tool: str | None = None  # the app's tool that runs the operation
    args: dict[str, Any] | None = None  # its validated arguments, for an undo
    # Calls under op_key that found the tool unavailable, over every handling of the step (D61): it
    # fails for good once they reach the tool's `attempts`. `reason` then holds the last one's.
    attempts: int = 0


@migration(ActionLogEntry.KIND, 1)
def _action_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "attempts": 0}  # v1 retried in place, holding the lease: nothing was counted


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


class WaitSummary(Record):
    """A pending wait as the task index and an upstream reader see it: what it waits for, until
    when, and the correlation id an answer may name."""

    KIND: ClassVar[str] = "wait_summary"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = Field(default=1, exclude=True)

    wait_for: str
    deadline: datetime
    correlation_id: str


class OutboxRecord(Record):
    """One Progress change, published on wakeful.log. record_id is the readers' dedupe key. From
    schema 2 it says whose task it is and what the task now waits for: the task index is kept
    from these (state/index.py), never by unsealing a task. From schema 3 it carries what a lost
    Redis is rebuilt from (D70): the sealed checkpoint exactly as stored (`sealed`, base64; the
    keyring opens it, the log's reader learns nothing from it) and the task-slot writes its
    transaction made beside it that recovery needs (`writes`: the sender's receipt, evidence
    references), each as [command, key, field or value, ...] in UTF-8 text. It also carries what
    an audit checks offline (D72, schemas/custody.py): the policy and tool-catalog stamps in
    force, the signed event a gate change applied (its JSON text, as received), the approval it
    bound, and the proposal an executor's close carried out. From schema 4 a change a role's
    handler made says which message it applied and the run loop's floor then (`source`,
    schemas/redrive.py): how far back `wakeful recover` re-drives (D87). From schema 5 it carries
    what a reader may search and query without unsealing the task (D107): when the task was created,
    and what its workflow declares readable, computed by the writer from the new checkpoint: its
    views (name -> a JSON object) and its search attributes (name -> text)."""

    KIND: ClassVar[str] = "outbox"
    SCHEMA: ClassVar[int] = 5
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
    tenant: str = ""  # "" in a record of schema 1
    workflow: str = ""
    waits: tuple[WaitSummary, ...] = ()
    sealed: str = ""  # "" in a record before schema 3: such a change cannot be restored
    writes: tuple[tuple[str, ...], ...] = ()
    # D72: after the fields above, so their encoding is as before.
    policy: str = ""
    tool_catalog: str = ""
    event: str = ""
    approval: ApprovalBound | None = None
    proposal: ProposalTrail | None = None
    source: MessageSource | None = None  # D87; None: not made by a run loop's handler, or before schema 4
    # D107, each left out of the JSON when empty: a record of a workflow that declares nothing is no
    # longer than before. created_at None: a task made before checkpoints said.
    created_at: datetime | None = Field(default=None, exclude_if=lambda v: v is None)
    views: dict[str, dict[str, Any]] = Field(default_factory=dict, exclude_if=lambda v: not v)
    attributes: dict[str, str] = Field(default_factory=dict, exclude_if=lambda v: not v)


@migration(OutboxRecord.KIND, 1)
def _outbox_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "tenant": "", "workflow": "", "waits": []}  # v1 did not say


@migration(OutboxRecord.KIND, 2)
def _outbox_v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "sealed": "", "writes": []}  # v2 did not carry them


@migration(OutboxRecord.KIND, 3)
def _outbox_v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "source": None}  # v3 did not say what it applied from where


@migration(OutboxRecord.KIND, 4)
def _outbox_v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "created_at": None, "views": {}, "attributes": {}}  # v4 did not carry them


# A wakeful.log message carries a batch of OutboxRecords (D47): this head, the records' JSON joined by
# commas, this tail. Messages written before batching carry one OutboxRecord each; log_records()
# reads both.
LOG_BATCH_KIND = "outbox_batch"
LOG_BATCH_SCHEMA = 1
LOG_BATCH_HEAD = b'{"schema_version":%d,"kind":"%s","records":[' % (LOG_BATCH_SCHEMA, LOG_BATCH_KIND.encode())
LOG_BATCH_TAIL = b"]}"


# The records on wakeful.log beside the changes (schemas/changelog.py) are told apart by these keys.
ACTION_FIELD = "action"
QUARANTINE_FIELD = "quarantine"
PURGE_FIELD = "purged_at"  # a purged task's tombstone (schemas/tombstone.py)
OTHER_FIELDS = (ACTION_FIELD, QUARANTINE_FIELD, PURGE_FIELD, WATERMARK_FIELD)


def batch_items(value: bytes) -> list[Any]:
    """The records one wakeful.log message carries, as parsed JSON, in write order. Raises
    DecodeError when the message itself is unreadable."""
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(LOG_BATCH_KIND, value, f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DecodeError(LOG_BATCH_KIND, value, "not a JSON object")
    if data.get("kind") != LOG_BATCH_KIND:
        return [data]  # one record, as written before D47
    if data.get("schema_version") != LOG_BATCH_SCHEMA or not isinstance(data.get("records"), list):
        raise DecodeError(
            LOG_BATCH_KIND, value, f"not a version-{LOG_BATCH_SCHEMA} batch with a list of records"
        )
    items: list[Any] = data["records"]
    return items


def log_records(value: bytes) -> tuple[list[OutboxRecord], list[str]]:
    """The Progress changes one wakeful.log message carries, in write order, and why any of them
    could not be read (a batch is read record by record: one bad record costs only itself). The
    action-log records beside them are skipped (schemas/changelog.py reads both).
    Raises DecodeError when the message itself is unreadable."""
    records: list[OutboxRecord] = []
    problems: list[str] = []
    for i, item in enumerate(batch_items(value)):
        if isinstance(item, dict) and any(name in item for name in OTHER_FIELDS):
            continue
        try:
            records.append(OutboxRecord.decode(orjson.dumps(item)))
        except DecodeError as exc:
            problems.append(f"record {i}: {exc.reason}")
    return records, problems


# What a dead letter keeps of its input when it cannot keep all of it, so that its size stays bounded
# whatever the input was (docs/decisions.md D26).
PREVIEW_BYTES = 1024  # the first bytes of the input, as readable text
REASON_CHARS = 2000
TASK_ID_CHARS = 256
_BARE_REASON_CHARS = 200
_BARE_TASK_ID_CHARS = 64


class DeadLetter(Record):
    """What went to wakeful.dlq, and why: the input whole when it fits, else a digest of it.

    Whole: `raw` is the input itself when it is UTF-8 text; otherwise `raw_base64` holds its exact
    bytes and `raw` a readable preview. Digest (`digest` true): the input was too large to keep, so
    only where it was (topic, partition, offset), its size, its sha256 and a preview of its first
    PREVIEW_BYTES are kept; the input itself stays on its topic until that topic's retention.
    """

    KIND: ClassVar[str] = "dead_letter"
    SCHEMA: ClassVar[int] = 2
    schema_version: int = SCHEMA

    source: str  # the role that refused it
    reason: str
    task_id: str | None = None
    raw: str  # see the class docstring; "" in a bare digest
    at: datetime
    # Where the input was read from; None for input that did not come from Kafka (an outbox entry).
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None
    size: int | None = None  # bytes of the whole input
    sha256: str | None = None  # hex digest of the whole input
    raw_base64: str | None = None  # the exact input, when `raw` is not (input that is not UTF-8)
    digest: bool = False

    @classmethod
    def fitting(
        cls,
        limit: int,
        *,
        source: str,
        reason: str,
        task_id: str | None,
        value: bytes,
        at: datetime,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> DeadLetter | None:
        """The fullest letter for `value` whose encoding is at most `limit` bytes: whole, else a
        digest with a preview, else a bare digest; None when not even that fits."""
        common: dict[str, Any] = {
            "source": source,
            "at": at,
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "size": len(value),
            "sha256": hashlib.sha256(value).hexdigest(),
        }
        reason_cut = cut(reason, REASON_CHARS)
        task_cut = None if task_id is None else cut(task_id, TASK_ID_CHARS)
        preview = value[:PREVIEW_BYTES].decode("utf-8", "replace")
        forms: list[dict[str, Any]] = []
        if len(value) <= limit:  # no whole letter is smaller than its input: skip building one
            try:
                forms.append({"raw": value.decode("utf-8")})
            except UnicodeDecodeError:
                forms.append({"raw": preview, "raw_base64": base64.b64encode(value).decode("ascii")})
        forms.append({"raw": preview, "digest": True})
        for form in forms:
            letter = cls(reason=reason_cut, task_id=task_cut, **common, **form)
            if len(letter.encode()) <= limit:
                return letter
        bare = cls(
            reason=cut(reason, _BARE_REASON_CHARS),
            task_id=None if task_id is None else cut(task_id, _BARE_TASK_ID_CHARS),
            raw="",
            digest=True,
            **common,
        )
        return bare if len(bare.encode()) <= limit else None


@migration(DeadLetter.KIND, 1)
def _dead_letter_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return data  # v2 only adds fields, each with a default that describes a v1 letter
