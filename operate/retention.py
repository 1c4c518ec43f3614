"""What `wakeful task purge` lets go besides finished tasks, by the app's Retention (D73): receipts
and evidence documents kept less long than their TTL, and memory records past their expiry or
older than the app keeps memory. Each is one SCAN of its keys; a receipt or document sweep runs
only when the app keeps them less long than the runtime's TTL (Redis expires them otherwise).
A forgotten memory record leaves its trace, as `wakeful memory forget` does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta

import redis

from wakeful.core.ids import DEFAULT_TENANT
from wakeful.sdk.retention import EVIDENCE, RECEIPTS, Retention
from wakeful.state import keys
from wakeful.state.memory import MemoryStore
from wakeful.workflow.retention import lapsed, memory_lapsed

CHUNK = 500


def sweep(
    client: redis.Redis, retention: Retention, now: datetime, *, dry_run: bool, tenant: str | None = None
) -> dict[str, int]:
    """How many receipts, evidence documents and memory records went (or would go): of `tenant`
    only when one is named (a purge scoped to a tenant never sweeps another's), else of every
    tenant, by the loaded app's retention."""
    out = {"receipts": 0, "evidence_documents": 0, "memory_records": 0}
    if retention.receipts < RECEIPTS:
        ttl = keys.RECEIPT_TTL_S * 1000
        patterns = (
            (f"{keys.PATTERN_TASK}receipt:*",)
            if tenant
            else (f"{keys.PATTERN_TASK}receipt:*", keys.PATTERN_RECEIPT)
        )
        for pattern in patterns:
            out["receipts"] += _lapsed(
                client, pattern, ttl, retention.receipts, dry_run=dry_run, tenant=tenant
            )
    if retention.evidence < EVIDENCE:
        ttl = keys.EVIDENCE_TTL_S * 1000
        out["evidence_documents"] = _lapsed(
            client, keys.PATTERN_EVIDENCE_DOC, ttl, retention.evidence, dry_run=dry_run, tenant=tenant
        )
    store = MemoryStore(client)
    gone = [
        r
        for r in store.every()
        if (tenant is None or r.tenant == tenant)
        and memory_lapsed(r.created_at, r.expires_at, now, retention.memory)
    ]
    out["memory_records"] = len(gone)
    if gone and not dry_run:
        store.delete(gone)
        store.forgotten("retention", "wakeful task purge", [r.id for r in gone], [], now)
    return out


def _lapsed(
    client: redis.Redis,
    pattern: str,
    ttl_ms: int,
    keep: timedelta,
    *,
    dry_run: bool,
    tenant: str | None = None,
) -> int:
    """Delete the keys matching `pattern` (written with a TTL of ttl_ms) that are older than keep;
    with `tenant`, only the keys whose hash tag is that tenant's (a task's, or a document's)."""
    count = 0
    for found in _chunks(client.scan_iter(match=pattern, count=1000)):
        chunk = [k for k in found if tenant is None or _of_tenant(keys.task_of(k.decode()), tenant)]
        if not chunk:
            continue
        pipe = client.pipeline(transaction=False)
        for key in chunk:
            pipe.pttl(key)
        doomed = [k for k, left in zip(chunk, pipe.execute(), strict=True) if lapsed(int(left), ttl_ms, keep)]
        count += len(doomed)
        if doomed and not dry_run:
            client.delete(*doomed)
    return count


def _of_tenant(tagged: str, tenant: str) -> bool:
    """Whether a key's hash tag is `tenant`'s: a task id `N.X` (the default tenant's has no `.`:
    core/ids.py task_in), or a document's `N.D`. The part after the last `.` holds none."""
    return (tagged.rsplit(".", 1)[0] if "." in tagged else DEFAULT_TENANT) == tenant


def _chunks(items: Iterator[bytes]) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
