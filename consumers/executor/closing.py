"""What the executor's close writes, as one value: the task past the turn's calls, the outbox
record's detail, and the action log's records inside the same transaction (D48). writes.py writes
it; nothing here reaches a server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.executor.steps import Ran
from wakeful.core.errors import StaleVersion
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.custody import PROPOSAL_KEY, ApprovalBound, ProposalTrail
from wakeful.schemas.events import Envelope
from wakeful.sdk.app import App
from wakeful.sdk.memory import Remember
from wakeful.state import memory_seal
from wakeful.state.actions import ActionLog
from wakeful.state.seal import Keyring
from wakeful.workflow import batch, memory, release_digest


@dataclass(frozen=True)
class Learned:
    """What one applied call's `done` remembered, and the call's op key: the memory's source."""

    op_key: str
    wishes: tuple[Remember, ...]


@dataclass(frozen=True)
class Closing:
    """What a close writes, built once (`of`) from the task as loaded under the lease. The close's
    compare-and-swap expects that state_version (a task moved since is StaleVersion, and the
    message is retried), and one version is one content: every try of it writes the same."""

    op_key: str  # the first call's: one close per operation
    version: int  # the state_version the turn was applied to
    after: Checkpoint  # the task past the turn's applied calls
    said: Mapping[str, Any]  # the outbox detail, but for what was remembered and the proposal
    learned: tuple[Learned, ...]  # per call applied, in order
    records: tuple[tuple[Any, ...], ...]  # the action log's writes inside the transaction
    trail: ProposalTrail | None  # the proposal it carried out (D72)
    now: datetime

    def moved(self, current: Checkpoint) -> Checkpoint:
        """The change: the turn as applied to the task at `version` (the store raises StaleVersion
        for any other before it asks)."""
        if current.state_version != self.version:
            raise StaleVersion(current.task_id, self.version, current.state_version)
        return self.after

    def also(self, _new: Checkpoint) -> list[tuple[Any, ...]]:
        return list(self.records)


def of(
    app: App,
    actions: ActionLog,
    cp: Checkpoint,
    fence: int,
    turn: Sequence[Ran],
    *,
    record: tuple[Any, ...] | None,
    auth: Snapshot,
    now: datetime,
    trail: ProposalTrail | None = None,
) -> Closing:
    """The close of `turn` (the step that ran, then the read-only calls that shared its turn) on
    `cp`: its calls applied in order while the task goes on (batch.done), what each applied call's
    `done` remembered, and the action log's records: the first call's outcome (`record`: its
    intent was written before it ran), then each read-only call applied, as done (it wrote no
    intent)."""
    ran, more = turn[0], turn[1:]
    learned: list[list[Remember]] = []  # per call applied, filled by batch.done
    after, applied = batch.done(
        app, cp, [(r.tool, r.result, r.args) for r in turn], auth=auth, now=now, learned=learned
    )
    done = [
        command
        for r in more[: applied - 1]
        for command in actions.read_command(
            cp.task_id, tool=r.tool, op_key=r.op_key, result=r.result, args=r.args, fence=fence, now=now
        )
    ]
    said = {
        "done": ran.tool,
        **{k: str(v) for k, v in ran.result.items()},
        **({"more": len(more)} if more else {}),
    }
    return Closing(
        op_key=ran.op_key,
        version=cp.state_version,
        after=after,
        said=said,
        learned=tuple(Learned(r.op_key, tuple(w)) for r, w in zip(turn, learned, strict=False)),
        records=(*([record] if record is not None else []), *done),
        trail=trail,
        now=now,
    )


def detail(app: App, keyring: Keyring, closing: Closing, new: Checkpoint) -> dict[str, Any]:
    """The close's outbox detail on the task as changed (`new`): what the step said, what the
    turn's calls remembered (on a tool's word: the executor writes it, the call's op key is its
    source), and the proposal."""
    groups: list[memory.Group] = [
        (memory.Writer("role:executor", f"op:{said.op_key}"), list(said.wishes), {})
        for said in closing.learned
        if said.wishes
    ]
    taught, refused = memory.all_admitted(
        app.fact_table,
        groups,
        tenant=new.security.tenant,
        task_id=new.task_id,
        state_version=new.state_version,
        now=closing.now,
    )
    # on the outbox record, quarantined and sealed: the relay writes them quarantined,
    # whatever they say (D69), and the read door shows only a sealed record (D93)
    sealed = [memory_seal.sealed(keyring, memory.learned_form(r)) for r in taught]
    kept = {"learned": [r.model_dump(mode="json") for r in sealed]} if sealed else {}
    custody = {PROPOSAL_KEY: closing.trail} if closing.trail is not None else {}
    return dict(closing.said) | kept | ({"forgot": refused} if refused else {}) | custody


def proposal_trail(
    app: App, env: Envelope, model: str, cp: Checkpoint, *, ran: Ran, more: Sequence[Ran]
) -> ProposalTrail:
    """What the close's log record says of the proposal it carried out (D72): its message, its
    model, the call that ran (tool, op key, arguments) at the task's version, the approval in
    force, the op keys of the read-only calls that shared its turn, and the tool wording the model
    was shown: the task's catalog stamp, less the tools the app refreshes (D119)."""
    return ProposalTrail(
        message_id=env.message_id,
        model=model,
        tool=ran.tool,
        op_key=ran.op_key,
        args=dict(ran.args),
        task_version=cp.business.version,
        approval=ApprovalBound.of(cp.business.approval),
        more=tuple(r.op_key for r in more),
        catalog=cp.versions.tool_catalog,
        refreshed=tuple(t for t in app.refresh if t == ran.tool or any(r.tool == t for r in more)),
        release=release_digest.of(app),
    )
