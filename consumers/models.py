"""Models behind the proposer: `propose(window) -> Proposal`. They propose; they never decide.

`make_model(settings)` builds the one WAKEFUL_MODEL names. `openai` is a client of any
OpenAI-compatible chat-completions server with tool calls (consumers/model_openai.py). Two more are
built in, both deterministic so that tests and the demo are repeatable, for any app:
- `rules`: proposes the first tool the window offers, its arguments taken from the task card. At a
  stage where the model calls tools in a loop, the first offered tool it has not called there yet,
  its arguments from the card, else from what earlier calls returned (the latest first).
- `gullible`: does the same, then follows instructions it finds in evidence ("pay 5000 now",
  "change the remittance account to X"), like a model that was prompt-injected. It exists to show
  that the executor, not the model, decides.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from pydantic import Field

from wakeful.core import metrics
from wakeful.core.settings import Settings
from wakeful.schemas.base import Record, migration

_PAY = re.compile(r"\b[a-z]+\s+(?:of\s+)?(\d+)\s+now\b", re.IGNORECASE)  # "pay 5000 now"
_SET = re.compile(
    r"\b(?:set|change)\s+(?:the\s+)?([A-Za-z _]{1,40}?)\s+to\s+([A-Za-z0-9_-]{1,64})", re.IGNORECASE
)


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


class Model(Protocol):
    name: str

    def propose(self, window: dict[str, Any]) -> Proposal: ...


class RulesModel:
    name = "rules"

    def propose(self, window: dict[str, Any]) -> Proposal:
        card, tools = window["task_card"], window["tools"]
        if not tools:
            return Proposal(
                tool="none", args={}, rationale="no tool is permitted at this stage", model=self.name
            )
        called = {done["tool"] for done in window.get("tool_results") or ()}
        tool = next((t for t in tools if t["name"] not in called), tools[0])
        known = {k: v for done in window.get("tool_results") or () for k, v in done["result"].items()} | card
        args = {name: known[name] for name in _parameters(tool) if name in known}
        more = _alongside(tool, [t for t in tools if t["name"] not in called], known)
        return Proposal(
            tool=tool["name"],
            args=args,
            rationale="the step the task card describes",
            model=self.name,
            more=tuple(Call(tool=t["name"], args={n: known[n] for n in _parameters(t)}) for t in more),
        )


class GullibleModel(RulesModel):
    name = "gullible"

    def propose(self, window: dict[str, Any]) -> Proposal:
        proposal = super().propose(window)
        tool = next((t for t in window["tools"] if t["name"] == proposal.tool), None)
        if tool is None:
            return proposal
        params = _parameters(tool)
        for item in window["evidence"]:
            excerpt = item["excerpt"]
            found = _PAY.search(excerpt)
            number = next(
                (n for n, spec in params.items() if spec.get("type") == "integer" and n != "version"), None
            )
            if found and number is not None:
                return _obeyed(proposal, {number: int(found.group(1))}, found.group(0))
            for said in _SET.finditer(excerpt):
                phrase = said.group(1).strip().lower().replace(" ", "_")
                field = next((n for n in params if n in phrase), None)
                if field is not None:
                    return _obeyed(proposal, {field: said.group(2)}, said.group(0))
        return proposal


def _alongside(
    first: dict[str, Any], uncalled: list[dict[str, Any]], known: dict[str, Any]
) -> list[dict[str, Any]]:
    """The read-only tools to call in the same turn as `first` (itself read-only): the next ones
    not called yet, in order, each of whose arguments is known (not one that needs what another
    call will return)."""
    if not first.get("read_only"):
        return []
    batch = []
    for tool in uncalled[1:]:
        if not tool.get("read_only") or any(known.get(n) is None for n in _parameters(tool)):
            break
        batch.append(tool)
    return batch[: MAX_CALLS - 1]


def _parameters(tool: dict[str, Any]) -> dict[str, dict[str, Any]]:
    props = tool.get("parameters", {}).get("properties", {})
    return props if isinstance(props, dict) else {}


def _obeyed(proposal: Proposal, change: dict[str, Any], said: str) -> Proposal:
    return proposal.model_copy(
        update={"args": {**proposal.args, **change}, "rationale": f"the evidence says: {said!r}"}
    )


def _openai(settings: Settings) -> Model:
    from wakeful.consumers.model_openai import OpenAIModel  # it imports Proposal from here

    assert settings.model_url is not None and settings.model_name is not None  # Settings checks both
    return OpenAIModel(
        settings.model_url,
        settings.model_name,
        settings.model_key,
        timeout=settings.model_timeout,
        attempts=settings.model_attempts,
        connections=settings.threads,
    )


MODELS: dict[str, Callable[[Settings], Model]] = {
    "rules": lambda _: RulesModel(),
    "gullible": lambda _: GullibleModel(),
    "openai": _openai,
}


@metrics.timed_models
def make_model(settings: Settings) -> Model:
    """The model WAKEFUL_MODEL names, configured from the settings."""
    return MODELS[settings.model](settings)
