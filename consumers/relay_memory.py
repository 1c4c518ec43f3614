"""Memory's write door, as the relay drives it: the records a change's outbox record carries
(consumers/gate_memory.py) go through state/memory.py once the log holds the change.

A record on an outbox record is not trusted for being there: it must decode, and it must name the
tenant and the task of the change that carries it; anything else is refused with its reason on the
tenant's refused stream, and the rest of the batch goes on.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from wakeful.core.errors import DecodeError
from wakeful.core.log import Log
from wakeful.schemas.logs import OutboxRecord
from wakeful.schemas.memory import MemoryRecord
from wakeful.state import index
from wakeful.state.memory import MemoryStore
from wakeful.state.outbox import Pending

MARK = b'"remember":'  # a record without it carries no memory: not decoded at all


def carried(raw: bytes) -> tuple[list[MemoryRecord], list[tuple[str, str]]]:
    """The memory records one outbox record (its JSON) carries, and (tenant, why) for each that
    cannot be written."""
    if MARK not in raw:
        return [], []
    try:
        record = OutboxRecord.decode(raw)
    except DecodeError as exc:
        return [], [("default", f"outbox record unreadable: {exc.reason[:200]}")]
    tenant = index.tenant_of(record.model_dump(mode="json"))
    items: Any = record.detail.get("remember")
    if not isinstance(items, list):
        return [], [(tenant, f"record {record.record_id}: remember is not a list")]
    out: list[MemoryRecord] = []
    bad: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        try:
            found = MemoryRecord.decode(orjson.dumps(item))
        except (DecodeError, TypeError) as exc:
            bad.append((tenant, f"record {record.record_id} memory {i}: {str(exc)[:200]}"))
            continue
        if found.tenant != tenant or found.task_id != record.task_id:
            bad.append(
                (tenant, f"record {record.record_id} files memory {found.id} under another task or tenant")
            )
            continue
        out.append(found)
    return out, bad


def apply(store: MemoryStore, done: Sequence[Pending], log: Log) -> int:
    """Write what the published changes remembered; returns the records newly written."""
    records: list[MemoryRecord] = []
    bad: list[tuple[str, str]] = []
    for pending in done:
        for raw in pending.records:
            found, why = carried(raw)
            records += found
            bad += why
    if bad:
        store.refuse([(tenant, "", "", "", "", reason) for tenant, reason in bad])
        for _, reason in bad:
            log("relay.memory_refused", reason=reason)
    if not records:
        return 0
    put = store.put(records, datetime.now(UTC))
    for record, reason in put.refused:
        log("relay.memory_refused", task_id=record.task_id, memory_id=record.id, reason=reason)
    return put.written
