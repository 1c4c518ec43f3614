"""A tool: the only door from a task to the outside world.

Subclass Tool, declare what it is, and implement `call` and `lookup`:

    class BookRoom(Tool[BookArgs]):
        name = "book_room"
        args = BookArgs
        description = "Book the task's room for its day, once, under its op key."
        stages = ("ready",)
        op_key = "BOOK:{task_id}:v{version}"
        egress = ("rooms",)

        def connect(self, settings): ...            # open clients with the tool's own credentials
                                                    # (or declare `credential`: one minted per step)
        def call(self, op_key, args, fence): ...    # do it once per op key; return what to record
        def lookup(self, op_key): ...               # what a call under op_key did, or None

The executor writes an intent before `call`, passes the op key and the lease's fencing token, and
records the outcome; after a crash it asks `lookup` instead of calling blindly. A reversible tool
also implements `undo`, which a workflow can ask for (Compensate) when a later step fails for good.

A tool whose answer comes later (a payment that settles, a human task, an MCP task) returns
`Pending(handle, deadline)` from `call` (and from `lookup`) and names who may complete it
(`completed_by`): the task then sleeps until a `tool.completed` event signed by one of them carries
the result for that handle, or until the deadline (docs/agents.md, "A tool that answers later").
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, TypeVar

import orjson
from pydantic import BaseModel

from wakeful.core.settings import Settings

A = TypeVar("A", bound=BaseModel)


class ToolUnavailable(Exception):
    """The call may work later (timeout, 5xx): the executor gives the task's lease back and handles
    the step again after a backoff, asking `lookup` first and calling again under the same op key,
    up to `Tool.attempts` calls in all (counted on the action log); then the step has failed for good."""


class ToolRefused(Exception):
    """The call can never work (a 4xx, a closed account): the step has failed for good at once."""


class ToolFenced(Exception):
    """The downstream saw a newer fencing token: this worker's lease is gone; nothing is retried."""


@dataclass(frozen=True)
class Pending:
    """A call's answer that comes later: `handle` is the downstream's name for the work under way
    (a payment id, a human task's id, an MCP task id: 1-200 of A-Z a-z 0-9 _ . : @ / -), and
    `deadline` how long from now (or until when) the task waits for its completion before the
    tool's `on_deadline` rule applies."""

    handle: str
    deadline: timedelta | datetime


class Tool(Generic[A]):
    name: ClassVar[str]
    args: ClassVar[type[BaseModel]]
    description: ClassVar[str]
    stages: ClassVar[tuple[str, ...]]
    op_key: ClassVar[str] = "{tool}:{task_id}:v{version}"  # fields: tool, task_id, version
    reversible: ClassVar[bool] = False
    egress: ClassVar[tuple[str, ...]] = ()  # the outside systems it reaches, for review and policy
    # A downstream (state/downstreams.py) whose Redis user is minted for each call, lookup and undo
    # and removed after it (D120): the run reads it with `credential()`; None: the tool keeps its own.
    credential: ClassVar[str | None] = None
    attempts: ClassVar[int] = 3
    # False: a read-only tool (a lookup, a search, a fetch). It runs without an approval, and uses
    # none up, but is confined like any other (its stages, its egress, its op key).
    effect: ClassVar[bool] = True
    # How the model is shown what it returned: "untrusted" (text from outside, read as data, never
    # as instructions) unless the tool vouches for its own output ("trusted").
    output_trust: ClassVar[str] = "untrusted"
    # An asynchronous tool: its call may return Pending, and its result then comes in a
    # `tool.completed` event from one of these (as Wait.signers: "principal:<name>", REQUESTER,
    # APPROVERS, ANYONE). `on_deadline` says what a completion that never comes does, as Wait's.
    completed_by: ClassVar[tuple[str, ...]] = ()
    on_deadline: ClassVar[str] = "escalate:ops"

    def connect(self, settings: Settings) -> None:
        """Open what the tool talks to, once per executor process (nothing by default)."""

    def call(self, op_key: str, args: A, fence: int) -> Mapping[str, str] | Pending:
        raise NotImplementedError(f"tool {self.name} has no call()")

    def lookup(self, op_key: str) -> Mapping[str, str] | Pending | None:
        raise NotImplementedError(f"tool {self.name} has no lookup(): an ambiguous outcome cannot be settled")

    def undo(self, op_key: str, args: A, fence: int) -> Mapping[str, str]:
        raise NotImplementedError(f"tool {self.name} is not reversible")

    @classmethod
    @functools.cache
    def parameters(cls) -> dict[str, Any]:
        """The JSON schema of the tool's arguments, made once per tool (pydantic takes ~0.5 ms)."""
        return cls.args.model_json_schema()

    def key_for(self, task_id: str, version: int, step: int = 0) -> str:
        """The op key of the tool's call at the task's `version`, at `step` of a stage that loops
        (Workflow.max_steps): the first step's key is the one a stage of one step has always had."""
        key = self.op_key.format(tool=self.name, task_id=task_id, version=version)
        return key if step == 0 else f"{key}:s{step}"

    def describe(self) -> dict[str, Any]:
        """What the model is shown and what the catalog pins (with the op key): see catalog()."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters(),
            "stages": list(self.stages),
            "reversible": self.reversible,
            "egress": list(self.egress),
        } | self._unusual()

    def _unusual(self) -> dict[str, Any]:
        """What only a read-only or an asynchronous tool says of itself: the stamps of tools that
        are neither stay as they were."""
        said: dict[str, Any] = {} if self.effect else {"effect": False}
        if self.completed_by:
            said |= {"completed_by": list(self.completed_by), "on_deadline": self.on_deadline}
        return said


def _digest(described: list[dict[str, Any]]) -> str:
    ordered = sorted(described, key=lambda d: str(d["name"]))
    return hashlib.sha256(orjson.dumps(ordered, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


# What a task was admitted under: a change here changes what a step may do, so a waiting task meets
# its app's compatibility rule. A change of wording only (the description the model reads, the
# egress) is no reason to stop a task, nor does it reach one: the task is shown the wording it was
# stamped with, unless the app names the tool in `App.refresh`, and an egress widened without that
# is refused at deploy (workflow/wording.py, D119).
CONTRACT = ("name", "parameters", "stages", "reversible", "op_key", "effect", "completed_by", "on_deadline")
WORDING = ("name", "description", "egress")


def catalog(tools: Iterable[Tool[Any]]) -> str:
    """The tool catalog version a task is stamped with: `catalog-<contract>.<wording>`, a digest of
    every tool's contract (name, arguments schema, stages, reversibility, op key), then one of its
    wording (description, egress)."""
    tools = list(tools)
    described = [tool.describe() | {"op_key": tool.op_key} for tool in tools]
    contract = _digest([{k: d[k] for k in CONTRACT if k in d} for d in described])
    return f"catalog-{contract}.{wording_digest(wording(tools))}"


def wording(tools: Iterable[Tool[Any]]) -> list[dict[str, Any]]:
    """Each tool's wording (name, description, egress), by name: what the second part of a catalog
    stamp is the digest of, and what the model is shown for a task stamped with it (D119)."""
    return sorted(({k: tool.describe()[k] for k in WORDING} for tool in tools), key=lambda d: str(d["name"]))


def wording_digest(entries: list[dict[str, Any]]) -> str:
    """The digest a catalog stamp's second part holds for these wording entries (wording())."""
    return _digest(entries)


def wording_of(stamp: str) -> str | None:
    """The wording part of a catalog stamp; None for a stamp of the older, single-digest kind."""
    head, dot, tail = stamp.partition(".")
    return tail if dot and head.startswith("catalog-") else None


def legacy_catalog(tools: Iterable[Tool[Any]]) -> str:
    """The stamp a task made before the contract was told apart got for the same tools: one digest
    of every tool's description (`describe()`). Never change: it names stored tasks' stamps."""
    return "catalog-" + _digest([tool.describe() for tool in tools])


def contract_of(stamp: str) -> str | None:
    """The contract part of a catalog stamp; None for a stamp of the older, single-digest kind."""
    head, dot, _ = stamp.partition(".")
    return head if dot and head.startswith("catalog-") else None


def published(tools: Iterable[Tool[Any]]) -> list[dict[str, Any]]:
    """Each tool as the authority store's catalog holds it (`wakeful tools publish`): its name, a
    digest of its contract and one of its wording (the two parts of catalog(), for this tool
    alone), its stages and whether it is reversible."""
    entries = []
    for tool in sorted(tools, key=lambda t: t.name):
        described = tool.describe() | {"op_key": tool.op_key}
        entries.append(
            {
                "name": tool.name,
                "contract": _digest([{k: described[k] for k in CONTRACT if k in described}]),
                "wording": _digest([{k: described[k] for k in WORDING}]),
                "stages": list(tool.stages),
                "reversible": tool.reversible,
            }
        )
    return entries
