"""`wakeful bench-state`: transition() throughput and latency at several concurrency levels, next to
the raw WATCH-CAS ceiling measured in the same run."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from wakeful.bench import infra as bench_infra
from wakeful.consumers.kafka import wiring
from wakeful.core.process import Say
from wakeful.core.settings import Settings
from wakeful.schemas.checkpoint import BusinessState, Checkpoint, SecurityScope, VersionStamps
from wakeful.state.store import Store


def _checkpoint() -> Checkpoint:
    return Checkpoint(
        task_id=f"bench-{uuid.uuid4().hex[:12]}",
        business=BusinessState(stage="received", data={"amount": 100, "currency": "EUR"}),
        security=SecurityScope(tenant="bench", principal_ref="principal:bench"),
        versions=VersionStamps(policy="p1", tool_catalog="c1", agent_id="bench", state_version=0),
        updated_at=datetime.now(UTC),
    )


def _bump(cp: Checkpoint) -> Checkpoint:
    return cp.model_copy(
        update={"execution": cp.execution.model_copy(update={"attempts": cp.execution.attempts + 1})}
    )


def _level(settings: Settings, store: Store, tasks: int, seconds: float) -> dict[str, Any]:
    leases = wiring.leases_for(settings, "executor")
    ids = [store.create(_checkpoint(), "create").checkpoint.task_id for _ in range(tasks)]
    held = [leases.acquire(t) for t in ids]
    latencies: list[list[float]] = [[] for _ in ids]
    trips: list[int] = [0 for _ in ids]
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        n = 0
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            out = store.transition(ids[i], None, f"m{n}", _bump, lease=held[i])
            latencies[i].append(time.perf_counter() - t0)
            trips[i] += out.round_trips
            n += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(tasks)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    flat = sorted(x for xs in latencies for x in xs)
    for lease in held:
        leases.release(lease)
    return {
        "tasks": tasks,
        "transitions": len(flat),
        "per_s": round(len(flat) / elapsed),
        "p50_ms": round(statistics.median(flat) * 1000, 3),
        "p99_ms": round(flat[int(len(flat) * 0.99) - 1] * 1000, 3),
        "round_trips_per_transition": round(sum(trips) / len(flat), 2),
    }


def run(settings: Settings, seconds: float, say: Say) -> dict[str, Any]:
    store = wiring.store_for(settings, "gate")
    levels = []
    for tasks in (1, 8, 64):
        say(f"transition(): {tasks} concurrent task(s) for {seconds:.0f}s ...")
        levels.append(_level(settings, store, tasks, seconds))
    say("raw WATCH-CAS ceiling (one client) ...")
    raw = bench_infra.redis_figures(settings, pings=2_000, cas_ops=5_000)
    return {"levels": levels, "raw_watch_cas_ops_per_s": raw["redis_watch_cas_ops_per_s"], "redis": raw}


def render(result: dict[str, Any]) -> str:
    rows = [f"{'tasks':>6} {'transitions/s':>14} {'p50 ms':>8} {'p99 ms':>8} {'RTT/transition':>15}"]
    for lv in result["levels"]:
        rows.append(
            f"{lv['tasks']:>6} {lv['per_s']:>14,} {lv['p50_ms']:>8} {lv['p99_ms']:>8} "
            f"{lv['round_trips_per_transition']:>15}"
        )
    rows.append(f"raw WATCH-CAS ceiling (one client, same run): {result['raw_watch_cas_ops_per_s']:,} ops/s")
    return "\n".join(rows)
