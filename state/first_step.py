"""A change's first step, as commands: WATCH the task's keys and read them, and ask whether a
message id was applied; and what their replies say.

`Store.transition` and `Store.create` send it themselves unless the caller did. A caller with reads
of its own to make first (the gate: the live authority, the evidence) sends `reads()` in its batch on
the task's connection and hands the replies over as `first=` (docs/decisions.md D43). One WATCH
names the four keys and one MGET reads three of them: the roles' ACL grants both by selectors of
their own (state/acl.py, D45).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from wakeful.state import keys

WATCHED = 3  # commands in watch()
READS = WATCHED + 1  # commands in reads(): watch() and seen()


def watch(task_id: str) -> list[tuple[Any, ...]]:
    """The first step, less its inbox check: WATCH the task's keys, then read them."""
    state, ctr, lease, quarantine = (
        keys.state(task_id),
        keys.ctr(task_id),
        keys.lease(task_id),
        keys.quarantine(task_id),
    )
    return [
        ("WATCH", state, ctr, lease, quarantine),
        ("MGET", state, lease, quarantine),
        ("XREVRANGE", ctr, "+", "-", "COUNT", 1),
    ]


def seen(task_id: str, message_id: str) -> tuple[Any, ...]:
    """Whether `message_id` was applied. Sent any time after watch(): a change that applies it also
    writes the WATCHed state, so the EXEC of a change judged on a stale answer is refused."""
    return ("SISMEMBER", keys.inbox(task_id), message_id)


def reads(task_id: str, message_id: str) -> list[tuple[Any, ...]]:
    """The whole first step: watch(), then seen(). Their replies, as `first`, spare the change
    this round trip."""
    return [*watch(task_id), seen(task_id, message_id)]


def watched(replies: Sequence[Any]) -> tuple[Any, Any, Any, Any]:
    """(state blob, last ctr entry, lease holder, quarantine marker) from the replies to watch()."""
    (blob, held, marker), ctr = replies[1], replies[2]
    return blob, ctr, held, marker


def applied(replies: Sequence[Any]) -> bool:
    """Whether the message id asked about in reads() was applied, from its replies."""
    return bool(replies[WATCHED])
