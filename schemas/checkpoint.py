"""The checkpoint: one task's Progress, in five layers. Written only by gate and executor code.

| layer      | holds                                                                     |
|------------|---------------------------------------------------------------------------|
| business   | stage, task version, amount, approval, last refusal                       |
| execution  | pending waits, attempts, highest fencing token that wrote the state       |
| external   | references into other systems (ledger entry ids, ...)                     |
| security   | tenant and principal *reference* (never credentials)                      |
| versions   | schema, policy, tool catalog, agent id, state_version                     |
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, ClassVar

from pydantic import Field, field_validator

from wakeful.schemas.approval import Approval
from wakeful.schemas.base import Record, migration
from wakeful.schemas.stage import Stage
from wakeful.state import keys

# Task ids appear inside Redis key names and ACL patterns: the one alphabet state/keys.py defines.
TASK_ID = re.compile(keys.TASK_ID)


class Layer(Record):
    """Layers are nested records; they carry no schema version of their own."""

    KIND: ClassVar[str] = "layer"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = Field(default=1, exclude=True)


class PendingWait(Layer):
    wait_for: str  # e.g. "approval"
    correlation_id: str
    bound_to_version: int
    allowed_signers: tuple[str, ...]
    deadline: datetime
    on_deadline: str  # e.g. "escalate:ops-lead" or "expire"


class BusinessState(Layer):
    workflow: str = "refund"
    stage: Stage
    version: int = 1  # the task version: amendments bump it and void approvals
    amount: int  # minor units
    currency: str = "EUR"
    note_ref: str | None = None  # evidence reference; the note itself is untrusted evidence
    approval: Approval | None = None
    last_refusal: str | None = None


class ExecutionState(Layer):
    pending_waits: tuple[PendingWait, ...] = ()
    attempts: int = 0
    fence: int = 0  # highest lease fencing token that wrote this state


class SecurityScope(Layer):
    tenant: str
    principal_ref: str


class VersionStamps(Layer):
    schema_: int = Field(alias="schema", default=2)
    policy: str
    tool_catalog: str
    agent_id: str
    state_version: int = Field(ge=0, lt=2**63)


class Checkpoint(Record):
    KIND: ClassVar[str] = "checkpoint"
    SCHEMA: ClassVar[int] = 2
    schema_version: int = SCHEMA

    task_id: str
    business: BusinessState
    execution: ExecutionState = ExecutionState()
    external_refs: dict[str, str] = Field(default_factory=dict)
    security: SecurityScope
    versions: VersionStamps
    updated_at: datetime

    @field_validator("task_id")
    @classmethod
    def _safe_task_id(cls, value: str) -> str:
        if not TASK_ID.fullmatch(value):
            raise ValueError("task ids are 1-64 characters of A-Z a-z 0-9 _ -")
        return value

    @property
    def stage(self) -> Stage:
        return self.business.stage

    @property
    def state_version(self) -> int:
        return self.versions.state_version


@migration("checkpoint", 1)
def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v1 kept the principal itself in the security layer; v2 keeps only a reference to it."""
    security = dict(data.get("security", {}))
    if "principal" in security:
        security["principal_ref"] = f"principal:{security.pop('principal')}"
    data["security"] = security
    versions = dict(data.get("versions", {}))
    versions["schema"] = 2
    data["versions"] = versions
    return data
