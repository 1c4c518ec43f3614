"""What a wake's round trip reads beside its task and the live authority, asked and answered by
name (wake.authenticate): an optional read added or left out shifts no other's reply."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from wakeful.consumers.gate import rules as gate_rules
from wakeful.schemas.events import SignedEvent
from wakeful.state import keys
from wakeful.state.pinned import Command
from wakeful.state.replies import named

Asked = Sequence[tuple[str, Command]]


@dataclass(frozen=True)
class Got:
    """The replies, by the name each read was asked by; None for a read not asked."""

    evidence: Any  # the task's evidence (HGETALL)
    held: Any  # how many wakes a freeze held for the task (LLEN)
    signer: Any = None  # the event's signer record: read for an event wake only
    receipt: Any = None  # the event's receipt, if it was decided before
    ops: Any = None  # the task's action log: for an event gate_rules.needs_started()
    replay_signer: Any = None  # the signer record of an operator's replay the wake carries (D71)


def asked(task_id: str, event: SignedEvent | None, replay: SignedEvent | None) -> list[tuple[str, Command]]:
    """The reads, by name, for a wake of `task_id` that carries `event` (None: a deadline) and
    `replay`. The event's are claims: nothing read for it is trusted before it verifies."""
    reads: list[tuple[str, Command]] = [
        ("evidence", ("HGETALL", keys.evidence(task_id))),
        ("held", ("LLEN", keys.held(task_id))),
    ]
    if event is None:
        return reads
    reads += [
        ("signer", ("HGET", keys.AUTH_SIGNERS, event.key_id)),
        ("receipt", ("GET", keys.receipt(event.event_id, task_id, key_id=event.key_id))),
    ]
    if gate_rules.needs_started(event.kind):
        reads.append(("ops", ("HGETALL", keys.ops(task_id))))
    if replay is not None:
        reads.append(("replay_signer", ("HGET", keys.AUTH_SIGNERS, replay.key_id)))
    return reads


def commands(reads: Asked) -> list[Command]:
    """The reads' commands, in the order asked, for the batch."""
    return [command for _, command in reads]


def got(reads: Asked, replies: Sequence[Any]) -> Got:
    """The replies to `reads` (the batch's tail, as long as `reads`), by name."""
    return Got(**named(reads, replies))
