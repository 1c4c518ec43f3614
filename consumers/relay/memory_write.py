"""Memory's write door, as the relay drives it: what a change remembered goes through
state/memory.py once the log holds the change.

Two sources, trusted as far as Redis's rights make them, and no further:
- a gate's change marks its log record ("memory": the ids) and puts the records on the task's
  memory stream, which only the gate may add to: they are written as the gate admitted them
  (workflow/memory.py decided the status) once they decode and name the task and tenant of the
  change;
- an executor's close carries what a tool's answer taught on its log record ("learned"): whatever
  they say, they are written quarantined, by `role:executor`, from the call's op key, for the
  executor runs the tools and may never make a record active.
Anything else is refused with its reason on the tenant's refused stream, and the rest go on. A
failure that may pass (the library not loaded, Redis away) holds the task's records back: its
outbox is not trimmed, so the next claim tries again.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from wakeful.consumers.kafka.failures import TRANSIENT_IO
from wakeful.core import ids
from wakeful.core.errors import DecodeError
from wakeful.core.log import Log
from wakeful.core.retry import FunctionsMissing
from wakeful.schemas.logs import OutboxRecord
from wakeful.schemas.memory import MemoryRecord
from wakeful.state import index
from wakeful.state.memory import MemoryStore
from wakeful.state.outbox import Pending
from wakeful.workflow import memory

GATE_MARK = b'"memory":['  # a gate's change that remembered: its records are on the task's stream
LEARNED_MARK = b'"learned":['  # an executor's close that learned from a tool's answer
Refusal = tuple[str, str]  # (tenant, why)


def learned(raw: bytes) -> tuple[list[MemoryRecord], list[Refusal]]:
    """What an executor's close (one outbox record, its JSON) learned, as the door writes it:
    quarantined, by the executor, from the call; and (tenant, why) for each that cannot be."""
    if LEARNED_MARK not in raw:
        return [], []
    try:
        record = OutboxRecord.decode(raw)
    except DecodeError as exc:
        return [], [(ids.DEFAULT_TENANT, f"outbox record unreadable: {exc.reason[:200]}")]
    tenant = index.tenant_of(record.model_dump(mode="json"))
    items: Any = record.detail.get("learned")
    if not isinstance(items, list):
        return [], [(tenant, f"record {record.record_id}: learned is not a list")]
    out: list[MemoryRecord] = []
    bad: list[Refusal] = []
    for i, item in enumerate(items):
        found, why = _checked(item, tenant, record.task_id, f"record {record.record_id} memory {i}")
        if found is not None and (found.writer != "role:executor" or not found.provenance.startswith("op:")):
            found, why = (
                None,
                f"record {record.record_id} memory {i}: a close's memory is the executor's, from a call",
            )
        if found is None:
            bad.append((tenant, why))
            continue
        out.append(memory.learned_form(found))
    return out, bad


def _checked(item: Any, tenant: str, task_id: str, where: str) -> tuple[MemoryRecord | None, str]:
    try:
        found = MemoryRecord.decode(item if isinstance(item, bytes) else orjson.dumps(item))
    except (DecodeError, TypeError) as exc:
        return None, f"{where}: {str(exc)[:200]}"
    if found.tenant != tenant or found.task_id != task_id:
        return None, f"{where} files memory {found.id} under another task or tenant"
    return found, ""


def apply(store: MemoryStore, done: Sequence[Pending], log: Log) -> tuple[set[str], int]:
    """Write what the published changes remembered; returns the tasks whose records must wait
    (a failure that may pass: their outbox stays for the next claim), and how many records were
    newly written."""
    records: list[MemoryRecord] = []
    bad: list[Refusal] = []
    marked: dict[str, str] = {}  # task id -> its tenant, for each task a gate's change remembered for
    for pending in done:
        for raw in pending.changes:
            found, why = learned(raw)
            records += found
            bad += why
            if GATE_MARK in raw:
                marked[pending.task_id] = _tenant(raw)
    streams = store.candidates(sorted(marked)) if marked else {}
    for task_id, entries in streams.items():
        for entry_id, raw in entries:
            one, said = _checked(raw, marked[task_id], task_id, f"task {task_id} memory {entry_id.decode()}")
            if one is None:
                bad.append((marked[task_id], said))
            else:
                records.append(one)
    try:
        if bad:
            store.refuse([(tenant, "", "", "", "", reason) for tenant, reason in bad])
        put = store.put(records, datetime.now(UTC)) if records else None
        store.consumed({t: [e for e, _ in entries] for t, entries in streams.items()})
    except (FunctionsMissing, *TRANSIENT_IO) as exc:
        log("relay.memory_held", tasks=len(marked), error=repr(exc)[:200])
        return set(marked) | {p.task_id for p in done if any(LEARNED_MARK in raw for raw in p.records)}, 0
    for _, reason in bad:
        log("relay.memory_refused", reason=reason)
    for record, reason in put.refused if put else ():
        log("relay.memory_refused", task_id=record.task_id, memory_id=record.id, reason=reason)
    return set(), put.written if put else 0


def _tenant(raw: bytes) -> str:
    try:
        return index.tenant_of(orjson.loads(raw))
    except (orjson.JSONDecodeError, AttributeError):
        return ids.DEFAULT_TENANT
