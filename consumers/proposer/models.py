"""Models behind the proposer: `propose(window) -> Proposal`. They propose; they never decide.

`make_model(settings)` builds the one WAKEFUL_MODEL names. `openai` is a client of any
OpenAI-compatible chat-completions server with tool calls (consumers/proposer/openai_model.py). Two more are
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
from typing import Any, Protocol

from wakeful.core import metrics
from wakeful.core.settings import Settings
from wakeful.schemas.proposals import MAX_CALLS, Call, Proposal

_PAY = re.compile(r"\b[a-z]+\s+(?:of\s+)?(\d+)\s+now\b", re.IGNORECASE)  # "pay 5000 now"
_SET = re.compile(
    r"\b(?:set|change)\s+(?:the\s+)?([A-Za-z _]{1,40}?)\s+to\s+([A-Za-z0-9_-]{1,64})", re.IGNORECASE
)


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
    from wakeful.consumers.proposer.openai_model import OpenAIModel  # it imports Proposal from here

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
