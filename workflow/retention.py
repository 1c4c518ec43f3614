"""Which tasks a purge takes: pure rules over the task index's summaries (docs/retention.md, D73).

A task goes when all of these hold: its workflow is one the app runs (a version it deploys or
keeps); its stage is finished there (a terminal stage of the workflow, or the runtime's `closed`),
never waiting, parked for review (needs_review) or quarantined; no quarantine marker is set on it;
and its last change is older than both the operator's `before` and the app's retention.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from wakeful.sdk.app import App
from wakeful.sdk.workflow import CANCELLED, CLOSED, NEEDS_REVIEW, QUARANTINED
from wakeful.workflow import engine

Verdict = Literal["purge", "unknown_workflow", "not_finished", "waiting", "quarantined", "recent"]
KEPT: tuple[Verdict, ...] = ("unknown_workflow", "not_finished", "waiting", "quarantined", "recent")


@dataclass(frozen=True)
class Seen:
    """A task as the purge sees it: its summary in the index, and whether a marker is set on it."""

    task_id: str
    workflow: str
    stage: str
    updated_at: datetime
    quarantined: bool = False
    waits: int = 0  # pending waits: a task that waits for something never goes


def finished_stages(app: App) -> dict[str, frozenset[str]]:
    """For each workflow the app runs, the stages at which its tasks are done: `closed`, and each
    stage terminal in every version the app deploys or keeps that has it (the index does not say
    which version a task runs: a stage one version ends at and another moves on from is not done);
    `cancelled`; never needs_review or quarantined."""
    terminal: dict[str, dict[str, bool]] = {}
    for wf in (*app.workflows, *app.retired):
        stages = {s for s in wf.stages} | {t for targets in wf.stages.values() for t in targets}
        seen = terminal.setdefault(wf.name, {})
        for stage in stages:
            seen[stage] = seen.get(stage, True) and engine.terminal(wf, stage)
    return {
        name: frozenset(
            {CLOSED, CANCELLED, *(s for s, done in stages.items() if done)} - {NEEDS_REVIEW, QUARANTINED}
        )
        for name, stages in terminal.items()
    }


def cutoff(before: datetime, now: datetime, keep: timedelta) -> datetime:
    """A task whose last change is older than this goes: older than `before` and than the retention."""
    return min(before, now - keep)


def verdict(
    seen: Seen, finished: Mapping[str, frozenset[str]], before: datetime, now: datetime, keep: timedelta
) -> Verdict:
    """Whether the task goes ("purge") or why it stays."""
    done = finished.get(seen.workflow)
    if done is None:
        return "unknown_workflow"
    if seen.stage not in done:
        return "not_finished"
    if seen.waits:
        return "waiting"
    if seen.quarantined:
        return "quarantined"
    if seen.updated_at >= cutoff(before, now, keep):
        return "recent"
    return "purge"


def seen_from(summary: Mapping[str, Any], task_id: str, quarantined: bool = False) -> Seen | None:
    """The Seen of an index summary (state/index.py), or None when it is not one (a bad summary
    stays: nothing is taken on a guess)."""
    try:
        at = datetime.fromisoformat(str(summary["updated_at"]))
        workflow, stage, waits = summary["workflow"], summary["stage"], summary.get("waits") or []
    except (KeyError, ValueError, TypeError):
        return None
    if not isinstance(workflow, str) or not isinstance(stage, str) or at.tzinfo is None:
        return None
    if not isinstance(waits, list):
        return None
    return Seen(task_id, workflow, stage, at, quarantined, len(waits))


def lapsed(ttl_left_ms: int, ttl_ms: int, keep: timedelta) -> bool:
    """Whether a key written (or last refreshed) with a TTL of ttl_ms, ttl_left_ms of which is left,
    is older than `keep`: a receipt or an evidence document the app keeps less long than the
    runtime's TTL. A key with no TTL (ttl_left_ms < 0) never lapses here."""
    return ttl_left_ms >= 0 and ttl_ms - ttl_left_ms > keep.total_seconds() * 1000


def memory_lapsed(created_at: datetime, expires_at: datetime, now: datetime, keep: timedelta | None) -> bool:
    """Whether a memory record goes: past its own expiry, or older than the app keeps memory."""
    return expires_at <= now or (keep is not None and created_at <= now - keep)
