"""`wakeful bench-recover`: what `wakeful recover` holds in memory over a long wakeful.log.

It adds tasks of a tenant of its own to the log with the runtime's own commands (the changes,
receipts and action records bench_retention seeds, sealed with the keyring), published by a real
relay with the relay's credentials (signed and tagged as every log message is), as history keeps
them: `--purged` refund tasks closed long ago and purged by retention (their tombstones follow on
the log), `--closed` closed lately (Redis keeps them) and `--open` waiting for an approval. Then it
loses those tasks' keys from Redis (every `wk:{<tenant>.*}` key and the tenant's index) and runs
`wakeful recover --force --json` in a child process, printing its peak RSS (getrusage of the
child), its time, and what it restored. Run it twice with more `--purged`: the log grows, Redis
holds the same, and the peak RSS says whether recover grows with the log.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import redis

from wakeful.bench import retention as bench_retention
from wakeful.consumers.kafka import wiring
from wakeful.consumers.relay.main import relay_for
from wakeful.core.settings import Settings
from wakeful.operate import purge
from wakeful.sdk.app import DEFAULT_APP, load_app
from wakeful.state import acl, keys, last_step
from wakeful.state import purge as state_purge
from wakeful.state.pinned import Pinned
from wakeful.state.seal import Keyring, Sealer

CHUNK = 250  # tasks per round trip while seeding
Say = Callable[[str], None]


def _open_commands(sealer: Sealer, task_id: str, tenant: str, at: datetime) -> list[tuple[Any, ...]]:
    """A refund created and waiting for its approval: its first change, as bench_retention makes it."""
    refund = load_app(DEFAULT_APP)
    cp, message_id, _ = bench_retention._history(refund, task_id, tenant, at)[0]
    new = last_step.stamp(cp, 1, 0, at)
    return [
        *last_step.commands(
            sealer, new, message_id, {"by": "bench"}, before=None, shown=wiring.shows(refund)
        ),
        *last_step.wait_writes(new),
    ]


def seed(
    settings: Settings, client: redis.Redis, sealer: Sealer, tenant: str, counts: dict[str, int], *, say: Say
) -> None:
    """Write the tasks as the runtime does and publish their records with a real relay."""
    refund = load_app(DEFAULT_APP)
    now = datetime.now(UTC)
    old = now - refund.retention.closed_tasks - timedelta(days=30)
    relay = relay_for(settings)
    made = 0
    total = sum(counts.values())
    said = time.monotonic()
    with Pinned(client, keys.DEADLINES) as conn:
        for kind, count in counts.items():
            for start in range(0, count, CHUNK):
                chunk = [f"{tenant}.{kind[0]}-{n}" for n in range(start, min(count, start + CHUNK))]
                commands: list[tuple[Any, ...]] = []
                for task_id in chunk:
                    if kind == "open":
                        commands += _open_commands(sealer, task_id, tenant, now)
                    else:
                        at = old if kind == "purged" else now
                        commands += bench_retention._task_commands(refund, sealer, task_id, tenant, at)
                conn.batch(commands)
                while client.scard(keys.OUTBOX_DIRTY):
                    relay.run_once()
                made += len(chunk)
                if time.monotonic() - said >= 5:
                    say(f"  seeded and relayed {made}/{total} ...")
                    said = time.monotonic()
    relay.producer.flush(30)
    if counts.get("purged"):
        say(f"purging {counts['purged']} tasks closed long ago ...")
        purge.run(client, refund, now, now, dry_run=False, tenant=tenant, wait_s=0, say=say)
        while client.scard(keys.OUTBOX_DIRTY):
            relay.run_once()
        relay.producer.flush(30)
        state_purge.drop_outboxes(client)


def lose(client: redis.Redis, tenant: str) -> int:
    """Delete every key of the tenant's tasks and its index, as a lost Redis would have them."""
    lost = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=f"{keys.PREFIX}:{{{tenant}.*", count=5000):
        batch.append(key)
        if len(batch) == 1000:
            lost += int(client.delete(*batch))
            batch = []
    if batch:
        lost += int(client.delete(*batch))
    for key in client.scan_iter(match=f"{keys.PREFIX}:index:{{{tenant}}}:*", count=1000):
        lost += int(client.delete(key))
    return lost


def measure_recover() -> dict[str, Any]:
    """`wakeful recover --force --json` in a child process: its peak RSS, time and report."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    ran = subprocess.run(
        [sys.executable, "-m", "wakeful.cli.main", "recover", "--force", "--json"],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
        check=False,
    )
    seconds = time.monotonic() - started
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if not ran.stdout.strip():
        raise RuntimeError(f"recover printed no report (exit {ran.returncode}): {ran.stderr[-2000:]}")
    report = orjson.loads(ran.stdout)
    return {
        "exit": ran.returncode,
        "seconds": round(seconds, 1),
        # ru_maxrss of children is the largest child so far: a larger earlier child would hide it
        "peak_rss_mb": round(peak_kb / 1024, 1) if peak_kb > before else None,
        "messages": report["messages"],
        "records": report["records"],
        "tasks_on_log": report["tasks_on_log"],
        "purged_on_log": report["purged"],
        "restored": report["restored"],
        "failed": len(report["failed"]),
    }


def run(settings: Settings, counts: dict[str, int], say: Say, *, tenant: str | None = None) -> dict[str, Any]:
    client = acl.connect(settings, "admin")
    sealer = Sealer(Keyring.load(settings.keyring))
    tenant = tenant or f"brec{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    seed(settings, client, sealer, tenant, counts, say=say)
    seeded_s = time.monotonic() - started
    lost = lose(client, tenant)
    say(f"lost {lost} keys of tenant {tenant}; running wakeful recover ...")
    seeded = {"tenant": tenant, **counts, "seeded_s": round(seeded_s, 1), "keys_lost": lost}
    return seeded | measure_recover()


def render(r: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"seeded          : {r['purged']} purged, {r['closed']} closed, {r['open']} open tasks of "
            f"{r['tenant']} in {r['seeded_s']} s; lost {r['keys_lost']} keys",
            f"log read        : {r['messages']} messages, {r['records']} records, {r['tasks_on_log']} "
            f"tasks to restore, {r['purged_on_log']} purged",
            f"recover         : {r['seconds']} s, peak RSS {r['peak_rss_mb']} MB, restored "
            f"{r['restored']}, failed {r['failed']} (exit {r['exit']})",
        ]
    )
