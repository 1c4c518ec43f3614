"""A tenant's in-flight limit (D108): which record holds a tenant, what a record says, and which
tasks take a slot of it. Pure: the operator writes the records (authority/limit_store.py), every
role reads them with its Snapshot, the gate and the executor count (state/fair.py) and the timer
lets held creates in (consumers/timer/fair.py).

A limit holds a tenant to `max_in_flight` tasks in flight: created and neither ended (the
workflow's end stages, closed, cancelled) nor parked for a person (needs_review, quarantined). A
create over it is held, never refused, and let in, oldest first, as the tenant's tasks end. The
tenant's own record (scope `tenant:N`) outranks the `default` one; with neither, nothing is
counted, as before limits. A workflow's record (scope `workflow:A:W`, D112) holds each tenant to
`max_in_flight` tasks of that workflow in flight, within the tenant's own limit. A record that
does not read never lifts a limit: it holds the tenant (or its tasks of the workflow) to DAMAGED.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from wakeful.authority.limit_store import (
    DEFAULT_SCOPE,
    MAX_IN_FLIGHT,
    counting,
    is_tool,
    is_workflow,
    read,
    scope_of,
    workflow_scope,
)
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.workflow import engine, rates
from wakeful.workflow.stuck import PARKED

# What a record that does not read (not JSON, no whole number of at least 1) holds its tenant to:
# never 0, which would let nothing in for good, and never no limit, which would lift it.
DAMAGED = 1


@dataclass(frozen=True)
class Limit:
    """One record, as read: the slots, where it applies, who set it, when and why. `damaged` says
    why the record did not read ("" when it did): it then holds the tenant to DAMAGED."""

    scope: str
    max_in_flight: int
    by: str = ""
    at: str = ""
    reason: str = ""
    damaged: str = ""


def parse(scope: str, raw: str | bytes) -> Limit:
    """The record `raw` of `scope`; one that does not read holds at DAMAGED, with why."""
    doc = read(raw)
    if isinstance(doc, str):
        return Limit(scope, DAMAGED, damaged=doc)
    slots = doc.get("max_in_flight")
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_IN_FLIGHT:
        return Limit(scope, DAMAGED, damaged=f"max_in_flight is {slots!r}, not a whole number from 1")
    said = {k: str(doc.get(k, "")) for k in ("by", "at", "reason")}
    return Limit(scope, slots, **said)


def applying(limits: Mapping[str, str], tenant: str) -> Limit | None:
    """The limit that holds `tenant` (its own record, else the default one), or None: no limit."""
    for scope in (scope_of(tenant), DEFAULT_SCOPE):
        raw = limits.get(scope)
        if raw is not None:
            return parse(scope, raw)
    return None


def slots(limit: Limit | None) -> int:
    """What a limit holds to: its number, or with none, as many as a record may say (no limit)."""
    return limit.max_in_flight if limit is not None else MAX_IN_FLIGHT


def of_workflow(limits: Mapping[str, str], app: str, workflow: str) -> Limit | None:
    """The limit on each tenant's tasks of `workflow` of `app` in flight (D112), or None."""
    raw = limits.get(workflow_scope(app, workflow))
    return parse(workflow_scope(app, workflow), raw) if raw is not None else None


def every(limits: Mapping[str, str]) -> list[Limit | rates.Rate]:
    """Every record, by scope (the default first, then the tenants', the workflows', the tools'),
    as `wakeful authority limits list` shows them."""
    order = sorted(limits, key=lambda s: (s != DEFAULT_SCOPE, is_tool(s), is_workflow(s), s))
    return [rates.parse(s, limits[s]) if is_tool(s) else parse(s, limits[s]) for s in order]


def occupies(app: App, cp: Checkpoint) -> bool:
    """Whether the task takes a slot of its tenant's limit: not ended and not parked for a person.
    A task of a workflow this app lacks is counted: a leak over-counts, it never lets more in."""
    if cp.stage in PARKED:
        return False
    try:
        wf = engine.workflow_of(app, cp)
    except engine.UnknownWorkflow:
        return True
    return not engine.terminal(wf, cp.stage)


def frees(app: App, cp: Checkpoint, limits: Mapping[str, str]) -> bool:
    """Whether a change that left the task as `cp` gives its slot back: some limit is stored (a
    tenant's may have been lifted since the task took its slot) and the task no longer occupies
    one. Derived from the stored state, so a change done before (a redelivery, a replay) gives it
    back again; giving back a slot the task never took changes nothing. With no in-flight limit
    stored at all (a tool's rate is none) nothing is given back, and nothing counted: the first
    limit set clears the counts."""
    return counting(limits) and not occupies(app, cp)


def retakes(app: App, was: str, cp: Checkpoint, limits: Mapping[str, str]) -> bool:
    """Whether a change from stage `was` to `cp` takes a slot again: a person let a parked task
    go on. It is counted at once, never held (a person decided it), even past the limit: the
    tenant's next creates wait for it too."""
    held = applying(limits, cp.security.tenant) or of_workflow(limits, app.name, cp.business.workflow)
    return was in PARKED and occupies(app, cp) and held is not None
