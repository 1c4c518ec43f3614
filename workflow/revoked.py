"""A task whose signer was revoked (authority/revocations.py), by the rule its app declares.

The signers a task rests on are the principal that started it and the one that approved it. When
either is revoked, the app's rule applies at the task's next wake and before its next step:
`continue` (the revocation stops the signer's new events at the door, nothing more) or `review`
(the default: the task is parked for a person). A person who reopens the task has looked: the
revocations it was parked for are marked cleared on the task (its external refs,
`revoked-cleared:<principal>` = when the revocation was made), and it goes on; a later revocation
of the same principal parks it again. Pure.
"""

from __future__ import annotations

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
    found = [auth.revoked[p] for p in dict.fromkeys(principals) if p in auth.revoked]
    return [r for r in found if cp.external_refs.get(CLEARED + r.principal) != r.at]


def parks(app: App, cp: Checkpoint, auth: Snapshot) -> str | None:
    """Why the app's rule parks `cp` for a person now, or None (no revoked signer, or `continue`)."""
    if app.revoked_signer == "continue":
        return None
    found = resting_on(cp, auth)
    if not found:
        return None
    return "; ".join(r.said() for r in found) + ": a person must look (`wakeful task reopen` goes on)"


def cleared(cp: Checkpoint, auth: Snapshot) -> Checkpoint:
    """`cp` as a person's reopen leaves it: every revocation it rests on marked seen."""
    marks = {CLEARED + r.principal: r.at for r in resting_on(cp, auth)}
    if not marks:
        return cp
    return cp.model_copy(update={"external_refs": {**cp.external_refs, **marks}})
