"""Which tasks are stuck: nothing the runtime holds will move them on (`wakeful task list --stuck`).

A task sleeps safely only while something will wake it: a pending wait (it has a deadline and an
owner), a proposal in flight (asked once per state_version), a person (needs_review), a freeze's
thaw, a quarantine marker. Pure: the operator's client loads the tasks and asks `stuck` of each;
the timer's sweep (consumers/timer/sweep.py) and the ops page ask `stuck_summary` of the task
index's summaries; the gate asks `stranded` of a task a deadline wake finds with nothing to do.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.sdk.workflow import CANCELLING, RUNTIME_STAGES
from wakeful.workflow import engine

# A proposal answers within the model's time budget (timeout x attempts, 4 x 60 s by default) and a
# re-ask follows at once: a task unchanged for longer than this has none in flight.
STUCK_AFTER_S = 600
# The runtime's stages where nothing is owed: finished, or a person's. Not cancelling: its undos are.
PARKED = frozenset(RUNTIME_STAGES) - {CANCELLING}


def stuck(
    app: App, cp: Checkpoint, now: datetime, older_than: timedelta, *, held: bool = False
) -> str | None:
    """Why `cp` is stuck, or None: at a stage that is neither finished nor parked for a person, it
    waits for nothing, no freeze holds it (`held`), and it has not changed for `older_than`, so no
    proposal is in flight for it. A task of a workflow the app lacks is not judged here. A task
    cancelling waits for its undos, which the gate asks of the executor as it asks a proposal."""
    if cp.stage in PARKED or cp.execution.pending_waits or held:
        return None
    try:
        wf = engine.workflow_of(app, cp)
    except engine.UnknownWorkflow:
        return None
    if engine.terminal(wf, cp.stage):
        return None
    return _unchanged(app, cp.stage, cp.updated_at, now, older_than.total_seconds())


def stuck_summary(
    app: App, doc: dict[str, Any], now: datetime, older_than_s: float, *, held: bool
) -> str | None:
    """Why the task an index summary describes is stuck, or None: `stuck`'s rule, read from the
    summary (stage, waits, last change; state/index.py) instead of the checkpoint."""
    stage = str(doc.get("stage", ""))
    if stage in PARKED or doc.get("waits") or held:
        return None
    wf = app.workflow(str(doc.get("workflow", "")))
    if wf is None or engine.terminal(wf, stage):
        return None
    try:
        changed = datetime.fromisoformat(str(doc["updated_at"]))
    except (KeyError, ValueError):
        return None
    return _unchanged(app, stage, changed, now, older_than_s)


def _unchanged(app: App, stage: str, changed: datetime, now: datetime, older_than_s: float) -> str | None:
    """The reason a task waiting for nothing at `stage` is stuck once unchanged for `older_than_s`."""
    age = (now - changed).total_seconds()
    if age < older_than_s:
        return None
    since = f"unchanged for {int(age)} s, since {changed.isoformat()}"
    if stage == CANCELLING:
        return f"its cancel's undos have not run; {since}"
    if not app.tools_at(stage):
        return f"stage {stage} offers no tool and waits for nothing; {since}"
    return f"stage {stage} offers a tool, waits for nothing, and no proposal came; {since}"


def stranded(app: App, cp: Checkpoint, now: datetime) -> str | None:
    """Why nothing but a person can move `cp` on, or None: stuck for STUCK_AFTER_S at a stage that
    offers no tool, so no proposal can be asked for it either. A deadline wake (the timer's sweep)
    that finds it so parks it for review with this reason rather than leave it as it is."""
    if app.tools_at(cp.stage) or cp.stage == CANCELLING:
        return None
    return stuck(app, cp, now, timedelta(seconds=STUCK_AFTER_S))
