"""A second app, small on purpose: a contract that waits for a notary's own event kind.

The CLI's tests load it with `--app contract_app:app` (tests/ on the path) to show that the commands
follow whatever app they are given, not the bundled refund.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from wakeful.schemas.checkpoint import BusinessState, Checkpoint, SecurityScope, VersionStamps
from wakeful.sdk import CLOSED, Accept, App, Context, Effect, Next, Refuse, Review, Start, Workflow

SIGNED = "signature.completed"
NOTARY = "notary"


class Contract(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    title: str


def start(s: Start) -> Next[Contract] | Refuse:
    title = s.payload.get("title")
    if not isinstance(title, str) or not title:
        return Refuse("a contract needs a title")
    return Next("awaiting_signature", Contract(title=title))


def signed(ctx: Context[Contract]) -> Next[Contract] | Refuse | Review | None:
    return Next(CLOSED) if ctx.stage == "awaiting_signature" else Refuse(f"contract is {ctx.stage}")


def check(ctx: Context[Contract], effect: Effect) -> Effect | Refuse | Review:
    return Refuse("a contract runs no tool")


def done(ctx: Context[Contract], tool: str, result: Mapping[str, Any]) -> Next[Contract] | Review:
    return Review(f"a contract runs no tool, yet {tool} finished")


contract = Workflow(
    name="contract",
    version=1,
    state=Contract,
    stages={"received": ("awaiting_signature",), "awaiting_signature": (CLOSED,)},
    start=start,
    check=check,
    done=done,
    events={SIGNED: Accept(signed, signers=(f"principal:{NOTARY}",))},
)

app = App(name="contract", workflows=[contract])


def sleeping(catalog: str, data: dict[str, Any] | None = None, version: int = 1) -> Checkpoint:
    """A contract of workflow version `version` waiting for its signature, stamped with `catalog`."""
    return Checkpoint(
        task_id="t-1",
        business=BusinessState(
            workflow="contract",
            workflow_version=version,
            stage="awaiting_signature",
            data=data or {"title": "lease"},
        ),
        security=SecurityScope(tenant="default", principal_ref="principal:svc"),
        versions=VersionStamps(
            policy="p-1", tool_catalog=catalog, agent_id="contract-agent", state_version=2
        ),
        updated_at=datetime(2026, 3, 1, tzinfo=UTC),
    )
