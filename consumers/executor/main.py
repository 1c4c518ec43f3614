"""The executor: gate 7. Re-load, validate the proposal against Progress and live Authority, then
execute the side effect once, through the loaded app's tool.

Order, each step durable before the next: intent (action log, under the tool's op key, by
default {tool}:{task}:v{version}) -> the tool's call WITH the op key and the lease's fencing token ->
outcome recorded and stage advanced, in one transaction (its outbox record reaches wakeful.log).
A crash anywhere resumes correctly:
  A. before the intent:          nothing happened; the redelivered proposal runs from the start.
  B. after intent, before call:   the intent is in flight; ask the tool's lookup (not found), call
                                  again with the SAME key.
  C. after call, before outcome:  in flight; the lookup finds what the call did: record it, advance.
  D. outcome recorded, stage not: only a recovery (C), or code before D48, leaves this; skip the
                                  call, advance.
An ambiguous outcome is never retried blindly: it is looked up by key. A step that fails for good
parks the task, after undoing what the workflow names (each undo once, under its own op key).
While a tool runs, a heartbeat renews the lease (consumers/executor/heartbeat.py); a tool that is
unavailable is tried again by retrying the message with the lease given back, the calls counted on
the intent, through case B (docs/decisions.md D61).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from confluent_kafka import Message
from pydantic import ValidationError

from wakeful.authority.kept import Ask, Kept
from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.executor import cancelling, guarding, ruling
from wakeful.consumers.executor import steps as executor_steps
from wakeful.consumers.executor.closing import proposal_trail
from wakeful.consumers.executor.heartbeat import Heartbeats
from wakeful.consumers.executor.steps import Turn
from wakeful.consumers.executor.writes import Loaded, Writes
from wakeful.consumers.kafka import switch_acks, unreadable, wiring, wordings
from wakeful.consumers.kafka.producing import RunnerProducer
from wakeful.consumers.kafka.role import Hooks, run_role
from wakeful.consumers.kafka.runner import Runner
from wakeful.core import metrics, topics, tracing
from wakeful.core.errors import (
    ActionError,
    DecodeError,
    IntegrityError,
    KeyringError,
    LeaseBusy,
    LeaseLost,
    TaskNotFound,
    TaskQuarantined,
)
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.core.provenance import Forged, RoleKeys, load_keys
from wakeful.core.retry import Retry
from wakeful.core.settings import Settings
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import Envelope
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.schemas.proposals import Proposal
from wakeful.sdk.app import App, load_app
from wakeful.sdk.tools import Tool
from wakeful.sdk.workflow import CANCELLING, Compensate, Effect
from wakeful.state import first_step, keys
from wakeful.state.actions import ActionLog
from wakeful.state.lease import Held, Leases
from wakeful.state.replies import hash_reply
from wakeful.state.store import Store
from wakeful.workflow import cancels, effects, engine


class Executor:
    def __init__(
        self, store: Store, leases: Leases, actions: ActionLog, log: Log, *, keys: RoleKeys, app: App
    ) -> None:
        self.store = store
        self.role_keys = keys
        self.leases = leases
        self.actions = actions
        self.log = log
        self.app = app
        self.kept = Kept(app.name, app.shipped_policy)  # the authority Snapshot, while it stands
        self.writes = Writes(store, actions, app, log)
        self.heartbeats = Heartbeats(leases, log=log)
        self.runner: Runner | None = None

    def handle(self, msg: Message) -> None:
        assert self.runner is not None
        sender = self.role_keys.sender(topics.PROPOSALS, msg.key() or b"", msg.value() or b"", msg.headers())
        if isinstance(sender, Forged):
            return self.runner.dead_letter(msg, sender.reason)
        try:
            env = Envelope.decode(msg.value() or b"")
            # its schema's migrations run; a cancel's request carries none
            proposal = None if env.kind == events.UNDO_REQUEST else Proposal.decode(orjson.dumps(env.payload))
        except (DecodeError, ValidationError) as exc:
            return self.runner.dead_letter(msg, f"malformed proposal: {exc!r}")
        ask = self.kept.ask()  # the authority token, and the Snapshot's reads unless one is kept
        with self.store.pinned(env.task_id) as pinned:
            try:
                # One round trip: the task's lease, then the task WATCHed and read, its action log and
                # live authority.
                lease, cp, replies, watched = self.store.acquire_with(
                    self.leases,
                    env.task_id,
                    [("HGETALL", keys.ops(env.task_id)), *ask.commands],
                    pinned=pinned,
                )
            except LeaseBusy:
                raise Retry("task lease is held by another worker", after=0.005) from None
            except TaskQuarantined:
                return self._superseded(msg, env, "task is quarantined")  # parked since it was asked
            except (TaskNotFound, IntegrityError) as exc:
                return self.runner.dead_letter(msg, f"proposal refused: {exc}", env.task_id)
            except (KeyringError, DecodeError) as exc:  # this worker's keyring, not the task (D88)
                fix = unreadable.fix_for(exc)
                self.log("executor.unreadable", task_id=env.task_id, error=str(exc), fix=fix)
                unreadable.mark(self.store.client, env.task_id)
                return self._superseded(msg, env, f"this worker cannot read the task: {exc}")
            held = Held(lease)
            try:
                self._execute(msg, env, proposal, Loaded(cp, replies, held, pinned, watched), ask)
            finally:
                self.leases.finish(held)
        return None

    def _execute(
        self, msg: Message, env: Envelope, proposal: Proposal | None, loaded: Loaded, ask: Ask
    ) -> None:
        """The proposal checked against the task `loaded` under the lease held (and the reads that
        came with it: ruling.py rules on them), then carried out at most once."""
        assert self.runner is not None
        cp = loaded.checkpoint
        tracing.stamp_task(cp, self.app.name)
        if proposal is None:
            return self._cancel(msg, env, loaded, ask)
        admitted = ruling.admit(self.app, cp, env)
        if isinstance(admitted, ruling.Drop):
            # A close that a crash cut short after its commit left the slot counted: given back now.
            self.writes.give_back(cp, self.kept.snapshot(ask, loaded.replies[1:], loaded.pinned.batch))
            return self._superseded(msg, env, admitted.why)
        if isinstance(admitted, ruling.DeadLetter):
            return self.runner.dead_letter(msg, admitted.reason, env.task_id)
        # A policy version this process has not parsed yet, or a token that moved: one more trip.
        replies = loaded.replies
        ops, auth = hash_reply(replies[0]), self.kept.snapshot(ask, replies[1:], loaded.pinned.batch)
        # A step of this stage may already have run (cases C and D): settled by key first.
        settled = executor_steps.settled(self.app, self.actions, cp, ops, loaded.held.lease)
        now = datetime.now(UTC)
        decided = ruling.rule(self.app, cp, proposal, ops=ops, auth=auth, now=now, settled=settled)
        if isinstance(decided, ruling.Run):
            return self._run(env, proposal, loaded, auth, decided)
        return self.writes.ruled(loaded, decided, auth)

    def _run(
        self, env: Envelope, proposal: Proposal, loaded: Loaded, auth: Snapshot, run: ruling.Run
    ) -> None:
        """The step: its call once under its op key, then the read-only calls that share its turn,
        then the close that records them and advances the task."""
        decided, cp = run.effect, loaded.checkpoint
        tracing.stamp(tool=decided.tool, op_key=decided.op_key)
        args = decided.args.model_dump(mode="json")  # once: for the intent, and for the loop's record
        done = self._once(loaded, decided, args, auth)
        if done is None:
            return
        result, first, outcome = done
        with self.heartbeats.beating(loaded.held.lease) as beat:
            extra = executor_steps.call_more(self.app, list(run.more), loaded.held.lease)
        beat.check()
        ran = executor_steps.Ran(decided.tool, decided.op_key, result, args)
        trail = proposal_trail(self.app, env, proposal.model, cp, ran=ran, more=extra)
        self.writes.close(loaded, ran, auth, first, outcome, more=extra, trail=trail)

    def _cancel(self, msg: Message, env: Envelope, loaded: Loaded, ask: Ask) -> None:
        """A cancelling task's undos (consumers/executor/cancelling.py), then its end: cancelled."""
        cp = loaded.checkpoint
        if cp.stage != CANCELLING or env.task_version != cp.state_version:
            return self._superseded(msg, env, f"no cancel is outstanding: task is {cp.stage}")
        ops = hash_reply(loaded.replies[0])
        with self.heartbeats.beating(loaded.held.lease) as beat:
            undone, failures = cancelling.undo_all(
                self.app, self.actions, cp, ops, loaded.held.lease, log=self.log
            )
        beat.check()
        self.writes.advance(
            loaded,
            keys.runtime_id("cancelled", cp.state_version),
            lambda c: cancels.ended(c, undone, failures),
            {"cancelled": cancels.reason_of(cp), "undone": [e.op_key for e in undone], "failures": failures},
            auth=self.kept.snapshot(ask, loaded.replies[1:], loaded.pinned.batch),
        )
        fault("executor.after_advance")
        self.log("executor.cancelled", task_id=cp.task_id, undone=len(undone), failures=len(failures))
        return None

    def _superseded(self, msg: Message, env: Envelope, why: str) -> None:
        """A proposal this executor may not carry out, though nothing is wrong with it, is dropped,
        counted and logged: its task moved on (its newer version has a request of its own, or needs
        none), or runs a workflow this release lacks. The dead letters are for what is wrong."""
        metrics.superseded("executor", msg.topic())
        self.log("executor.superseded", task_id=env.task_id, state_version=env.task_version, why=why)

    def _once(
        self, loaded: Loaded, effect: Effect, args: dict[str, Any], auth: Snapshot
    ) -> tuple[Mapping[str, Any], list[Any], tuple[Any, ...] | None] | None:
        """The tool's call (`args`: the effect's arguments as JSON), at most one effect per op key,
        in its turn (D109, D111). Returns what it returned, the close's first step (its inbox check
        rides with the intent) and the outcome's record for the close to carry (None when it is
        recorded already); None if the task went to review."""
        tool = self.app.tool(effect.tool)
        assert tool is not None  # check_proposal found it
        turn = executor_steps.wait_turn(
            self.store.client,
            self.app,
            tool,
            auth,
            log=self.log,
            lease=loaded.held.lease,
            op_key=effect.op_key,
        )
        try:
            return self._begin_and_call(loaded, (effect, tool), args, auth, turn)
        finally:
            turn.give_back()  # however the call ended: its slot of the tool's calls at once is free

    def _begin_and_call(
        self, loaded: Loaded, step: tuple[Effect, Tool[Any]], args: dict[str, Any], auth: Snapshot, turn: Turn
    ) -> tuple[Mapping[str, Any], list[Any], tuple[Any, ...] | None] | None:
        (effect, tool), cp, lease = step, loaded.checkpoint, loaded.held.lease
        intent = self.actions.begin_command(
            cp.task_id, effect.op_key, lease.fence, lease.token, tool=tool.name, args=args
        )
        closed = first_step.seen(cp.task_id, keys.runtime_id("close", effect.op_key))
        reply, _, seen = loaded.pinned.batch([intent, self.actions.mark_command(cp.task_id), closed])
        begun = self.actions.begun(cp.task_id, lease.token, reply)
        first = [*loaded.watched, seen]
        if begun.entry.status is ActionStatus.SUCCEEDED:  # case D: done before; skip and advance
            return begun.entry.result or {}, first, None
        fault("executor.after_intent")
        # A fresh intent, or case B (in flight, and settled() found nothing downstream): call with
        # the same key; the tool does it at most once. The lease is renewed while the call runs.
        attempt = functools.partial(tool.call, effect.op_key, effect.args, lease.fence)
        with self.heartbeats.beating(lease, also=turn.renew if turn.most else None) as beat:
            outcome = executor_steps.call_once(tool, effect.op_key, attempt, lease)
        beat.check()  # renewed at every beat, or nothing is written with this fence
        if isinstance(outcome, executor_steps.Unavailable):
            outcome = self._unavailable(loaded, tool, begun.entry, outcome)
        if isinstance(outcome, str):
            self._give_up(loaded, (tool.name, effect.op_key), outcome, auth)
            return None
        fault("executor.after_downstream_call")
        record = self.actions.complete_command(
            cp.task_id, effect.op_key, lease.fence, dict(outcome), begun.entry
        )
        return outcome, first, record

    def _unavailable(
        self, loaded: Loaded, tool: Tool[Any], intent: ActionLogEntry, failed: executor_steps.Unavailable
    ) -> str:
        """A call that found its tool unavailable: counted on the intent, then the message is
        retried later (Retry), the lease given back meanwhile (D61); or, once the tool's attempts
        are spent, why the step failed for good."""
        cp, lease, tried = loaded.checkpoint, loaded.held.lease, intent.attempts + 1
        try:
            self.actions.attempted(intent, lease.fence, attempts=tried, reason=failed.reason)
        except ActionError as exc:  # a newer holder owns the intent: this lease is gone
            raise LeaseLost(cp.task_id, lease.token, str(exc)) from exc
        decided = executor_steps.after_unavailable(tool, tried, failed.reason)
        if isinstance(decided, str):
            return decided
        self.log("executor.tool_unavailable", task_id=cp.task_id, tool=tool.name, attempt=tried)
        raise Retry(f"{tool.name} unavailable (attempt {tried} of {tool.attempts}): {failed.reason}", decided)

    def _give_up(self, loaded: Loaded, step: tuple[str, str], reason: str, auth: Snapshot) -> None:
        """The step (tool, op key) failed for good, nothing done: record it, undo what the workflow
        names, and park the task."""
        (tool, op), cp, lease = step, loaded.checkpoint, loaded.held.lease
        self.actions.fail(cp.task_id, op, lease.fence, reason)
        decided = effects.failed(self.app, cp, tool, reason, auth=auth, now=datetime.now(UTC))
        undone: dict[str, str] = {}
        if isinstance(decided, Compensate):
            with self.heartbeats.beating(lease) as beat:
                reason, undone = executor_steps.compensate(
                    self.app, self.actions, cp, decided, lease, log=self.log
                )
            beat.check()

        def park(c: Checkpoint) -> Checkpoint:
            parked = engine.review(c, reason)
            return parked.model_copy(update={"external_refs": {**parked.external_refs, **undone}})

        self.writes.advance(
            loaded, keys.runtime_id("review", op, cp.state_version), park, {"refused": reason}, auth=auth
        )
        self.log("executor.needs_review", task_id=cp.task_id, reason=reason)


def main(settings: Settings, stop: threading.Event) -> None:
    # Local files first (keys, keyring, passwords): a missing one stops the role before any wait.
    keys = load_keys(settings, "executor")
    app = load_app(settings.app)
    guarding.connect_tools(settings, app, Log(role="executor"))  # each in its own egress, own credentials
    store = wiring.store_for(settings, "executor", app)
    leases, actions = wiring.leases_for(settings, "executor"), wiring.actions_for(settings, "executor")

    def build(producer: RunnerProducer, log: Log) -> Executor:
        wordings.deploy(store.client, app, stop, log)  # an egress widened for sleeping tasks stops it (D119)
        unreadable.wake_at_start(store.client, log)  # it may hold the key a task was sealed under now
        return Executor(store, leases, actions, log, keys=keys, app=app)

    def hooks(executor: Executor) -> Hooks:
        return Hooks(between_batches=switch_acks.acker(executor.store.client, "executor", executor.log))

    run_role(settings, stop, "executor", topics.PROPOSALS, build, hooks=hooks)
