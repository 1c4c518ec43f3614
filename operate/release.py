"""`wakeful task release`: a person lets a task gate 4 parked go on, after a look.

Only an operator may: a principal the authority store holds a signer key for that may send
task.reopen (the operator's event kind), of the task's own tenant. The release itself is
workflow/compat.release_to (pure), written by state/parked.release in one compare-and-swap that
also lifts the marker; the record of who released it, why, and what moved goes onto the task's
history (its outbox record, on wakeful.log) with that change.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from wakeful.authority.snapshot import Snapshot
from wakeful.core.errors import ConfigError
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.state import keys, parked
from wakeful.state.store import Store
from wakeful.workflow import compat

OPERATOR_KIND = events.REOPEN  # a signer that may send it is an operator's


def operators(auth: Snapshot) -> dict[str, frozenset[str]]:
    """principal -> the tenants it is an operator of (signers read with the snapshot)."""
    found: dict[str, set[str]] = {}
    for key_id, key in auth.signers.items():
        if OPERATOR_KIND in auth.signer_kinds.get(key_id, frozenset()):
            found.setdefault(key.principal, set()).add(key.tenant)
    return {p: frozenset(t) for p, t in found.items()}


def release(
    store: Store, app: App, auth: Snapshot, task_id: str, *, to_version: int, by: str, reason: str
) -> Checkpoint:
    """Release the quarantined task `task_id` to workflow version `to_version`, as `by` for `reason`.
    Raises ConfigError (who or why is missing or not allowed) or parked.NotReleasable (the task
    cannot be released as asked, and why), with nothing written."""
    if not reason.strip():
        raise ConfigError("--reason", "say why the task may go on; the reason is kept in its history")
    tenants = operators(auth).get(by)
    if not tenants:
        raise ConfigError(
            "--by",
            f"{by!r} is not an operator: no signer key of {by!r} may send {OPERATOR_KIND} "
            f"(operators: {', '.join(sorted(operators(auth))) or 'none'})",
        )

    def released(cp: Checkpoint) -> Checkpoint:
        if cp.security.tenant not in tenants:
            raise parked.NotReleasable(
                f"{by} is no operator of tenant {cp.security.tenant}, whose task this is"
            )
        moved = compat.release_to(app, cp, to_version, auth)
        if isinstance(moved, str):
            raise parked.NotReleasable(moved)
        return moved

    def detail(old: Checkpoint, new: Checkpoint) -> dict[str, Any]:
        return {
            "event": "release",
            "by": by,
            "reason": reason,
            "at": datetime.now(UTC).isoformat(),
            "released": compat.restamped(old, new),
        }

    done = parked.release(store, task_id, released, detail).checkpoint
    # Wake it now (a deadline due now, through the timer): a task that waits for nothing (a stage
    # that offers a tool) has no event or deadline coming to ask for its next step.
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    store.client.zadd(keys.DEADLINES, {f"{task_id}|{now_ms}": now_ms})
    return done
