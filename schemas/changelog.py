"""What wakeful.log carries besides each Progress change: the action log's records and the
quarantine markers (D70).

A change (OutboxRecord) holds its task's sealed checkpoint, its inbox mark (the message id) and the
receipt and evidence its transaction wrote. The action log is written outside those transactions
(the intent must be durable before a tool is called, docs/crashes.md), so each write to it adds an
ActionRecord to the task's outbox in the same Lua call; a quarantine marker, set outside any change,
adds a QuarantineRecord in the same transaction. The relay publishes them in order with the task's
changes. `log_items` reads every kind from a wakeful.log message.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

import orjson
from pydantic import ValidationError

from wakeful.core.errors import DecodeError
from wakeful.schemas.base import Record
from wakeful.schemas.logs import (
    ACTION_FIELD,
    PURGE_FIELD,
    QUARANTINE_FIELD,
    ActionLogEntry,
    OutboxRecord,
    batch_items,
)
from wakeful.schemas.redrive import WATERMARK_FIELD, MessageSource
from wakeful.schemas.tombstone import PurgeRecord


class ActionRecord(Record):
    """One write to a task's action log (wk:{T}:ops), as it landed: the entry under its op key."""

    KIND: ClassVar[str] = "action_record"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    # Dedupe key, never change: "<task_id>:op:<op_key>:<status>:<fence>:<attempts>".
    record_id: str
    task_id: str
    action: ActionLogEntry


def action_record(entry: ActionLogEntry) -> ActionRecord:
    record_id = f"{entry.task_id}:op:{entry.op_key}:{entry.status}:{entry.fence}:{entry.attempts}"
    return ActionRecord(record_id=record_id, task_id=entry.task_id, action=entry)


class QuarantineRecord(Record):
    """A task quarantined outside any change: the marker's JSON as stored (the first one stands).
    Its release is a change whose writes delete the marker."""

    KIND: ClassVar[str] = "quarantine_record"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    # Dedupe key, never change: "<task_id>:quarantine:<first 16 hex of the marker's sha256>".
    record_id: str
    task_id: str
    quarantine: str


def quarantine_record(task_id: str, marker: bytes) -> QuarantineRecord:
    digest = hashlib.sha256(marker).hexdigest()[:16]
    return QuarantineRecord(
        record_id=f"{task_id}:quarantine:{digest}", task_id=task_id, quarantine=marker.decode("utf-8")
    )


LogItem = OutboxRecord | ActionRecord | QuarantineRecord | PurgeRecord


class ChangeMark(NamedTuple):
    """What the first read keeps of a change: what a tombstone after it is judged by (D92)."""

    version: int
    at: str  # as written (ISO 8601): parsed only when a tombstone is judged
    tenant: str
    workflow: str
    stage: str
    waits: int  # how many waits the change left pending
    deleted: tuple[str, ...]  # the keys its writes delete (a release lifts a quarantine marker)


class QuarantineMark(NamedTuple):
    """A quarantine marker set outside a change (QuarantineRecord): its JSON as stored."""

    marker: str


# Whose a record is, and what the first read of `wakeful recover` needs of it (D86): the tombstone
# it is, or what a tombstone is judged by (a change's, a quarantine's mark), read without decoding
# the rest.
Mark = tuple[str, PurgeRecord | ChangeMark | QuarantineMark | None]
Wanted = Callable[[str], bool]


def log_items(value: bytes, wanted: Wanted | None = None) -> tuple[list[LogItem], list[str], int]:
    """Every record one wakeful.log message carries, changes and action records, in write order,
    and why any of them could not be read (one bad record costs only itself), and how many were
    passed over undecoded: those of tasks `wanted` refuses (a tombstone is always read, and a
    record without a task id is asked for as " "). Raises
    DecodeError when the message itself is unreadable."""
    items: list[LogItem] = []
    problems: list[str] = []
    passed = 0
    for i, item in enumerate(batch_items(value)):
        if isinstance(item, dict) and WATERMARK_FIELD in item:
            continue  # no task's: read by log_reader from the signed bytes alone (D87)
        kind = _kind(item)
        if wanted is not None and kind is not PurgeRecord and not wanted(_task_of(item) or " "):
            passed += 1
            continue
        try:
            items.append(kind.decode(orjson.dumps(item)))
        except DecodeError as exc:
            problems.append(f"record {i}: {exc.reason}")
    return items, problems, passed


def log_marks(value: bytes, sources: list[MessageSource] | None = None) -> tuple[list[Mark], list[str], int]:
    """Each record's task id, and each tombstone decoded, of one wakeful.log message: a record
    with no task id is named, a relay watermark passed over (D87). Each change's source, when it
    names one, goes to `sources` (one that does not decode is left out: the re-drive then starts
    earlier, which loses nothing). Raises DecodeError when the message itself is unreadable."""
    marks: list[Mark] = []
    problems: list[str] = []
    for i, item in enumerate(batch_items(value)):
        if isinstance(item, dict) and WATERMARK_FIELD in item:
            continue
        task_id = _task_of(item)
        kind = _kind(item)
        if not task_id:
            problems.append(f"record {i}: it names no task id")
        elif kind is OutboxRecord:
            marks.append((task_id, change_mark(item)))
            source = item.get("source")
            if sources is not None and isinstance(source, dict):
                with contextlib.suppress(ValidationError):
                    sources.append(MessageSource.model_validate(source))
        elif kind is QuarantineRecord:
            marker = item.get("quarantine")
            marks.append((task_id, QuarantineMark(marker) if isinstance(marker, str) else None))
        elif kind is not PurgeRecord:
            marks.append((task_id, None))
        else:
            try:
                marks.append((task_id, PurgeRecord.decode(orjson.dumps(item))))
            except DecodeError as exc:
                problems.append(f"record {i}: {exc.reason}")
    return marks, problems, 0


def change_mark(item: dict[str, Any]) -> ChangeMark | None:
    """A change's mark from its parsed JSON, or None when it lacks what one needs (the fold names
    such a record; a tombstone after it is judged by the change before). On the first read's path
    for every change: plain checks, and the names of stages and workflows held once (interned)."""
    version, at, stage = item.get("state_version"), item.get("at"), item.get("stage")
    tenant, workflow = item.get("tenant", ""), item.get("workflow", "")
    waits, writes = item.get("waits") or [], item.get("writes") or []
    if type(version) is not int or type(at) is not str or type(stage) is not str:
        return None
    if type(tenant) is not str or type(workflow) is not str or type(waits) is not list:
        return None
    deleted: tuple[str, ...] = ()
    if writes:  # a receipt's SET, or a release's DEL of the marker: rare on the log
        if type(writes) is not list:
            return None
        deleted = tuple(str(w[1]) for w in writes if type(w) is list and len(w) == 2 and w[0] == "DEL")
    return ChangeMark(version, at, tenant, sys.intern(workflow), sys.intern(stage), len(waits), deleted)


def _kind(item: object) -> type[LogItem]:
    if isinstance(item, dict) and ACTION_FIELD in item:
        return ActionRecord
    if isinstance(item, dict) and QUARANTINE_FIELD in item:
        return QuarantineRecord
    if isinstance(item, dict) and PURGE_FIELD in item:
        return PurgeRecord
    return OutboxRecord


def _task_of(item: object) -> str:
    task_id = item.get("task_id") if isinstance(item, dict) else None
    return task_id if isinstance(task_id, str) else ""
