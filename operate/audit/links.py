"""The links of an effect's chain of custody, one function each (operate/audit/chain.py puts them
together). Pure: no Kafka, no Redis, no secret."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from wakeful.core import ids
from wakeful.core.errors import DecodeError
from wakeful.operate.audit.file import PublicKeys
from wakeful.schemas import events
from wakeful.schemas.changelog import ActionRecord, QuarantineRecord
from wakeful.schemas.events import SignedEvent
from wakeful.schemas.logs import UNDO_PREFIX, ActionLogEntry, ActionStatus, OutboxRecord

CLOSE, REVIEW = "rt:close:", "rt:review:"


@dataclass(frozen=True)
class Problem:
    """A link that does not hold: where (partition:offset, or "" for the chain as a whole), which
    record, why."""

    where: str
    record: str
    why: str

    def __str__(self) -> str:
        at = f"message {self.where}" if self.where else "chain"
        return f"{at}{f' record {self.record}' if self.record else ''}: {self.why}"


@dataclass
class Found:
    """The task's records that the log signature vouches for, deduplicated by record id, with where
    each was read (partition:offset) and its place in log order."""

    changes: dict[int, tuple[OutboxRecord, str]] = field(default_factory=dict)
    actions: list[tuple[ActionRecord, str, int]] = field(default_factory=list)
    change_at: dict[int, int] = field(default_factory=dict)  # version -> place in log order
    events: dict[int, dict[str, Any]] = field(default_factory=dict)  # version -> its verified event
    seen: dict[str, bytes] = field(default_factory=dict)
    place: int = 0

    def add(
        self, item: OutboxRecord | ActionRecord | QuarantineRecord | str, where: str, problems: list[Problem]
    ) -> None:
        if isinstance(item, str):
            problems.append(Problem(where, item.partition(":")[0], item.partition(": ")[2]))
            return
        self.place += 1
        raw = item.encode()
        if item.record_id in self.seen:  # at-least-once: a republished record is the same bytes
            if self.seen[item.record_id] != raw:
                problems.append(Problem(where, item.record_id, "two different records under one record id"))
            return
        self.seen[item.record_id] = raw
        if isinstance(item, OutboxRecord):
            self.changes[item.state_version] = (item, where)
            self.change_at[item.state_version] = self.place
        elif isinstance(item, ActionRecord):
            self.actions.append((item, where, self.place))


@dataclass
class EventLink:
    event: dict[str, Any] | None = None
    problems: list[str] = field(default_factory=list)


def event_link(
    record: OutboxRecord, where: str, keys: PublicKeys, before: OutboxRecord | None = None
) -> EventLink:
    """The signed event a change applied, verified against its signer's exported public key, and
    tied to this task: it names the task in its signer's namespace, or answers by correlation id a
    wait the task had at the change `before` (an event of another task, carried here, proves
    nothing of this one)."""
    link = EventLink()
    if not record.event:
        if record.message_id.startswith("ev:"):
            link.problems.append(f"change applied outside event {record.message_id} but does not carry it")
        return link
    try:
        event = SignedEvent.decode(record.event.encode())
    except DecodeError as exc:
        link.problems.append(f"its signed event is unreadable: {exc.reason}")
        return link
    signer = keys.signers.get(event.key_id)
    shown: dict[str, Any] = {
        "event_id": event.event_id,
        "kind": event.kind,
        "key_id": event.key_id,
        "issued_at": event.issued_at.isoformat(),
        "payload": event.payload,
        "signature": event.signature,
        "principal": signer.principal if signer else None,
    }
    link.event = shown
    if record.message_id != f"ev:{event.key_id}:{event.event_id}":
        link.problems.append(f"carries event {event.event_id} of key {event.key_id}, not {record.message_id}")
    if signer is None:
        shown["verified"] = "unknown signer"
        link.problems.append(
            f"event {event.event_id} is signed by key {event.key_id}, which the exported keys do not hold"
        )
        return link
    key = signer.verify_key()
    if key is None:
        shown["verified"] = "hmac: not verifiable offline"
        link.problems.append(
            f"event {event.event_id} is signed by HMAC key {event.key_id}: a shared secret, no public "
            "key can verify it offline"
        )
        return link
    if not key.verify(event):
        shown["verified"] = "bad signature"
        link.problems.append(f"event {event.event_id}'s signature does not verify with key {event.key_id}")
        return link
    shown["verified"] = "ed25519"
    why = _not_this_tasks(event, signer.tenant, record, before)
    if why is not None:
        link.problems.append(why)
    return link


def _not_this_tasks(
    event: SignedEvent, tenant: str, record: OutboxRecord, before: OutboxRecord | None
) -> str | None:
    """Why a verified event is not one of this task's, or None."""
    if event.task_id is not None:
        try:
            named = ids.task_in(tenant, event.task_id)
        except ValueError:
            return f"{event.kind} event names no task id ({event.task_id[:80]!r})"
        return (
            None
            if named == record.task_id
            else (f"{event.kind} event names task {event.task_id} of tenant {tenant}, not this task")
        )
    waited = {w.correlation_id for w in before.waits} if before is not None else set()
    if event.correlation_id and event.correlation_id in waited:
        return None
    return f"{event.kind} event answers correlation id {event.correlation_id!r}, not a wait this task had"


def _closer(message_id: str) -> str | None:
    """The op key a change's message id closes: a close's, or a step parked for review."""
    if message_id.startswith(CLOSE):
        return message_id[len(CLOSE) :]
    if message_id.startswith(REVIEW):
        return message_id[len(REVIEW) :].rpartition(":")[0]
    return None


def actions_closed(found: Found) -> tuple[set[str], list[str], list[tuple[str, str, str]]]:
    """(op keys closed by a change, op keys in flight as the task's last step, problems as
    (where, record id, why) for op keys that a later change passed without closing)."""
    closed: set[str] = set()
    for record, _ in found.changes.values():
        op = _closer(record.message_id)
        if op is not None:
            closed.add(op)
        if record.proposal is not None:
            closed.update(record.proposal.more)
    last: dict[str, tuple[ActionRecord, str, int]] = {}
    for entry in found.actions:
        last[entry[0].action.op_key] = entry
    latest_change = max(found.change_at.values(), default=0)
    in_flight: list[str] = []
    problems: list[tuple[str, str, str]] = []
    for op, (action, where, place) in last.items():
        base = op[len(UNDO_PREFIX) :] if op.startswith(UNDO_PREFIX) else op
        if op in closed or base in closed:
            continue
        if place > latest_change:
            in_flight.append(op)
        else:
            status = action.action.status
            problems.append(
                (where, action.record_id, f"op key {op} ({status}) is closed by no change after it")
            )
    return closed, in_flight, problems


def effect_of(
    record: OutboxRecord, where: str, found: Found, keys: PublicKeys
) -> tuple[dict[str, Any], list[str]]:
    """An effect as the close that carried it out shows it, and the links of it that do not hold."""
    trail = record.proposal
    assert trail is not None
    problems: list[str] = []
    entries = [a for a, _, _ in found.actions if a.action.op_key == trail.op_key]
    outcome = entries[-1].action if entries else None
    proposal = {"message_id": trail.message_id, "model": trail.model, "checks": list(trail.checks)}
    if trail.catalog:  # the tool wording the model was shown (D119)
        proposal |= {"catalog": trail.catalog, "refreshed": list(trail.refreshed)}
    if trail.release:  # the release that ran it, whose owners' sign-offs the admin can read (D121)
        proposal |= {"release": trail.release}
    effect = _effect(
        record, where, outcome, op=trail.op_key, tool=trail.tool, args=trail.args,
        task_version=trail.task_version, proposal=proposal,
    )  # fmt: skip
    if not record.policy or not record.tool_catalog:
        problems.append("the close names no policy or tool-catalog version")
    if record.message_id != f"{CLOSE}{trail.op_key}":
        problems.append(f"the close of op key {trail.op_key} has message id {record.message_id}")
    if outcome is None:
        problems.append(f"op key {trail.op_key} has no action-log record")
    else:
        if outcome.status is not ActionStatus.SUCCEEDED:
            problems.append(f"op key {trail.op_key} closed with outcome {outcome.status}")
        intent = entries[0].action
        if intent.tool not in (None, trail.tool) or intent.args not in (None, trail.args):
            problems.append(f"the action log's call under {trail.op_key} is not the proposal's")
    if trail.approval is not None:
        problems += _approval(trail.approval.model_dump(), trail.task_version, record, found, effect=effect)
    return effect, problems


def unproven(record: OutboxRecord, where: str, found: Found) -> tuple[dict[str, Any], str]:
    """A close that carries no proposal (a step settled by its key after a crash: the handling that
    checked its proposal did not live to close it): the effect as its action log shows it, and the
    link that is missing."""
    op = record.message_id[len(CLOSE) :]
    entries = [a.action for a, _, _ in found.actions if a.action.op_key == op]
    outcome = entries[-1] if entries else None
    tool, args = (outcome.tool, outcome.args) if outcome else (None, None)
    effect = _effect(
        record, where, outcome, op=op, tool=tool, args=args, task_version=record.task_version, proposal=None
    )
    return (
        effect,
        f"the close of op key {op} carries no proposal: settled by its key, its checks are not on the log",
    )


def _approval(
    bound: dict[str, Any],
    ran_at: int,
    close: OutboxRecord,
    found: Found,
    *,
    effect: dict[str, Any],
) -> list[str]:
    """The approval an effect ran under: bound by an earlier change that applied a verified approval
    event of its approver, for the task version the effect ran at."""
    binding = [
        (v, r, w)
        for v, (r, w) in found.changes.items()
        if v < close.state_version and r.approval is not None and r.approval.model_dump() == bound
    ]
    if not binding:
        who, version = bound["approver"], bound["version"]
        return [f"the approval it ran under ({who}, version {version}) is bound by no change"]
    v, record, where = binding[-1]
    event = found.events.get(v)
    effect["approval"] = {**bound, "bound_by": {"record": record.record_id, "where": where}, "event": event}
    problems: list[str] = []
    if bound["version"] != ran_at:
        problems.append(f"approval bound to task version {bound['version']}, effect ran at version {ran_at}")
    if event is None or event.get("verified") != "ed25519":
        problems.append(f"the approval's event (record {record.record_id}) does not verify")
        return problems
    if event["kind"] != events.APPROVE:
        problems.append(f"the approval was bound by a {event['kind']} event, not {events.APPROVE}")
    if event["payload"].get("version") != bound["version"]:
        problems.append(
            f"the approval event names version {event['payload'].get('version')}, not {bound['version']}"
        )
    if event["principal"] != bound["approver"]:
        problems.append(
            f"the approval event is signed by {event['principal']}, not the approver {bound['approver']}"
        )
    return problems


def _effect(
    record: OutboxRecord,
    where: str,
    outcome: ActionLogEntry | None,
    *,
    op: str,
    tool: str | None,
    args: dict[str, Any] | None,
    task_version: int,
    proposal: dict[str, Any] | None,
) -> dict[str, Any]:
    """An effect as the audit shows it: the call, the proposal behind it, its close and outcome."""
    return {
        "op_key": op,
        "tool": tool,
        "args": args,
        "task_version": task_version,
        "proposal": proposal,
        "policy": record.policy,
        "tool_catalog": record.tool_catalog,
        "closed_by": {"record": record.record_id, "where": where},
        "fence": outcome.fence if outcome else None,
        "outcome": str(outcome.status) if outcome else None,
        "result": outcome.result if outcome else None,
        "approval": None,
    }
