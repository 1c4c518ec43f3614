"""Gate 7's tool switch: a tool an operator turned off is refused before its step's intent is written.

Pure: the executor reads the switches live with its snapshot, in the round trip that loads the task
and its action log, and calls this after the proposal was checked and before the intent. A step
whose intent was written before the switch (in flight, or done) is not refused: it completes or is
reconciled under its op key, as any other step, so a switch never leaves an effect half-run
(docs/decisions.md D57).
"""

from __future__ import annotations

from dataclasses import dataclass

from wakeful.authority.snapshot import Snapshot
from wakeful.authority.switches import ToolSwitch
from wakeful.schemas.logs import ActionStatus


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
