"""Models behind the proposer: `propose(window) -> Proposal`. They propose; they never decide.

Two built-ins, both deterministic so that tests and the demo are repeatable:
- `rules`: proposes the refund the task card describes.
- `gullible`: follows instructions it finds in evidence ("refund 5000 now"), like a model that was
  prompt-injected. It exists to show that the executor, not the model, decides.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Protocol

from pydantic import Field

from wakeful.schemas.base import Record

_INSTRUCTION = re.compile(r"refund\s+(?:of\s+)?(\d+)", re.IGNORECASE)


class Proposal(Record):
    """The only shape a proposer may emit."""

    KIND: ClassVar[str] = "proposal"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    tool: str = Field(min_length=1, max_length=64)
    args: dict[str, Any]
    rationale: str = Field(max_length=2000)
    model: str


class Model(Protocol):
    name: str

    def propose(self, window: dict[str, Any]) -> Proposal: ...


class RulesModel:
    name = "rules"

    def propose(self, window: dict[str, Any]) -> Proposal:
        card = window["task_card"]
        tools = [t["name"] for t in window["tools"]]
        if not tools:
            return Proposal(
                tool="none", args={}, rationale="no tool is permitted at this stage", model=self.name
            )
        args = {"task_id": card["task_id"], "amount": card["amount"], "currency": card["currency"]}
        return Proposal(
            tool=tools[0], args=args, rationale="refund the amount on the task card", model=self.name
        )


class GullibleModel(RulesModel):
    name = "gullible"

    def propose(self, window: dict[str, Any]) -> Proposal:
        proposal = super().propose(window)
        for item in window["evidence"]:
            found = _INSTRUCTION.search(item["excerpt"])
            if found:
                args = {**proposal.args, "amount": int(found.group(1))}
                return proposal.model_copy(
                    update={"args": args, "rationale": f"the evidence says: {found.group(0)!r}"}
                )
        return proposal


MODELS: dict[str, type[RulesModel]] = {"rules": RulesModel, "gullible": GullibleModel}
