"""An effect's chain of custody, checked from a task's wakeful.log messages and the public keys
alone (D72). Pure: no Kafka, no Redis, no secret.

The links, each named where it breaks (which message partition:offset, which record, why):
  1. every message holding the task's records carries the relay's Ed25519 log signature, by an
     exported key, and its bytes are those signed (an edited record is named by itself);
  2. the task's changes run 1..N with no version missing, and no record id holds two records;
  3. the change that started the task, and every change that applied an outside event, carry that
     signed event, and it verifies against its signer's exported public key (an HMAC signer cannot
     be checked offline: said, never passed);
  4. every op key of the action log is closed by a change, or is the task's last step, in flight;
  5. every effect (a close carrying its proposal) names the policy and tool catalog in force, its
     action log records the call the proposal made, and the approval it ran under is bound by a
     verified approval event of its approver, to the task version the effect ran at.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from wakeful.core import log_signing
from wakeful.core.errors import DecodeError
from wakeful.operate.audit.file import Logged, PublicKeys
from wakeful.operate.audit.links import (
    CLOSE,
    Found,
    Problem,
    actions_closed,
    effect_of,
    event_link,
    unproven,
)
from wakeful.schemas import events
from wakeful.schemas.changelog import ActionRecord, QuarantineRecord
from wakeful.schemas.logs import (
    ACTION_FIELD,
    LOG_BATCH_HEAD,
    LOG_BATCH_TAIL,
    PURGE_FIELD,
    QUARANTINE_FIELD,
    OutboxRecord,
)


@dataclass
class Audit:
    task_id: str
    messages: int = 0
    changes: list[dict[str, Any]] = field(default_factory=list)
    started: dict[str, Any] | None = None
    approvals: list[dict[str, Any]] = field(default_factory=list)
    effects: list[dict[str, Any]] = field(default_factory=list)
    in_flight: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return bool(self.changes) and not self.problems

    def doc(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "verified": self.verified,
            "messages": self.messages,
            "changes": len(self.changes),
            "started": self.started,
            "approvals": self.approvals,
            "effects": self.effects,
            "in_flight": self.in_flight,
            "problems": [{"where": p.where, "record": p.record, "why": p.why} for p in self.problems],
        }


def audit(task_id: str, messages: Iterable[Logged], keys: PublicKeys) -> Audit:
    """Every link of the task's chain checked; `problems` names each that does not hold."""
    out = Audit(task_id)
    found = Found()
    # In the log's own order, whatever order a file gives: a task's records are in one partition,
    # by offset. The same offset twice is a file that was tampered with, not the relay at work.
    ordered = sorted(messages, key=lambda m: (m.partition, m.offset))
    if not ordered:
        said = (
            f"the log given holds no message of task {task_id}: an empty or partial export, or another task's"
        )
        out.problems.append(Problem("", "", said))
        return out
    for m, after in zip(ordered, [*ordered[1:], None], strict=True):
        if after is not None and (after.partition, after.offset) == (m.partition, m.offset):
            out.problems.append(Problem(m.where, "", "the log given holds this message's offset twice"))
        out.messages += 1
        _read(task_id, m, keys, found, out.problems)
    if not found.changes:
        out.problems.append(Problem("", "", f"the log holds no change of task {task_id}"))
        return out
    versions = sorted(found.changes)
    expected = list(range(1, versions[-1] + 1))
    for missing in sorted(set(expected) - set(versions)):
        out.problems.append(
            Problem("", f"{task_id}:{missing}", f"change version {missing} is missing from the log")
        )
    for v in versions:
        record, where = found.changes[v]
        out.changes.append(
            {"version": v, "where": where, "message_id": record.message_id, "stage": record.stage}
        )
        before = found.changes.get(v - 1)
        link = event_link(record, where, keys, before[0] if before else None)
        out.problems += [Problem(where, record.record_id, why) for why in link.problems]
        if link.event is not None:
            found.events[v] = link.event
        if v == 1:
            if link.event is None or link.event.get("kind") != events.CREATE:
                out.problems.append(
                    Problem(where, record.record_id, "the task's first change carries no signed create event")
                )
            out.started = link.event
        if record.approval is not None:
            out.approvals.append(
                {"version": v, "where": where, "bound": record.approval.model_dump(), "event": link.event}
            )
    _, in_flight, unclosed = actions_closed(found)
    out.in_flight = in_flight
    out.problems += [Problem(where, rid, why) for where, rid, why in unclosed]
    _effects(out, found, keys)
    return out


def _effects(out: Audit, found: Found, keys: PublicKeys) -> None:
    """Each effect, from the close that carried it out, in version order."""
    for v in sorted(found.changes):
        record, where = found.changes[v]
        if record.proposal is not None:
            effect, problems = effect_of(record, where, found, keys)
        elif record.message_id.startswith(CLOSE):
            effect, gap = unproven(record, where, found)
            problems = [gap]
        else:
            continue
        out.effects.append(effect)
        out.problems += [Problem(where, record.record_id, why) for why in problems]


_RECORD_ID = re.compile(rb'"record_id":"([^"]{1,400})"')


def _read(task_id: str, m: Logged, keys: PublicKeys, found: Found, problems: list[Problem]) -> None:
    """The task's records of one message, each taken only from the exact bytes the log signature
    vouches for: a record added to a signed message, or one edited in it, is never read as the
    task's, and a changed message that names the task is a problem for it."""
    checked = log_signing.check(keys.log_keys, m.topic, m.value, m.headers, (LOG_BATCH_HEAD, LOG_BATCH_TAIL))
    named = f'"task_id":"{task_id}"'.encode()
    if checked.reason is not None and not checked.changed:  # the signature itself does not hold
        if named in m.value:
            problems.append(Problem(m.where, task_id, checked.reason))
        return
    if checked.changed and named in m.value:
        # A changed message that holds the task's records cannot vouch that none of them went: a
        # record taken away leaves only its digest in the index, which names no task.
        at = ", ".join(str(i) for i in checked.changed)
        why = f"a record of the message (at {at}) was edited, added or taken away: {checked.reason}"
        ids = [
            i.decode() for i in _RECORD_ID.findall(checked.unvouched) if i.decode().startswith(f"{task_id}:")
        ]
        problems += [Problem(m.where, rid, why) for rid in ids or [task_id]]
    for _, raw in checked.vouched:
        try:
            item = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            problems.append(Problem(m.where, "", f"a signed record is not JSON: {exc}"))
            continue
        if isinstance(item, dict) and item.get("task_id") == task_id and PURGE_FIELD not in item:
            found.add(_decoded(item), m.where, problems)  # a tombstone (D73) is no link of the chain


def _decoded(item: dict[str, Any]) -> OutboxRecord | ActionRecord | QuarantineRecord | str:
    kind: type[OutboxRecord | ActionRecord | QuarantineRecord] = OutboxRecord
    if ACTION_FIELD in item:
        kind = ActionRecord
    elif QUARANTINE_FIELD in item:
        kind = QuarantineRecord
    try:
        return kind.decode(orjson.dumps(item))
    except DecodeError as exc:
        return f"{item.get('record_id', '?')}: unreadable record: {exc.reason}"
