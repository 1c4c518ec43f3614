"""What a proposer emits: a tool call and its rationale, never an action (DESIGN.md, the model
proposes; deterministic code decides). The executor reads it; the models build it."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from wakeful.schemas.base import Record, migration

MAX_CALLS = 8  # the most calls one proposal carries (read-only ones, D68)


class Call(Record):
    """One more call a proposal carries beside its first: only read-only tools share a turn (D68)."""

    KIND: ClassVar[str] = "call"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = Field(default=1, exclude=True)

    tool: str = Field(min_length=1, max_length=64)
    args: dict[str, Any]


class Proposal(Record):
    """The only shape a proposer may emit. `tool` and `args` are its call; `more`, calls to make
    in the same turn after it, each read-only, as a model's parallel tool calls (D68)."""

    KIND: ClassVar[str] = "proposal"
    SCHEMA: ClassVar[int] = 2
    schema_version: int = SCHEMA

    tool: str = Field(min_length=1, max_length=64)
    args: dict[str, Any]
    rationale: str = Field(max_length=2000)
    model: str
    # Set by the proposer, never by the model's text: why the reply could not be a proposal (no tool
    # call, an unknown tool, arguments that are not JSON...), or why the model failed for good.
    unusable: str | None = Field(default=None, max_length=500)
    failed: str | None = Field(default=None, max_length=500)
    tokens: int = Field(default=0, ge=0)  # what the model call cost, prompt and completion
    more: tuple[Call, ...] = Field(default=(), max_length=MAX_CALLS - 1)


@migration(Proposal.KIND, 1)
def _proposal_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "more": []}  # one call per proposal before D68
