"""What `wakeful task purge` lets go besides finished tasks, by the app's Retention (D73): receipts
and evidence documents kept less long than their TTL, and memory records past their expiry or
older than the app keeps memory. Each is one SCAN of its keys; a receipt or document sweep runs
only when the app keeps them less long than the runtime's TTL (Redis expires them otherwise).
A forgotten memory record leaves its trace, as `wakeful memory forget` does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import redis

from wakeful.sdk.retention import EVIDENCE, RECEIPTS, Retention
from wakeful.state import keys
from wakeful.state.memory import MemoryStore
from wakeful.workflow.retention import lapsed, memory_lapsed

CHUNK = 500


def sweep(client: redis.Redis, retention: Retention, now: datetime, *, dry_run: bool) -> dict[str, int]:
    """How many receipts, evidence documents and memory records went (or would go)."""
    out = {"receipts": 0, "evidence_documents": 0, "memory_records": 0}
    if retention.receipts < RECEIPTS:
        ttl = keys.RECEIPT_TTL_S * 1000
        for pattern in (f"{keys.PATTERN_TASK}receipt:*", keys.PATTERN_RECEIPT):
            out["receipts"] += _lapsed(client, pattern, ttl, retention.receipts, dry_run=dry_run)
    if retention.evidence < EVIDENCE:
        ttl = keys.EVIDENCE_TTL_S * 1000
        out["evidence_documents"] = _lapsed(
            client, keys.PATTERN_EVIDENCE_DOC, ttl, retention.evidence, dry_run=dry_run
        )
    store = MemoryStore(client)
    gone = [r for r in store.every() if memory_lapsed(r.created_at, r.expires_at, now, retention.memory)]
    out["memory_records"] = len(gone)
    if gone and not dry_run:
        store.delete(gone)
        store.forgotten("retention", "wakeful task purge", [r.id for r in gone], [], now)
    return out


def _lapsed(client: redis.Redis, pattern: str, ttl_ms: int, keep: timedelta, *, dry_run: bool) -> int:
    """Delete the keys matching `pattern` (written with a TTL of ttl_ms) that are older than keep."""
    count = 0
    for chunk in _chunks(client.scan_iter(match=pattern, count=1000)):
        pipe = client.pipeline(transaction=False)
        for key in chunk:
            pipe.pttl(key)
        doomed = [k for k, left in zip(chunk, pipe.execute(), strict=True) if lapsed(int(left), ttl_ms, keep)]
        count += len(doomed)
        if doomed and not dry_run:
            client.delete(*doomed)
    return count


def _chunks(items: Iterator[bytes]) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
