"""The tool switches, as a wake reads them: what the model is offered, and what the executor refuses.

Pure. The gate builds the window with the tools of the task's stage that are on (`offered`), so a
disabled tool is never proposed, and a task whose stage offers only tools that are off is parked
for a person without a model call (`stage_off`; docs/decisions.md D117). The executor reads the
switches live with its snapshot, in the round trip that loads the task and its action log, and
calls `refused` after the proposal was checked and before the intent: the last word, for a switch
thrown after the window was built. A step whose intent was written before the switch (in flight,
or done) is not refused: it completes or is reconciled under its op key, as any other step, so a
switch never leaves an effect half-run (D57).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wakeful.authority.snapshot import Snapshot
from wakeful.authority.switches import ToolSwitch
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.logs import ActionStatus
from wakeful.sdk.app import App
from wakeful.sdk.tools import Tool


@dataclass(frozen=True)
class SwitchedOff:
    """Park the task for a person: the step's tool is off. `switch` is the receipt's subject."""

    switch: ToolSwitch

    @property
    def reason(self) -> str:
        return self.switch.receipt()

    def detail(self) -> dict[str, str]:
        """What the task's outbox record (wakeful.log) carries beside the reason."""
        return {"refused": self.reason, **{f"switch_{k}": v for k, v in self.switch.as_dict().items()}}


def refused(app: str, tool: str, intent: ActionStatus | None, auth: Snapshot) -> SwitchedOff | None:
    """Whether the step calling `tool` of `app` may begin under the live switches. `intent`: the
    status of the step's entry in the action log under its op key (None: no intent yet). Only a step
    with no live intent is refused: one already begun (IN_FLIGHT or SUCCEEDED) goes on, and one that
    FAILED before begins anew, so it meets the switch."""
    switch = auth.tool_switch(app, tool)
    if switch is None:
        return None
    if intent in (ActionStatus.IN_FLIGHT, ActionStatus.SUCCEEDED):
        return None
    return SwitchedOff(switch)


def offered(app: App, stage: str, auth: Snapshot) -> tuple[Tool[Any], ...]:
    """The tools the model is offered at `stage`: the stage's own, less those switched off for `app`."""
    return tuple(t for t in app.tools_at(stage) if auth.tool_switch(app.name, t.name) is None)


@dataclass(frozen=True)
class StageOff:
    """Every tool the task's stage offers is switched off: asking the model could only end in a
    refused step, so the task is parked as that step would be (D57), with each switch named."""

    stage: str
    switches: tuple[ToolSwitch, ...]

    @property
    def reason(self) -> str:
        said = [s.receipt() for s in self.switches]
        if len(said) == 1:  # the executor's own words for a refused step of that tool
            return said[0]
        return f"every tool of stage {self.stage} is disabled, so no model was asked: " + "; ".join(said)


def stage_off(app: App, cp: Checkpoint, auth: Snapshot) -> StageOff | None:
    """Why `cp` may not be asked for a proposal (every tool of its stage is off), or None: a task
    that waits for something, or at a stage that offers no tool, or one that is on, is not judged."""
    if cp.execution.pending_waits:
        return None
    off = [auth.tool_switch(app.name, t.name) for t in app.tools_at(cp.stage)]
    found = tuple(s for s in off if s is not None)
    return StageOff(cp.stage, found) if found and len(found) == len(off) else None
