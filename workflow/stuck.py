"""Which tasks are stuck: nothing the runtime holds will move them on (`wakeful task list --stuck`).

A task sleeps safely only while something will wake it: a pending wait (it has a deadline and an
owner), a proposal in flight (asked once per state_version), a person (needs_review), a freeze's
thaw. Pure: the operator's client loads the tasks and asks `stuck` of each.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.sdk.workflow import RUNTIME_STAGES
from wakeful.workflow import engine

# A proposal answers within the model's time budget (timeout x attempts, 4 x 60 s by default) and a
# re-ask follows at once: a task unchanged for longer than this has none in flight.
STUCK_AFTER_S = 600


def stuck(
    app: App, cp: Checkpoint, now: datetime, older_than: timedelta, *, held: bool = False
) -> str | None:
    """Why `cp` is stuck, or None: at a stage that is neither finished nor parked for a person, it
    waits for nothing, no freeze holds it (`held`), and it has not changed for `older_than`, so no
    proposal is in flight for it. A task of a workflow the app lacks is not judged here."""
    if cp.stage in RUNTIME_STAGES or cp.execution.pending_waits or held:
        return None
    try:
        wf = engine.workflow_of(app, cp)
    except engine.UnknownWorkflow:
        return None
    age = now - cp.updated_at
    if engine.terminal(wf, cp.stage) or age < older_than:
        return None
    since = f"unchanged for {int(age.total_seconds())} s, since {cp.updated_at.isoformat()}"
    if not app.tools_at(cp.stage):
        return f"stage {cp.stage} offers no tool and waits for nothing; {since}"
    return f"stage {cp.stage} offers a tool, waits for nothing, and no proposal came; {since}"
