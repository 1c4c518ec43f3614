"""A task whose signer was revoked (authority/revocations.py), by the rule its app declares.

The signers a task rests on are the principal that started it and the one that approved it (of
the task's tenant). When either is revoked, the app's rule applies at the task's next wake and
before its next step: `continue` (the revocation stops the signer's new events at the door,
nothing more) or `review` (the default: the task is parked for a person). A person who reopens the
task has looked: the revocations it was parked for (its last refusal names them) are marked
cleared on the task (its external refs, `revoked-cleared:<principal>` = when the revocation was
made), and it goes on; a revocation it was not parked for, or a later one of the same principal,
parks it again. Pure.
"""

from __future__ import annotations

from wakeful.authority import revocations
from wakeful.authority.revocations import Revocation
from wakeful.authority.snapshot import Snapshot
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.workflow import engine

CLEARED = "revoked-cleared:"


def resting_on(cp: Checkpoint, auth: Snapshot) -> list[Revocation]:
    """The revocations of the signers `cp` rests on that a person has not cleared on it."""
    approval = cp.business.approval
    principals = [engine.requester(cp)] + ([approval.approver_ref] if approval is not None else [])
    named = [revocations.name(cp.security.tenant, p) for p in dict.fromkeys(principals)]
    found = [auth.revoked[n] for n in named if n in auth.revoked]
    return [r for r in found if cp.external_refs.get(CLEARED + r.principal) != r.at]


def parks(app: App, cp: Checkpoint, auth: Snapshot) -> str | None:
    """Why the app's rule parks `cp` for a person now, or None (no revoked signer, or `continue`)."""
    if app.revoked_signer == "continue":
        return None
    found = resting_on(cp, auth)
    if not found:
        return None
    return "; ".join(r.said() for r in found) + ": a person must look (`wakeful task reopen` goes on)"


def cleared(parked: Checkpoint, reopened: Checkpoint, auth: Snapshot) -> Checkpoint:
    """`reopened` as a person's reopen of `parked` leaves it: each revocation the task was parked
    for (its last refusal names it) marked seen. One it was not parked for was not looked at: it
    parks the task again at its next wake."""
    said = parked.business.last_refusal or ""
    marks = {CLEARED + r.principal: r.at for r in resting_on(parked, auth) if r.said() in said}
    if not marks:
        return reopened
    return reopened.model_copy(update={"external_refs": {**reopened.external_refs, **marks}})
