"""`wakeful task purge`: delete the Redis keys of finished tasks the app's retention lets go, leaving a
tombstone of each on wakeful.log (docs/retention.md, D73).

The index names the candidates (each tenant's stage sets are scored by last change, so a finished
stage's old tasks are one range read); workflow/retention.py decides; state/purge.py takes each one
in its own slot, checking again what was read. Batches of `batch` tasks cost three round trips:
the range with its summaries, the takes, the index. A dry run makes the same calls with nothing
written and says what would go.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import redis

from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.operate import retention as retention_sweeps
from wakeful.schemas.tombstone import purge_record
from wakeful.sdk.app import App
from wakeful.state import keys, purge
from wakeful.workflow import retention

EXAMPLES = 10
PROGRESS_EVERY_S = 2.0
Progress = Callable[[str], None]


@dataclass
class Report:
    before: str
    cutoff: str
    dry_run: bool
    kept: Counter[str] = field(default_factory=Counter)  # why each task looked at stays
    purged: int = 0
    keys: int = 0  # keys deleted (or that would be), receipts included
    examples: list[dict[str, Any]] = field(default_factory=list)
    correlation_ids: int = 0
    deadlines: int = 0
    outboxes_dropped: int = 0
    outboxes_waiting: int = 0  # tombstones the relay has not published yet: the next run drops them
    swept: dict[str, int] = field(default_factory=dict)  # receipts, documents, memory (retention_sweeps)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "kept": dict(self.kept)}


def replay_window(settings: Settings) -> timedelta:
    """How long an event may still be accepted at the door: its max age and the replay set's TTL.
    No task goes sooner after its last change (and `wakeful recover` holds tombstones to it)."""
    return timedelta(seconds=settings.event_max_age + keys.SEEN_TTL_S)


def run(
    client: redis.Redis,
    app: App,
    before: datetime,
    now: datetime,
    *,
    dry_run: bool,
    batch: int = 500,
    by: str = "admin",
    wait_s: float = 30.0,
    tenant: str | None = None,
    floor: timedelta = timedelta(0),
    say: Progress | None = None,
) -> Report:
    """Purge (or, dry_run, list) what the app's retention lets go of every tenant's tasks, or of
    `tenant`'s only. `floor`: no task goes sooner after its last change, whatever the app says
    (the door's replay window: an event still acceptable must never find its task gone)."""
    started = time.monotonic()
    keep = max(app.retention.closed_tasks, floor)
    cutoff = retention.cutoff(before, now, keep)
    rule = _Rule(retention.finished_stages(app), before, now, keep, dry_run, by)
    report = Report(before.isoformat(), cutoff.isoformat(), dry_run)
    purged: set[str] = set()
    said = time.monotonic()
    cutoff_ms = int(cutoff.timestamp() * 1000)
    for name in sorted({tenant} if tenant else set(purge.tenants(client))):
        for stage in sorted(set().union(*rule.finished.values())):
            offset = 0
            while page := purge.older(client, name, stage, cutoff_ms=cutoff_ms, offset=offset, count=batch):
                gone = _batch(client, page, rule, report)
                purged.update(t.task_id for t in gone)
                if not dry_run:
                    purge.unindex(client, gone)
                offset += len(page) - (0 if dry_run else len(gone))
                if say is not None and time.monotonic() - said >= PROGRESS_EVERY_S:
                    verb = "would go" if dry_run else "purged"
                    say(f"  {report.purged} tasks {verb}, {sum(report.kept.values())} kept ...")
                    said = time.monotonic()
    if purged:
        report.correlation_ids, report.deadlines = purge.forget_names(client, purged, dry_run=dry_run)
    if not dry_run:
        _drop_outboxes(client, report, wait_s)
    report.swept = retention_sweeps.sweep(client, app.retention, now, dry_run=dry_run, tenant=tenant)
    report.seconds = round(time.monotonic() - started, 3)
    return report


@dataclass(frozen=True)
class _Rule:
    finished: dict[str, frozenset[str]]
    before: datetime
    now: datetime
    keep: timedelta
    dry_run: bool
    by: str

    @property
    def reason(self) -> str:
        return f"closed_tasks={self.keep}, before={self.before.isoformat()}"


def _batch(client: redis.Redis, page: list[purge.Listed], rule: _Rule, report: Report) -> list[purge.Listed]:
    """Judge one page of candidates and take those that go; returns them."""
    chosen: list[tuple[purge.Listed, retention.Seen, int]] = []
    for listed in page:
        seen = retention.seen_from(listed.summary, listed.task_id) if listed.summary else None
        version = (listed.summary or {}).get("state_version")
        if seen is None or not isinstance(version, int):
            report.kept["unreadable_summary"] += 1
            continue
        verdict = retention.verdict(seen, rule.finished, rule.before, rule.now, rule.keep)
        if verdict != "purge":
            report.kept[verdict] += 1
            continue
        chosen.append((listed, seen, version))
    jobs = []
    for listed, seen, version in chosen:
        tomb = purge_record(
            task_id=listed.task_id,
            tenant=listed.tenant,
            workflow=seen.workflow,
            stage=seen.stage,
            state_version=version,
            last_change=seen.updated_at,
            purged_at=rule.now,
            by=rule.by,
            reason=rule.reason,
        )
        jobs.append((listed.task_id, version, tomb.encode(), tomb.record_id))
    gone = []
    for (listed, seen, _), (outcome, count) in zip(
        chosen, purge.take(client, jobs, dry_run=rule.dry_run), strict=True
    ):
        if outcome == "gone":  # taken by a purge that stopped before it took the task off the index
            report.kept[outcome] += 1
            gone.append(listed)  # its index entry, correlation ids and deadlines go now
            continue
        if outcome != "purged":
            report.kept[outcome] += 1
            continue
        gone.append(listed)
        report.purged += 1
        report.keys += count
        if len(report.examples) < EXAMPLES:
            report.examples.append(
                {"task_id": listed.task_id, "tenant": listed.tenant, "stage": seen.stage,
                 "last_change": seen.updated_at.isoformat(), "keys": count}
            )  # fmt: skip
    return gone


def _drop_outboxes(client: redis.Redis, report: Report, wait_s: float) -> None:
    """Drop the tombstone outboxes the relay drains within wait_s (this run's and earlier ones')."""

    def drained() -> bool:
        dropped, report.outboxes_waiting = purge.drop_outboxes(client)
        report.outboxes_dropped += dropped
        return report.outboxes_waiting == 0

    if not drained() and wait_s > 0:
        wait_until(drained, wait_s, interval=0.5)


def render(report: Report) -> str:
    verb = "would go" if report.dry_run else "purged"
    lines = [
        f"before {report.before}: last change before {report.cutoff} (the earlier of --before and retention)",
        f"{report.purged} finished tasks {verb} ({report.keys} keys), "
        f"{report.correlation_ids} correlation ids, {report.deadlines} deadlines",
    ]
    if report.kept:
        lines.append("kept: " + ", ".join(f"{n} {why}" for why, n in sorted(report.kept.items())))
    lines += [
        f"  {e['task_id']} ({e['tenant']}) {e['stage']} since {e['last_change']}: {e['keys']} keys"
        for e in report.examples
    ]
    if not report.dry_run:
        lines.append(
            f"tombstones on wakeful.log: {report.outboxes_dropped} outboxes dropped, "
            f"{report.outboxes_waiting} waiting for the relay (the next purge drops them)"
        )
    if any(report.swept.values()):
        lines.append("by retention: " + ", ".join(f"{n} {what}" for what, n in report.swept.items()))
    lines.append(f"{report.seconds} s")
    return "\n".join(lines)
