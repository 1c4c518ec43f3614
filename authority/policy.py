"""The one authorization seam: `authorize(principal, action, resource, context)`.

Every allow/deny in the pipeline is decided here, by code, from a live Snapshot. A policy engine
replaces this function later without touching its callers. No memory record and no model output
reaches it: its inputs are the verified signer principal, the action, the task and the snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from wakeful.authority.snapshot import Snapshot


@dataclass(frozen=True)
class Authorization:
    """What authorize() says: allowed, or not and why."""

    allowed: bool
    reason: str = ""


ALLOW = Authorization(True)


def authorize(principal: str, action: str, resource: dict[str, Any], context: Snapshot) -> Authorization:
    """May `principal` do `action` to `resource` (a task's public fields) under this snapshot?"""
    if action == "approve":
        if principal not in context.approvers:
            return Authorization(False, "not an authorised approver")
        if principal == resource.get("requester"):
            return Authorization(False, "a requester cannot approve their own refund")
        return ALLOW
    if action in ("create", "amend", "run", "reopen"):
        return ALLOW  # the signer's key is registered for this event kind (checked at the door)
    if action == "refund":
        amount = resource.get("amount")
        if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
            return Authorization(False, f"a refund needs a positive whole amount, got {amount!r}")
        if amount <= context.limit:
            return ALLOW
        approver = resource.get("approver")
        if approver is None:
            return Authorization(False, f"a refund of {amount} needs an approval (limit {context.limit})")
        if approver not in context.approvers:
            return Authorization(False, f"approver {approver} is no longer authorised")
        if approver == resource.get("requester"):
            return Authorization(False, "a requester cannot approve their own refund")
        return ALLOW
    return Authorization(False, f"unknown action {action!r}")
