"""What memory's read door adds to a wake: the bench's one-step app, recalling memory.

    wakeful bench --app wakeful.bench.steps:one      no memory
    wakeful bench --app wakeful.bench.memory:app     the same, each window recalling one
                                                              subject of a store of 10,000 records

The traffic seeds the store before the run (WAKEFUL_BENCH_MEMORY records, 10,000 by default),
spread over SUBJECTS subjects of the default tenant, each near the write door's per-subject limit,
a fifth of them quarantined, revoked or expired, so the read door reads and filters a full
subject at every wake. The difference between the two runs is the read door's cost (D69).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import redis

from wakeful.bench import steps as bench_steps
from wakeful.bench.traffic import Effect, Plan
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.core.settings import Settings
from wakeful.schemas.memory import Change, MemoryRecord, Status
from wakeful.sdk import App, Fact, Recall
from wakeful.state import keys, memory_seal
from wakeful.state.memory import MemoryStore
from wakeful.state.seal import Keyring

SUBJECTS = 160  # 10,000 records over 160 subjects: 62 each, under the door's 64
FACT = "note"
ENV = "WAKEFUL_BENCH_MEMORY"
DEFAULT_RECORDS = 10_000


def subject_of(task_id: str) -> str:
    return f"bench:s-{int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % SUBJECTS}"


def _recalled(ctx: Any) -> tuple[str, ...]:
    return (subject_of(ctx.task_id),)


_base = bench_steps.one.workflows[0]
_workflow = dataclasses.replace(_base, recall=Recall((FACT,), _recalled))
app = App(
    name="steps-memory",
    workflows=[_workflow],
    tools=list(bench_steps.one.tools),
    facts=[Fact(FACT, verifiers=("principal:bench",), one=False)],
    traffic="wakeful.bench.memory:traffic",
)


def records(count: int, now: datetime) -> list[MemoryRecord]:
    """`count` records spread over the subjects; one in five is not shown (quarantined, revoked or
    expired), so the door filters as it would in a store that lived a while."""
    statuses = [Status.ACTIVE, Status.ACTIVE, Status.QUARANTINED, Status.ACTIVE, Status.REVOKED]
    out = []
    for n in range(count):
        status = statuses[n % len(statuses)]
        expired = n % 10 == 7
        out.append(
            MemoryRecord(
                id=f"m-{n:024x}",
                tenant=DEFAULT_TENANT,
                subject=f"bench:s-{n % SUBJECTS}",
                fact=FACT,
                value=f"bench fact {n}: the customer prefers email, and invoices in EUR",
                writer="principal:bench",
                provenance="event:key-bench:evt-00000001",
                task_id="bench-seed",
                status=status,
                verified_by="principal:bench" if status is Status.ACTIVE else None,
                created_at=now - timedelta(days=1),
                expires_at=now - timedelta(hours=1) if expired else now + timedelta(days=30),
                history=(Change(status=status, by="bench", reason="seeded", at=now),),
            )
        )
    return out


class MemoryTraffic:
    share = 0.0
    second_path = "none"

    def plan(self, task_id: str, rng: random.Random, second: bool) -> Plan:
        return bench_steps.traffic.plan(task_id, rng, second)

    def mark(self, admin: redis.Redis) -> str:
        """Seed the store (once: the records' ids are fixed, so a second run writes nothing), then
        mark the effects log as the one-step app's traffic does."""
        count = int(os.environ.get(ENV, DEFAULT_RECORDS))
        store, now = MemoryStore(admin), datetime.now(UTC)
        for subject in range(SUBJECTS):
            admin.delete(keys.memory(DEFAULT_TENANT, f"bench:s-{subject}"))  # afresh: none expired since
        # sealed as the gate seals what it admits: the read door shows no unsealed record (D93)
        ring = Keyring.load(Settings.from_env().keyring)
        seeded = [memory_seal.sealed(ring, r) for r in records(count, now)]
        for start in range(0, len(seeded), 1000):
            store.put(seeded[start : start + 1000], now)
        return bench_steps.traffic.mark(admin)

    def effects(self, admin: redis.Redis, after: str) -> tuple[list[Effect], str]:
        return bench_steps.traffic.effects(admin, after)


traffic = MemoryTraffic()
