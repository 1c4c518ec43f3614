"""A change's last step, as commands: the writes between MULTI and EXEC (the sealed state, the
counter, the inbox, the outbox record, then the caller's own, such as `also` and the lease's
release), and the writes to shared keys around them.

`Store.create` and `Store.transition` send it on the connection that WATCHes the task since the
first step (state/first_step.py).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from wakeful.core import sources, tracing
from wakeful.schemas import custody
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.logs import OutboxRecord, WaitSummary
from wakeful.schemas.redrive import MessageSource
from wakeful.state import keys
from wakeful.state.seal import Sealer

Command = tuple[Any, ...]
# Extra writes that belong in the same transaction, built from the new checkpoint (Store's `also`).
# They must name keys in the task's hash slot (wk:{task}:...), e.g. the sender's receipt. The same
# shape, given as `before`, builds writes to shared keys that land ahead of the transaction.
Also = Callable[[Checkpoint], list[Command]]
# What a checkpoint shows its tenant's readers without being unsealed (D107): its workflow's views
# (name -> a JSON object) and search attributes (name -> text). The app's, so the roles pass it in
# (workflow/views.py computes it; state imports no workflow code); it must never raise.
Shows = Callable[[Checkpoint], tuple[dict[str, dict[str, Any]], dict[str, str]]]

WRITES = 4  # a change's own writes inside its EXEC (commands()); the caller's follow


def commands(
    sealer: Sealer,
    new: Checkpoint,
    message_id: str,
    detail: dict[str, Any] | None,
    *,
    also: Sequence[Command] = (),
    before: Also | None = None,
    shown: Shows | None = None,
) -> list[Command]:
    """The change's writes: `before` (shared keys, ahead of MULTI), the transaction with `also`
    inside it after the change's own WRITES, and the outbox index after EXEC. The record carries
    what `new` shows (nothing without `shown`): the index keeps only what the task's last record says."""
    task_id, version = new.task_id, new.state_version
    blob = sealer.seal(task_id, version, new.schema_version, new.encode())
    views, attributes = shown(new) if shown is not None else ({}, {})
    said = dict(detail or {})  # the custody keys move to the record's own fields (D72)
    event, approval = said.pop(custody.EVENT_KEY, ""), said.pop(custody.APPROVAL_KEY, None)
    proposal = said.pop(custody.PROPOSAL_KEY, None)
    record = OutboxRecord(
        record_id=f"{task_id}:{version}",
        task_id=task_id,
        state_version=version,
        message_id=message_id,
        stage=new.stage,
        task_version=new.business.version,
        at=new.updated_at,
        detail=said,
        tenant=new.security.tenant,
        workflow=new.business.workflow,
        waits=tuple(
            WaitSummary(wait_for=w.wait_for, deadline=w.deadline, correlation_id=w.correlation_id)
            for w in new.execution.pending_waits
        ),
        sealed=base64.b64encode(blob).decode("ascii"),
        writes=logged(task_id, also),
        policy=new.versions.policy,
        tool_catalog=new.versions.tool_catalog,
        event=event,
        approval=approval,
        proposal=proposal,
        source=_source(),
        created_at=new.created_at,
        views=views,
        attributes=attributes,
    )
    traced = tracing.outbox_field()  # the change's trace, for the relay's span of its publish
    return [
        *(before(new) if before else ()),
        ("MULTI",),
        ("SET", keys.state(task_id), blob),
        ("XADD", keys.ctr(task_id), "MAXLEN", 1, f"{version}-1", "v", version),
        ("SADD", keys.inbox(task_id), message_id),
        ("XADD", keys.outbox(task_id), "*", "id", record.record_id, "r", record.encode(), *traced),
        *also,
        ("EXEC",),
        ("SADD", keys.OUTBOX_DIRTY, task_id),
    ]


def _source() -> MessageSource | None:
    """The message the current handler applies and its run loop's floor (D87), if any."""
    taken = sources.current()
    if taken is None:
        return None
    return MessageSource(topic=taken.topic, partition=taken.partition, offset=taken.offset, floor=taken.floor)


def logged(task_id: str, also: Sequence[Command]) -> tuple[tuple[str, ...], ...]:
    """The writes of `also` that a rebuilt Redis needs and only this change holds (D70): the
    sender's receipt (SET of the task's receipt key; its TTL is counted again from the record's
    time) and a release's lifting of the quarantine marker (DEL). Everything else inside the
    transaction is on the log another way, or is not Progress (a lease's release), or must not
    outlive its deletion on a log kept for years (the evidence's excerpts: `memory forget` erases
    them, D69)."""
    receipts = keys.task_receipt_prefix(task_id)
    kept: list[tuple[str, ...]] = []
    for command in also:
        name, key = str(command[0]).upper(), _text(command[1]) if len(command) > 1 else ""
        if name == "SET" and key.startswith(receipts):
            kept.append(("SET", key, _text(command[2])))
        elif name == "DEL" and key == keys.quarantine(task_id):
            kept.append(("DEL", key))
    return tuple(kept)


def _text(part: Any) -> str:
    return part.decode("utf-8") if isinstance(part, bytes) else str(part)


def stamp(checkpoint: Checkpoint, version: int, fence: int, now: datetime) -> Checkpoint:
    """The checkpoint as the change writes it: its new version, the writer's fence, the time."""
    return checkpoint.model_copy(
        update={
            "versions": checkpoint.versions.model_copy(update={"state_version": version}),
            "execution": checkpoint.execution.model_copy(update={"fence": fence}),
            "updated_at": now,
        }
    )


def wait_writes(cp: Checkpoint | None) -> list[tuple[Any, ...]]:
    """Each pending wait's deadline (for the timer) and correlation id (for inbound). Idempotent,
    and harmless with no change behind them: the timer's wake finds nothing due, and a reply to a
    correlation id the task does not wait on is refused."""
    writes: list[tuple[Any, ...]] = []
    if cp is None:
        return writes
    for wait in cp.execution.pending_waits:
        due_ms = int(wait.deadline.timestamp() * 1000)
        writes.append(("ZADD", keys.DEADLINES, due_ms, f"{cp.task_id}|{due_ms}"))
        writes.append(
            ("SET", keys.corr(wait.correlation_id), keys.corr_value(cp.security.tenant, cp.task_id))
        )
    return writes
