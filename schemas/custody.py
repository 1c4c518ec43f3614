"""What a change's log record carries so that an effect's chain of custody can be checked offline
(D72): the approval a gate change bound, and the proposal an executor's close carried out.

The gate and the executor say these through the change's detail, under the keys below;
state/last_step.py lifts them out of the detail into the record's own fields (OutboxRecord
`event`, `approval`, `proposal`), beside the policy and tool-catalog stamps it copies from the
checkpoint.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from wakeful.schemas.approval import Approval
from wakeful.schemas.base import Record

# Detail keys lifted into the record's fields (never written into `detail` itself).
EVENT_KEY = "_signed_event"  # the signed event's JSON text, exactly as the door received it
APPROVAL_KEY = "_approval"  # an ApprovalBound
PROPOSAL_KEY = "_proposal"  # a ProposalTrail

# The checks a proposal passed before its intent was written, in the order the executor runs them
# (consumers/executor/main.py). Names, never change: `wakeful audit` shows them.
CHECKS = (
    "freeze",  # no freeze held the task, its tenant or its app
    "signers not revoked",  # no signer the task rests on was revoked
    "gate 4 compatibility",  # workflow, policy and tool catalog as the task was admitted to
    "proposal checks",  # the workflow's check of the proposal (stage, tool, arguments, approval)
    "policy decision",  # the Cedar policy, read live, allowed it (inside the proposal checks)
    "tool switch",  # the tool was not switched off
)


class ApprovalBound(Record):
    """An approval as a change bound it: the task version and the digest of the terms approved,
    by whom, for what scope."""

    KIND: ClassVar[str] = "approval_bound"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = Field(default=1, exclude=True)

    version: int
    digest: str
    approver: str
    scope: str

    @classmethod
    def of(cls, approval: Approval | None) -> ApprovalBound | None:
        if approval is None:
            return None
        return cls(
            version=approval.object_version,
            digest=approval.object_digest,
            approver=approval.approver_ref,
            scope=approval.scope,
        )


class ProposalTrail(Record):
    """The proposal an executor's close carried out: which message, which model, the call it made
    (tool, arguments, op key) at which task version, under which approval, after which checks."""

    KIND: ClassVar[str] = "proposal_trail"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = Field(default=1, exclude=True)

    message_id: str  # of the proposal on wakeful.proposals
    model: str  # the model that produced it, as the proposer named it
    tool: str
    op_key: str
    args: dict[str, Any]
    task_version: int  # the business version the effect ran at
    approval: ApprovalBound | None = None  # the approval in force when it ran
    checks: tuple[str, ...] = CHECKS
    more: tuple[str, ...] = ()  # op keys of the read-only calls that shared its turn (D68)
    # The task's tool catalog stamp when it was asked: its wording part names the descriptions the
    # model was shown (D119), less the tools its app refreshed (`refreshed`). "" before D119.
    catalog: str = ""
    refreshed: tuple[str, ...] = ()
    release: str = ""  # the digest of the release the executor ran, its owners' sign-offs' (D121)
