"""An approval is an object: what was approved (object, version, digest), by whom, scope, expiry."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any, ClassVar

import orjson

from wakeful.schemas.base import Record, migration


class Approval(Record):
    KIND: ClassVar[str] = "approval"
    SCHEMA: ClassVar[int] = 2
    schema_version: int = SCHEMA

    object: str  # what kind of thing was approved: the task's workflow, by name
    object_version: int  # the task version the approval is bound to
    object_digest: str  # sha256 of the approved terms; any change voids the approval
    approver_ref: str
    scope: str  # the action it permits: the workflow's approval_scope, else "<workflow>.execute"
    expires_at: datetime
    single_use: bool = True
    consumed: bool = False
    # Under a workflow's Plan (workflow/plans.py): the covered tools already run under it, and the
    # sum of their `total` argument so far.
    used: tuple[str, ...] = ()
    spent: int = 0
    # A quorum's other approvers (Wait.count above 1), each a different person; approver_ref is the
    # one whose approval completed it.
    co_approvers: tuple[str, ...] = ()

    def binds(self, version: int, digest: str) -> bool:
        return self.object_version == version and self.object_digest == digest

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at


def terms_digest(**terms: object) -> str:
    """A stable digest of the terms being approved (sorted keys, orjson)."""
    return hashlib.sha256(orjson.dumps(terms, option=orjson.OPT_SORT_KEYS)).hexdigest()


@migration(Approval.KIND, 1)
def _approval_v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    return {**data, "co_approvers": []}  # v1 approvals were one approver's
