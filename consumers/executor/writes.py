"""The executor's writes to its task, on the connection that WATCHes the task since its load
(D43): the close after a step ran, which records the step's outcome inside its transaction (D48)
and wakes a task moved to another stage that offers a tool; and any other change (a refusal, a
step parked for review). After each, a task that no longer occupies a slot of its tenant's
in-flight limit gives it back (D108)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.executor import closing, ruling
from wakeful.consumers.executor.steps import Ran
from wakeful.core import metrics
from wakeful.core.errors import ActionError, StaleVersion
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.core.retry import Retry
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.custody import ProposalTrail
from wakeful.sdk.app import App
from wakeful.sdk.workflow import Refuse, Review
from wakeful.state import checks, fair, keys, last_step
from wakeful.state.actions import ActionLog
from wakeful.state.last_step import Also
from wakeful.state.lease import Held
from wakeful.state.pinned import Pinned
from wakeful.state.store import Change, Detail, Store, Transition
from wakeful.workflow import effects, engine, limits


@dataclass(frozen=True)
class Loaded:
    """A proposal's task as loaded under its lease, WATCHed on `pinned` since (Store.acquire_with)."""

    checkpoint: Checkpoint
    replies: list[Any]  # the action log, then the live authority
    held: Held
    pinned: Pinned
    watched: list[Any]  # the replies to first_step.watch(): a change's first step, less its inbox check


class Writes:
    def __init__(self, store: Store, actions: ActionLog, app: App, log: Log) -> None:
        self.store = store
        self.actions = actions
        self.app = app
        self.log = log

    def close(
        self,
        loaded: Loaded,
        ran: Ran,
        auth: Snapshot,
        first: list[Any] | None = None,
        record: tuple[Any, ...] | None = None,
        *,
        more: Sequence[Ran] = (),
        trail: ProposalTrail | None = None,
    ) -> None:
        """Advance the task past a step that ran (`ran`), and the read-only calls that shared its
        turn (`more`). The lease goes back inside that transaction: nothing is left to do under it
        (D38). `first`: the change's first step, already read (Executor._once); `record`: the
        step's outcome for the action log, written inside the same transaction (D48); `trail`: the
        proposal it carried out, for the log record (D72; None for a step settled by its key, whose
        proposal was checked before its intent by an earlier handling)."""
        cp, fence, ring = loaded.checkpoint, loaded.held.lease.fence, self.store.sealer.keyring
        now = datetime.now(UTC)
        made = closing.of(
            self.app, self.actions, cp, fence, (ran, *more), record=record, auth=auth, now=now, trail=trail
        )
        # One close per operation, whichever proposal (or redelivery) gets here.
        outcome = self.advance(
            loaded,
            keys.runtime_id("close", made.op_key),
            made.moved,
            lambda _old, new: closing.detail(self.app, ring, made, new),
            before=self._next_step,
            release=True,
            first=first,
            also=made.also if made.records else None,
            auth=auth,
        )
        if record is not None and outcome.status == "applied":
            self._check_recorded(loaded, made.op_key, outcome.also[0])
        fault("executor.after_advance")
        metrics.effect_recorded(loaded.checkpoint, outcome.status)

    def ruled(self, loaded: Loaded, decided: ruling.Written, auth: Snapshot) -> None:
        """Write what the ruling says (all but a step to run: Executor._run), under the lease held."""
        cp = loaded.checkpoint
        if isinstance(decided, ruling.Close):
            self.close(loaded, decided.step, auth)
        elif isinstance(decided, ruling.Hold):  # the thaw wakes the task marked here
            checks.raise_replies(cp.task_id, *loaded.pinned.batch([("SADD", keys.HELD_TASKS, cp.task_id)]))
            self.log("executor.held", task_id=cp.task_id, scope=decided.scope)
        elif isinstance(decided, ruling.Park):
            why, detail = decided.reason, dict(decided.detail)
            self.advance(loaded, decided.message_id, lambda c: engine.review(c, why), detail, auth=auth)
            self.log(decided.event, task_id=cp.task_id, **decided.logged)
        elif isinstance(decided, ruling.Quarantine):
            self._quarantine(loaded, decided.detail)
        else:
            self._refused(loaded, decided.message_id, decided.decided, auth)

    def _quarantine(self, loaded: Loaded, detail: str) -> None:
        """Gate 4 fails under the lease: the task runs under versions (or a workflow) the deployed app
        cannot run, so it is quarantined with why, as the gate would, readable and releasable by a
        person (docs/change.md). Never left at a tool stage with its request spent and nothing to wake it."""
        task_id = loaded.checkpoint.task_id
        self.store.quarantine(task_id, "incompatible", detail)
        self.log("executor.quarantined", task_id=task_id, detail=detail)

    def _refused(self, loaded: Loaded, refused_id: str, decided: Refuse | Review, auth: Snapshot) -> None:
        """A Review parks the task. A Refuse records the reason and asks the model again (the
        task is woken, and the gate's next window shows why), or, past the workflow's
        max_reproposals, parks it too (effects.refused)."""
        cp, reason = loaded.checkpoint, decided.reason
        if isinstance(decided, Review):
            self.advance(
                loaded, refused_id, lambda c: engine.review(c, reason), {"refused": reason}, auth=auth
            )
            self.log("executor.refused", task_id=cp.task_id, reason=reason, review=True)
            return
        after = self.ask_again(loaded, refused_id, lambda c: effects.refused(self.app, c, reason), auth)
        parked = after.checkpoint.stage != cp.stage
        count = cp.execution.attempts + 1
        self.log("executor.refused", task_id=cp.task_id, reason=reason, review=parked, refusals=count)

    def _check_recorded(self, loaded: Loaded, op: str, reply: Any) -> None:
        """The action log took the outcome that rode in the close; if it refused it, the task is
        past a step the log does not show as done. Only an entry written behind this worker's back
        does that (the lease, WATCHed from load to EXEC, was this worker's): park the task."""
        try:
            self.actions.recorded(op, loaded.held.lease.fence, reply)
        except ActionError as exc:
            task_id = loaded.checkpoint.task_id
            self.store.quarantine(task_id, "outcome_not_recorded", str(exc))
            self.log("executor.outcome_not_recorded", task_id=task_id, op_key=op, reason=str(exc))

    def ask_again(self, loaded: Loaded, message_id: str, fn: Transition, auth: Snapshot) -> Change:
        """Record a refused proposal (fn: effects.refused) and, when the task stays at a stage
        that offers a tool, wake it as _next_step does, so that the gate asks the model again."""
        return self.advance(loaded, message_id, fn, effects.refusal_detail, before=self._next_step, auth=auth)

    def _next_step(self, new: Checkpoint) -> list[tuple[Any, ...]]:
        """A task moved to another stage that offers a tool is woken at once (through the timer,
        which writes wakes) so the gate asks for its next proposal. Written ahead of the
        transaction, under this lease (wk:deadlines is in another Redis Cluster slot than the
        task): the gate takes the wake only once the lease is free, when the move has landed or
        never will; a wake with no move behind it finds nothing due and changes nothing. A task
        that now waits (a Wait its workflow's `done` returned, or a tool's completion:
        workflow/pending.py) gets its wait's deadline there and its correlation id, as the gate's
        moves do."""
        if new.execution.pending_waits:
            return last_step.wait_writes(new)  # its deadline for the timer, its correlation id for the door
        if not self.app.tools_at(new.stage):
            return []
        due_ms = int(new.updated_at.timestamp() * 1000)
        return [("ZADD", keys.DEADLINES, due_ms, f"{new.task_id}|{due_ms}")]

    def advance(
        self,
        loaded: Loaded,
        message_id: str,
        fn: Transition,
        detail: Detail,
        *,
        before: Also | None = None,
        release: bool = False,
        first: list[Any] | None = None,
        also: Also | None = None,
        auth: Snapshot,
    ) -> Change:
        """The change, on the connection that WATCHes the task since its load (a change applied
        before writes nothing). `release`: give the lease back inside it; `first`: the change's
        first step, already read; `also`: writes of the task's slot to make inside it; `auth`: the
        live authority, whose limits say whether a task that ended gives its slot back."""
        cp = loaded.checkpoint
        try:
            change = self.store.transition(
                cp.task_id,
                cp.state_version,
                message_id,
                fn,
                lease=loaded.held.lease,
                detail=detail,
                before=before,
                release=loaded.held if release else None,
                pinned=loaded.pinned,
                first=first,
                also=also,
            )
        except StaleVersion as exc:
            raise Retry(str(exc)) from exc
        self.give_back(change.checkpoint, auth)  # as stored: a change applied before gives it back again
        return change

    def give_back(self, cp: Checkpoint, auth: Snapshot) -> None:
        """The task's slot of its tenant's limit, given back once its stored state no longer
        occupies one (D108); giving back a slot it does not hold changes nothing."""
        if limits.frees(self.app, cp, auth.limits):
            fair.give_back(
                self.store.client, cp.security.tenant, cp.task_id, (self.app.name, cp.business.workflow)
            )
