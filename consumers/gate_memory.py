"""The gate's side of memory: the candidates a decision returned, made into records for the write
door on its change's outbox record, and the read door's records for a window.

A change's candidates ride in its outbox record's detail ("remember": the records, "forgot": why
any candidate was refused), written in the change's own transaction, so they are written exactly
when the change is; the relay puts them through the write door once the log holds them
(state/memory.py). The gate itself writes no memory: its Redis user may only read it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import redis

from wakeful.authority.snapshot import Snapshot
from wakeful.core.log import Log
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import SignedEvent
from wakeful.sdk.app import App
from wakeful.state.memory import MemoryStore
from wakeful.workflow import engine, memory

MAX_SUBJECTS = 4  # subjects one window recalls


def writer(event: SignedEvent | None, principal: str | None) -> memory.Writer:
    """Who writes what a decision on this event remembers: the event's verified signer (a deadline:
    the gate itself), and the event as the words' source."""
    if event is None or not principal:
        return memory.Writer("role:gate", "deadline")
    return memory.Writer(f"principal:{principal}", f"event:{event.key_id}:{event.event_id}")


def detail(app: App, ruling: object, who: memory.Writer, new: Checkpoint, now: datetime) -> dict[str, Any]:
    """What a change's outbox record carries of memory (workflow/memory.detail). `new`: the task as
    the change writes it (its state_version names the records)."""
    if not isinstance(ruling, engine.Moved) or not ruling.remember:
        return {}
    return memory.detail(
        app.fact_table,
        [(who, ruling.remember, ruling.evidence)],
        tenant=new.security.tenant,
        task_id=new.task_id,
        state_version=new.state_version,
        now=now,
    )


class Recaller:
    """The read door for windows: the records a task's workflow recalls, as the window shows them."""

    def __init__(self, client: redis.Redis, app: App, log: Log) -> None:
        self.store = MemoryStore(client)
        self.app = app
        self.log = log

    def __call__(self, cp: Checkpoint, auth: Snapshot, now: datetime) -> list[dict[str, Any]]:
        wf = engine.workflow_of(self.app, cp)
        if wf.recall is None or "memory" not in wf.window:
            return []
        subjects = _subjects(wf.recall.subjects, engine.context(self.app, cp, auth, now))
        if isinstance(subjects, str):
            self.log("gate.recall_failed", task_id=cp.task_id, reason=subjects)
            return []
        found = self.store.recall_docs(cp.security.tenant, subjects)
        facts = {name: self.app.fact_table[name] for name in wf.recall.facts}
        kept = memory.shown_from(found, tenant=cp.security.tenant, subjects=subjects, facts=facts, now=now)
        return [memory.window_item(r) for r in kept]


def _subjects(fn: Callable[[Any], Any], ctx: Any) -> list[str] | str:
    """The subjects a recall names for this task, or why it named none usable."""
    try:
        named = list(fn(ctx))
    except Exception as exc:  # an app's function: its failure costs only the memory layer
        return f"recall's subjects raised {type(exc).__name__}: {str(exc)[:200]}"
    usable = [s for s in named if isinstance(s, str) and memory.subject_ok(s)]
    if len(usable) != len(named):
        return f"recall named subjects that are not <kind>:<id>: {str(named)[:200]}"
    return usable[:MAX_SUBJECTS]
