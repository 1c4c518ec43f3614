"""What the gate writes beside the checkpoint: receipts, evidence, memory, and what follows.

The sender's receipt, the references to any evidence the event attached and what its decision
remembered go in the transaction of the change they belong to (`change_receipt`, `attached`).
What to do after the CAS (register a wait's deadline and correlation id, publish a
ProposalRequest, write the receipt) is derived from the stored state, so a wake redelivered after
a crash between the CAS and these steps does them again; everything downstream dedupes. A change
writes the waits ahead of its transaction; an outcome that changed nothing writes them and its
receipt in one round trip (D38).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Producer

from wakeful.authority import freezes
from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.gate import memory_read as gate_memory
from wakeful.consumers.gate.wake import Wake
from wakeful.core import topics, tracing
from wakeful.core.log import Log
from wakeful.schemas import events
from wakeful.schemas import receipt as receipts
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.custody import APPROVAL_KEY, EVENT_KEY, ApprovalBound
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.schemas.memory import MemoryRecord
from wakeful.sdk.app import App
from wakeful.sdk.workflow import CANCELLING
from wakeful.state import checks, keys
from wakeful.state import evidence as stored_evidence
from wakeful.state.last_step import wait_writes
from wakeful.state.pinned import Command, Pinned
from wakeful.workflow import compat, switches, window, wording

# The read door (gate_memory.Recaller): the memory a task's window shows, as window items.
Recall = Callable[[Checkpoint, Snapshot, datetime], list[dict[str, Any]]]


class FollowUps:
    """The writes that follow a decision: for an outcome that wrote nothing, one round trip for the
    waits and the receipt (a change writes those with its transaction: `wait_writes` ahead of it);
    then the task's proposal request."""

    def __init__(
        self,
        producer: Producer,
        app: App,
        log: Log,
        *,
        recall: Recall | None = None,
        wordings: wording.Read | None = None,
    ) -> None:
        self.producer = producer
        self.app = app
        self.log = log
        self.recall = recall  # the read door (consumers/gate/memory_read.py); None: no memory layer
        self.wordings = wordings  # the tool wordings tasks were stamped with (D119); None: the deployed

    def finish(
        self,
        event: SignedEvent | None,
        status: str,
        reason: str,
        task_id: str,
        cp: Checkpoint | None,
        *,
        pinned: Pinned,
        also: Sequence[Command] = (),
    ) -> None:
        """For an outcome that changed nothing, one round trip on the task's connection: the WATCH
        dropped, the wait's deadline and correlation id, `also` (a held wake), and the sender's
        receipt. Everything here follows from the stored state."""
        writes: list[Command] = [("UNWATCH",), *wait_writes(cp), *also]
        if event is not None:
            writes.append(receipt_write(event, status, reason, cp, task_id))
            self.log("gate.receipt", task_id=task_id, event_id=event.event_id, status=status, reason=reason)
        replies = pinned.batch(writes)
        checks.raise_replies(task_id, *replies)

    def follow_up(self, cp: Checkpoint, wake: Wake) -> None:
        """A task at a stage that offers a tool, and waits for nothing, gets one proposal request."""
        tracing.stamp_task(cp, self.app.name)
        if cp.stage == CANCELLING:  # no model: the executor is asked to undo, under the lease
            return self._ask(cp, wake, events.UNDO_REQUEST, {"tenant": cp.security.tenant})
        # A stage whose every tool is off offers the model nothing: the gate's ruling parks such a
        # task (gate_rules.off_parked), and a redelivered wake's follow-up asks nothing either.
        if cp.execution.pending_waits or not switches.offered(self.app, cp.stage, wake.auth):
            return
        if freezes.holding(wake.auth.frozen, self.app.name, cp.security.tenant, cp.task_id):
            return  # no new step while frozen: the thaw wakes the task and asks then
        event = wake.event
        recent = [f"{event.kind} by key {event.key_id} at {event.issued_at.isoformat()}"] if event else []
        memory = self.recall(cp, wake.auth, datetime.now(UTC)) if self.recall is not None else []
        stamp = cp.versions.tool_catalog  # the deployed one: its wording is the deployed, nothing to pin
        stored = self.wordings.of_stamp(stamp) if self.wordings and stamp != self.app.catalog else None
        shown = wording.pinned(self.app, stored)  # each tool as the task knew it, unless refreshed
        body = window.build(self.app, cp, wake.auth, recent, wake.evidence, memory=memory, described=shown)
        # the tenant: whose token budget it spends; with the app, which freezes the proposer honours
        asked = {"window": body, "tenant": cp.security.tenant, "app": self.app.name}
        self._ask(cp, wake, "proposal.request", asked)

    def _ask(self, cp: Checkpoint, wake: Wake, kind: str, payload: dict[str, Any]) -> None:
        """The task's one request at this state_version, to the proposer."""
        request = Envelope(
            message_id=events.request_id(cp.task_id, cp.state_version),
            task_id=cp.task_id,
            task_version=cp.state_version,
            kind=kind,
            created_at=datetime.now(UTC),
            trace_id=wake.event.event_id if wake.event else cp.task_id,
            payload=payload,
        )
        self.producer.produce(topics.PROPOSALS_REQUEST, key=cp.task_id.encode(), value=request.encode())


def receipt_write(
    event: SignedEvent, status: str, reason: str, cp: Checkpoint | None, task_id: str | None = None
) -> tuple[str, str, bytes, str, int]:
    """SET command for the receipt of `event`, in its task's slot."""
    task = cp.task_id if cp is not None else task_id or ""
    more: dict[str, Any] = {}
    if cp is not None:
        more = {"stage": cp.stage, "version": cp.business.version, "state_version": cp.state_version}
    doc = receipts.encode(status, reason, task or None, "gate", **more)
    return ("SET", keys.receipt(event.event_id, task, key_id=event.key_id), doc, "EX", keys.RECEIPT_TTL_S)


def change_receipt(event: SignedEvent | None, review: str | None, new: Checkpoint) -> list[tuple[Any, ...]]:
    """The sender's receipt, written in the same transaction as the change it answers. `review`:
    why the task went to review, the receipt's reason; a deadline (no event) has nobody to tell."""
    if event is None:
        return []
    if review is not None:
        return [receipt_write(event, "rejected", review, new)]
    return [receipt_write(event, "accepted", f"task is {new.stage}", new)]


@dataclass(frozen=True)
class Attached:
    """What a change writes beside its checkpoint: the documents its decision attached, stored once
    by their digest ahead of the transaction (one the change does not land is a document no task
    cites yet, and it expires: state/evidence.py); and inside it, their references and excerpts
    and the memory records the decision remembered (consumers/gate/memory_read.py)."""

    ahead: list[tuple[Any, ...]]
    inside: list[tuple[Any, ...]]
    detail: dict[str, Any]  # what the change's log record says of its memory


def attached(
    event: SignedEvent | None,
    new: Checkpoint,
    evidence: Mapping[str, str],
    remembered: tuple[list[MemoryRecord], list[str]],
) -> Attached:
    records, refused = remembered
    ahead, inside = (
        stored_evidence.writes(new.security.tenant, new.task_id, evidence, _source(event), new.updated_at)
        if evidence
        else ([], [])
    )
    return Attached(ahead, [*inside, *gate_memory.writes(records)], gate_memory.detail(records, refused))


class PerTry:
    """`make(new)` once per try of a compare-and-swap: the store asks for a change's detail, the
    writes ahead of its transaction and those in it separately, each with the same `new`."""

    def __init__(self, make: Callable[[Checkpoint], Attached]) -> None:
        self.make = make
        self._last: tuple[Checkpoint, Attached] | None = None

    def __call__(self, new: Checkpoint) -> Attached:
        if self._last is None or self._last[0] is not new:
            self._last = (new, self.make(new))
        return self._last[1]


def evidence_fields(task_id: str, documents: Mapping[str, str]) -> dict[str, str]:
    """Evidence documents under the names a task's window shows them by (field `evidence:<task>:<name>`)."""
    return {stored_evidence.field(task_id, name): text for name, text in documents.items()}


def _source(event: SignedEvent | None) -> str:
    return f"event:{event.key_id}:{event.event_id}" if event is not None else "deadline"


def event_detail(event: SignedEvent | None) -> dict[str, Any]:
    """The outbox record's detail for a change: the kind of event that made it, or "deadline"."""
    return {"event": event.kind if event else "deadline"}


def change_detail(event: SignedEvent | None) -> Callable[[Checkpoint, Checkpoint], dict[str, Any]]:
    """event_detail(), and what gate 4 migrated on the way ("migrated": each version moved, from
    -> to), recorded on wakeful.log with the change that made it."""

    def detail(old: Checkpoint, new: Checkpoint) -> dict[str, Any]:
        moved = compat.restamped(old, new)
        return event_detail(event) | ({"migrated": moved} if moved else {})

    return detail


def custody(
    envelope: Envelope, event: SignedEvent | None, old: Checkpoint | None, new: Checkpoint
) -> dict[str, Any]:
    """What the change's log record keeps for an offline audit (D72): the signed event it applied,
    as the door received it (its signature verifies with the signer's public key alone), and the
    approval it bound, if it bound one."""
    said: dict[str, Any] = {}
    text = envelope.payload.get("event")
    if event is not None and isinstance(text, str):
        said[EVENT_KEY] = text
    bound = new.business.approval
    approved = event is not None and event.kind == events.APPROVE
    if approved and bound is not None and (old is None or old.business.approval != bound):
        said[APPROVAL_KEY] = ApprovalBound.of(bound)
    return said
