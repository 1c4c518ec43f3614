"""The gate's judgement of one wake inside its compare-and-swap, and what a sender is told about a
task it may not see. Pure but for the ruling it remembers: main.py loads and writes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wakeful.consumers.gate import memory_read as gate_memory
from wakeful.consumers.gate import rules as gate_rules
from wakeful.consumers.gate import writes as gate_writes
from wakeful.consumers.gate.wake import Wake
from wakeful.core import ids
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import SignedEvent
from wakeful.sdk.app import App
from wakeful.state.last_step import wait_writes
from wakeful.state.seal import Keyring
from wakeful.state.store import Keep
from wakeful.workflow import engine


@dataclass
class Judge:
    """Judges a wake's task each time the compare-and-swap reads it (gates 2, 4 and 5:
    gate_rules.decide()), a lost race judging it again: `last` is the ruling on the task as last
    read, `write` what it writes, `also` the receipt and the evidence written with it."""

    app: App
    wake: Wake
    now: datetime
    started: frozenset[str]
    recorded: Mapping[str, Mapping[str, Any]]  # the action log's outcomes, for a reopen
    keyring: Keyring  # seals the records its decision remembers (state/memory_seal.py)
    last: gate_rules.WakeRuling = None
    was: str = ""  # the stage of the task as last read

    def write(self, cp: Checkpoint) -> Checkpoint | Keep:
        w, self.was = self.wake, cp.stage
        self.last = gate_rules.decide(
            self.app,
            cp,
            w.event,
            w.principal or "",
            tenant=w.tenant,
            auth=w.auth,
            now=self.now,
            started=self.started,
            recorded=self.recorded,
        )
        return gate_rules.written(self.last)

    def __post_init__(self) -> None:
        self.attached = gate_writes.PerTry(self._attached)

    def detail(self, old: Checkpoint, new: Checkpoint) -> dict[str, Any]:
        """The change's outbox detail: what made it, and what its decision remembered."""
        said = gate_writes.change_detail(self.wake.event)(old, new) | self.attached(new).detail
        return said | gate_writes.custody(self.wake.envelope, self.wake.event, old, new)

    def review(self) -> str | None:
        """Why the task went to review: the reason its sender's receipt gives."""
        return self.last.reason if isinstance(self.last, engine.ForReview) else None

    def also(self, new: Checkpoint) -> list[tuple[Any, ...]]:
        """In the transaction: the evidence references, the memory records, the sender's receipt."""
        return [*self.attached(new).inside, *gate_writes.change_receipt(self.wake.event, self.review(), new)]

    def before(self, new: Checkpoint) -> list[tuple[Any, ...]]:
        """Ahead of the transaction: the waits' deadlines and correlation ids, and the documents."""
        return [*wait_writes(new), *self.attached(new).ahead]

    def _attached(self, new: Checkpoint) -> gate_writes.Attached:
        moved = self.last if isinstance(self.last, engine.Moved) else None
        who = gate_memory.writer(
            self.wake.event, self.wake.principal, self.wake.envelope.payload.get("event")
        )
        remembered = gate_memory.admitted(self.app, moved, who, new, self.now, keyring=self.keyring)
        return gate_writes.attached(self.wake.event, new, moved.evidence if moved else {}, remembered)


def told(event: SignedEvent | None, tenant: str, task_id: str, reason: str) -> tuple[str, str]:
    """(what the sender of `event`, of `tenant`, hears, the task its receipt names) when task_id
    could not be judged for its tenant: `reason` about a task of the sender's own namespace;
    otherwise (a task reached through the fallback to an id as sent, D52, or through a correlation
    id) the answer a task or wait that does not exist gets, outside that task's slot. A deadline
    wake (no event) is the runtime's own: nobody to tell."""
    if event is None:
        return reason, task_id
    if not event.correlation_id and event.task_id and ids.task_in(tenant, event.task_id) == task_id:
        return reason, task_id
    return stranger(event, tenant)


def stranger(event: SignedEvent, tenant: str) -> tuple[str, str]:
    """(what the sender of `event`, of `tenant`, hears about a task that is not its tenant's, the
    task its receipt names): what a wait or task that does not exist gets, in the slot of the task
    its own namespace names (none for a correlation id)."""
    if event.correlation_id:
        return f"unknown correlation id {event.correlation_id!r}", ""
    assert event.task_id is not None  # the door lets no event through that names neither
    own = ids.task_in(tenant, event.task_id)
    return f"no task {own}", own
