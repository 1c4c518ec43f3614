"""A release's dry run: what gate 4 would do to each stored task at its next wake under a new app,
computed by the very rules the gate runs (workflow/compat.py), with nothing written.

Outcomes, per task:

    unchanged    its stamps are the deployed ones: it goes on as it is
    pin          it keeps a version it started with: a policy under the "pin" rule, a tool catalog
                 under "pin" or whose contract is unchanged (only the tools' wording changed: the
                 task keeps the wording it started with, D119), or a workflow version the app
                 keeps (App.retired) and does not migrate
    migrate      a stamp is re-stamped with the deployed one: a declared "migrate" rule, or a
                 workflow version the deployed one migrates from (its migration ran without error
                 on the task's state, here, and the result validates)
    quarantine   a stamp differs under a "quarantine" rule, a workflow version is neither migrated
                 nor kept, its migration fails, or its state no longer validates: the task is
                 parked for a person
    no-workflow  the new app runs no workflow of the task's name: its wakes are dead-lettered, kept
                 for a worker that runs it
    ended        closed or quarantined already: no wake reaches gate 4
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from wakeful.authority.snapshot import Snapshot
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.sdk.workflow import CLOSED, QUARANTINED
from wakeful.workflow import compat, engine

Outcome = Literal["unchanged", "pin", "migrate", "quarantine", "no-workflow", "ended"]
OUTCOMES: tuple[Outcome, ...] = ("unchanged", "pin", "migrate", "quarantine", "no-workflow", "ended")


@dataclass(frozen=True)
class Forecast:
    task_id: str
    workflow: str
    version: int  # the workflow version the task was started under
    stage: str
    outcome: Outcome
    detail: str  # what differs, and by which rule; "" when nothing does


def forecast(cp: Checkpoint, auth: Snapshot, app: App) -> Forecast:
    """What gate 4 does to `cp` at its next wake under `app` and the live authority `auth`."""

    def said(outcome: Outcome, detail: str = "") -> Forecast:
        business = cp.business
        return Forecast(cp.task_id, business.workflow, business.workflow_version, cp.stage, outcome, detail)

    current = app.workflow(cp.business.workflow)
    if current is None:
        return said("no-workflow", f"the app runs no workflow {cp.business.workflow!r}")
    if cp.stage in (CLOSED, QUARANTINED):
        return said("ended", f"task is {cp.stage}")
    versioned = compat.workflow_version(app, cp, auth)
    if isinstance(versioned, str):
        return said("quarantine", versioned)
    if engine.terminal(engine.workflow_of(app, versioned), versioned.stage):
        return said("ended", f"task is {cp.stage}")
    checked = compat.check_app(app, versioned, auth)
    if isinstance(checked, str):
        return said("quarantine", checked)
    stamped, kept = _stamps(cp), _stamps(checked)
    deployed = {"policy": auth.policy, "tool_catalog": app.catalog, "workflow": f"v{current.version}"}
    moved = [f"{n} {stamped[n]} -> {kept[n]}" for n in deployed if kept[n] != stamped[n]]
    pinned = [f"pinned {n} {kept[n]} (deployed {deployed[n]})" for n in deployed if kept[n] != deployed[n]]
    if pinned:
        return said("pin", ", ".join(moved + pinned))
    if moved:
        return said("migrate", ", ".join(moved))
    return said("unchanged")


def _stamps(cp: Checkpoint) -> dict[str, str]:
    """The versions a task runs under, as the forecast names them."""
    return {
        "policy": cp.versions.policy,
        "tool_catalog": cp.versions.tool_catalog,
        "workflow": f"v{cp.business.workflow_version}",
    }


def tally(forecasts: Iterable[Forecast]) -> dict[tuple[str, int], Counter[Outcome]]:
    """Counts of each outcome, by workflow and the version its tasks started under."""
    counts: dict[tuple[str, int], Counter[Outcome]] = {}
    for f in forecasts:
        counts.setdefault((f.workflow, f.version), Counter())[f.outcome] += 1
    return dict(sorted(counts.items()))
