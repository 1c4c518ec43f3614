"""Who signs on a local stack (`wakeful authority init`), and which event kinds each may send.

Today's dev signers, narrowed to the kinds the loaded app knows, and widened by what its workflows
accept: an `Accept` signed by the requester (or anyone) is sent by the dev requester, one signed by
the approvers by the dev approvers, one naming `principal:<name>` by a dev signer of that name.
"""

from __future__ import annotations

from wakeful.schemas import events
from wakeful.sdk.app import App
from wakeful.sdk.workflow import ANYONE, APPROVERS
from wakeful.sdk.workflow import REQUESTER as REQUESTER_ROLE

# The dev requester of every app; the bundled example's name, kept for existing keystores and tests.
REQUESTER = "svc-refunds"
DEFAULT_APPROVERS = ("alice", "bob")
DEV_SIGNERS: dict[str, tuple[str, ...]] = {
    REQUESTER: (events.CREATE, events.AMEND, events.RUN, events.CANCEL),
    "alice": (events.APPROVE,),
    "bob": (events.APPROVE,),
    "mallory": (events.APPROVE,),  # a registered signer who is not an approver
    "ops-lead": (events.REOPEN, events.CANCEL),  # the person deadlines escalate to
    "ops-oncall": (events.REPLAY,),  # the operator who replays dead letters (`wakeful dlq replay`)
    "scheduler": (events.CREATE,),  # signs every schedule's ticks, in the timers (`wakeful schedule`)
}
PRINCIPAL = "principal:"


def dev_signers(app: App) -> dict[str, frozenset[str]]:
    """Every dev signer `app` needs -> the kinds it may send (all of them kinds the app knows)."""
    wanted = {principal: set(kinds) & app.kinds for principal, kinds in DEV_SIGNERS.items()}
    for wf in app.workflows:
        for kind, accept in wf.events.items():
            for who in accept.signers:
                if who in (REQUESTER_ROLE, ANYONE):
                    wanted[REQUESTER].add(kind)
                elif who == APPROVERS:
                    for approver in DEFAULT_APPROVERS:
                        wanted[approver].add(kind)
                elif who.startswith(PRINCIPAL) and who != PRINCIPAL:
                    wanted.setdefault(who.removeprefix(PRINCIPAL), set()).add(kind)
    return {principal: frozenset(kinds) for principal, kinds in wanted.items() if kinds}
