"""The checkpoint: one task's Progress, in five layers. Written only by gate and executor code.

| layer      | holds                                                                     |
|------------|---------------------------------------------------------------------------|
| business   | workflow, stage, task version, the app's own fields, approval, last refusal |
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

from wakeful.core import ids
from wakeful.schemas.approval import Approval
from wakeful.schemas.base import Record, migration

# Task ids appear inside Redis key names and ACL patterns: the one alphabet core/ids.py defines.
TASK_ID = re.compile(ids.TASK_ID)
STAGE = re.compile(r"[a-z][a-z0-9_]{0,39}")


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
    then: str | None = None  # an approval wait: the stage the task moves to once approved
    count: int = 1  # an approval wait: how many different approvers must approve (a quorum)
    counted: tuple[str, ...] = ()  # the approvers counted so far, each once, at bound_to_version
    # One of a group of waits (Next.waits): the group moves on once `need` of its `of` waits are
    # answered; 0 for a wait of its own.
    need: int = 0
    of: int = 0


class BusinessState(Layer):
    # The bundled example's workflow: kept as the default that records and callers naming none have had.
    workflow: str = "refund"
    workflow_version: int = 1
    stage: str
    version: int = 1  # the task version: amendments bump it and void approvals
    data: dict[str, Any] = Field(default_factory=dict)  # the workflow's own state model, as JSON
    evidence: tuple[str, ...] = ()  # names of the documents kept as untrusted evidence
    approval: Approval | None = None
    last_refusal: str | None = None

    @field_validator("stage")
    @classmethod
    def _known_shape(cls, value: str) -> str:
        if not STAGE.fullmatch(value):
            raise ValueError("stages are 1-40 characters of a-z 0-9 _, starting with a letter")
        return value


class StepResult(Layer):
    """A tool call this stage visit already made, as the model is shown it at the next proposal."""

    tool: str
    op_key: str
    args: dict[str, Any] = Field(default_factory=dict)
    result: dict[str, str] = Field(default_factory=dict)  # each value cut to RESULT_CHARS
    trust: str = "untrusted"  # the tool's output_trust


class ExecutionState(Layer):
    pending_waits: tuple[PendingWait, ...] = ()
    attempts: int = 0  # proposals refused in a row at this stage (workflow/effects.refused, D62)
    fence: int = 0  # highest lease fencing token that wrote this state
    step: int = Field(default=0, ge=0)  # tool calls made at this stage visit: the next one's number
    results: tuple[StepResult, ...] = ()  # the latest of them, oldest first (workflow/steps.py)


class SecurityScope(Layer):
    tenant: str
    principal_ref: str


class VersionStamps(Layer):
    schema_: int = Field(alias="schema", default=5)
    policy: str
    tool_catalog: str
    agent_id: str
    state_version: int = Field(ge=0, lt=2**63)


class Checkpoint(Record):
    KIND: ClassVar[str] = "checkpoint"
    SCHEMA: ClassVar[int] = 5
    schema_version: int = SCHEMA

    task_id: str
    business: BusinessState
    execution: ExecutionState = ExecutionState()
    external_refs: dict[str, str] = Field(default_factory=dict)
    security: SecurityScope
    versions: VersionStamps
    updated_at: datetime
    created_at: datetime | None = None  # the create's time (D107); None: a task made before schema 5

    @field_validator("task_id")
    @classmethod
    def _safe_task_id(cls, value: str) -> str:
        if not TASK_ID.fullmatch(value):
            raise ValueError(f"a task id must match {ids.TASK_ID}: a tenant's own id after its name")
        return value

    @property
    def stage(self) -> str:
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


# The bundled example app's tool catalog when checkpoints were v2 (the one app then), stamped by name
# ("catalog-1"); now a catalog is the digest of an app's tool descriptions (sdk.tools.catalog). The
# constant keeps its name, which tests import.
REFUND_CATALOG_V2 = "catalog-828ae75b10b1a7a6"


@migration("checkpoint", 2)
def _v2_to_v3(data: dict[str, Any]) -> dict[str, Any]:
    """v2 held its one workflow's own fields in the business layer; v3 holds any workflow's in `data`."""
    business = dict(data.get("business", {}))
    legacy = {name: business.pop(name) for name in ("amount", "currency") if name in business}
    if legacy:
        legacy.setdefault("currency", "EUR")  # v2's default
    note = business.pop("note_ref", None)
    business["data"] = {**legacy, **business.get("data", {})}
    business["evidence"] = [note.rpartition(":")[2]] if isinstance(note, str) and note else []
    data["business"] = business
    execution = dict(data.get("execution", {}))
    execution["pending_waits"] = [
        {**wait, "then": "ready"} if wait.get("wait_for") == "approval" else wait
        for wait in execution.get("pending_waits", [])
    ]
    data["execution"] = execution
    versions = dict(data.get("versions", {}))
    versions["schema"] = 3
    if versions.get("tool_catalog") == "catalog-1":
        versions["tool_catalog"] = REFUND_CATALOG_V2
    data["versions"] = versions
    return data


@migration("checkpoint", 3)
def _v3_to_v4(data: dict[str, Any]) -> dict[str, Any]:
    """v4 counts the approvers of a quorum on each wait, and groups waits: a v3 wait wanted one
    approver, had counted none, and stood alone."""
    execution = dict(data.get("execution", {}))
    execution["pending_waits"] = [
        {**wait, "count": 1, "counted": [], "need": 0, "of": 0} for wait in execution.get("pending_waits", [])
    ]
    data["execution"] = execution
    versions = dict(data.get("versions", {}))
    versions["schema"] = 4
    data["versions"] = versions
    return data


@migration("checkpoint", 4)
def _v4_to_v5(data: dict[str, Any]) -> dict[str, Any]:
    """v5 keeps when the task was created, for the task index (D107): a v4 task never said."""
    data["created_at"] = None
    versions = dict(data.get("versions", {}))
    versions["schema"] = 5
    data["versions"] = versions
    return data
