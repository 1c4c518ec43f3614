"""The executor: gate 7. Re-load, validate the proposal against Progress and live Authority, then
execute the side effect once.

Order, each step durable before the next: intent (action log, op key REFUND:{task}:v{version}) ->
downstream call WITH the op key and the lease's fencing token -> outcome recorded -> stage advanced
(its outbox record reaches wakeful.log). A crash anywhere resumes correctly:
  A. before the intent:          nothing happened; the redelivered proposal runs from the start.
  B. after intent, before call:   the intent is in flight; look the key up downstream (not found),
                                  call again with the SAME key.
  C. after call, before outcome:  in flight; the lookup finds the booking: record it, advance.
  D. after outcome, before stage: the outcome is recorded: skip the call, advance.
An ambiguous outcome of this irreversible call is never retried blindly: it is looked up by key.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import Consumer, Message
from pydantic import ValidationError

from wakeful.authority.store import SNAPSHOT_READS, snapshot_from
from wakeful.bank.ledger import Bank, LedgerEntry
from wakeful.consumers.models import Proposal
from wakeful.consumers.runner import Runner, consumer_config, make_producer
from wakeful.core import topics
from wakeful.core.errors import (
    DecodeError,
    DownstreamUnavailable,
    FencedOff,
    IntegrityError,
    KeyringError,
    LeaseBusy,
    LeaseLost,
    StaleVersion,
    TaskNotFound,
    TaskQuarantined,
)
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.core.provenance import Forged, RoleKeys, load_keys
from wakeful.core.retry import Retry, backoff
from wakeful.core.settings import Settings
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import Envelope
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.schemas.stage import Stage
from wakeful.state import acl, keys, wiring
from wakeful.state.actions import ActionLog
from wakeful.state.lease import Lease, Leases
from wakeful.state.pinned import hash_reply
from wakeful.state.store import Store
from wakeful.workflow import refund


def unanswered(cp: Checkpoint, env: Envelope) -> str | None:
    """Why a proposal answers no request the task has outstanding, or None. The gate asks once per
    state_version, and only of a ready task: anything else writes nothing."""
    if env.task_version != cp.state_version:
        return f"stale proposal: decided on state_version {env.task_version}, task is at {cp.state_version}"
    if cp.stage is not Stage.READY:
        return f"no proposal is outstanding: task {cp.task_id} is {cp.stage.value}"
    if env.in_reply_to != events.request_id(cp.task_id, cp.state_version):
        return f"proposal answers {env.in_reply_to!r}, not the task's outstanding request"
    return None


class Executor:
    def __init__(
        self, store: Store, leases: Leases, actions: ActionLog, bank: Bank, log: Log, *, keys: RoleKeys
    ) -> None:
        self.store = store
        self.role_keys = keys
        self.leases = leases
        self.actions = actions
        self.bank = bank
        self.log = log
        self.runner: Runner | None = None

    def handle(self, msg: Message) -> None:
        assert self.runner is not None
        sender = self.role_keys.sender(topics.PROPOSALS, msg.key() or b"", msg.value() or b"", msg.headers())
        if isinstance(sender, Forged):
            return self.runner.dead_letter(msg, sender.reason)
        try:
            env = Envelope.decode(msg.value() or b"")
            proposal = Proposal.model_validate(env.payload)
        except (DecodeError, ValidationError) as exc:
            return self.runner.dead_letter(msg, f"malformed proposal: {exc!r}")
        try:
            lease = self.leases.acquire(env.task_id)
        except LeaseBusy:
            raise Retry("task lease is held by another worker", after=0.005) from None
        try:
            self._execute(msg, env, proposal, lease)
        finally:
            self.leases.release(lease)
        return None

    def _execute(self, msg: Message, env: Envelope, proposal: Proposal, lease: Lease) -> None:
        assert self.runner is not None
        try:
            # One round trip: the task, its action log and live authority.
            cp, replies = self.store.load_with(
                env.task_id, [("HGETALL", keys.ops(env.task_id)), *SNAPSHOT_READS]
            )
        except (TaskNotFound, TaskQuarantined, IntegrityError) as exc:
            return self.runner.dead_letter(msg, f"proposal refused: {exc}", env.task_id)
        except (KeyringError, DecodeError) as exc:
            raise Retry(f"cannot read task {env.task_id}: {exc}", after=5.0) from exc
        refused = unanswered(cp, env)
        if refused is not None:
            return self.runner.dead_letter(msg, refused, env.task_id)
        op = refund.op_key(cp)
        ops, auth = hash_reply(replies[0]), snapshot_from(replies[1:])
        # Money may already have moved for this operation (cases C and D): settle that by key
        # first. It was validated before its intent was written; re-validating it against
        # today's authority could park a task whose refund is already booked.
        raw_intent = ops.get(op.encode())
        intent = ActionLogEntry.decode(raw_intent) if raw_intent else None
        booked = self._booked(cp, op, intent, lease)
        if booked is not None:
            return self._close(cp, op, booked, lease)
        refusal = refund.check_proposal(cp, proposal.tool, proposal.args, auth, datetime.now(UTC))
        if refusal is not None:
            fn = refund.review if refusal.review else refund.refused
            # The runtime's own id for a refusal at this version, never the proposal's message id
            # (anyone who can write to wakeful.proposals chooses that).
            refused_id = keys.runtime_id("refused", cp.task_id, cp.state_version)
            self._advance(cp, refused_id, lambda c: fn(c, refusal.reason), lease, {"refused": refusal.reason})
            self.log("executor.refused", task_id=cp.task_id, reason=refusal.reason, review=refusal.review)
            return None
        entry = self._once(cp, op, lease)
        if entry is None:
            return None
        return self._close(cp, op, entry, lease)

    def _booked(
        self, cp: Checkpoint, op: str, intent: ActionLogEntry | None, lease: Lease
    ) -> LedgerEntry | None:
        """The booking for op if one exists (recording an outcome that a crash left unrecorded)."""
        if intent is None or intent.status is ActionStatus.FAILED:
            return None
        found = self.bank.lookup(op)
        if found is not None and intent.status is ActionStatus.IN_FLIGHT:
            self.actions.complete(cp.task_id, op, lease.fence, {"ledger_entry": found.entry_id}, intent)
        return found

    def _close(self, cp: Checkpoint, op: str, entry: LedgerEntry, lease: Lease) -> None:
        fault("executor.after_outcome")
        # One close per operation, whichever proposal (or redelivery) gets here.
        self._advance(
            cp,
            keys.runtime_id("close", op),
            lambda c: refund.close(c, entry.entry_id),
            lease,
            {"ledger_entry": entry.entry_id},
        )
        fault("executor.after_advance")

    def _once(self, cp: Checkpoint, op: str, lease: Lease) -> LedgerEntry | None:
        """The downstream call, at most one booking per op key; None if the task went to review."""
        begun = self.actions.begin(cp.task_id, op, lease.fence, lease.token)
        if begun.entry.status is ActionStatus.SUCCEEDED:  # case D: done before; skip and advance
            return _entry_from(begun.entry.result, self.bank, op)
        fault("executor.after_intent")
        # A fresh intent, or case B (in flight, and _booked just found nothing at the bank): call with
        # the same key; the bank books it at most once.
        last = ""
        for attempt in range(1, refund.MAX_ATTEMPTS + 1):
            try:
                entry = self.bank.refund(
                    op, cp.task_id, cp.business.amount, cp.business.currency, lease.fence
                )
            except DownstreamUnavailable as exc:
                last = str(exc)
                time.sleep(backoff(attempt))
                continue
            except FencedOff as exc:
                raise LeaseLost(cp.task_id, lease.token, str(exc)) from exc
            fault("executor.after_downstream_call")
            self.actions.complete(cp.task_id, op, lease.fence, {"ledger_entry": entry.entry_id}, begun.entry)
            return entry
        self._give_up(cp, lease, op, f"bank unavailable after {refund.MAX_ATTEMPTS} attempts: {last}")
        return None

    def _give_up(self, cp: Checkpoint, lease: Lease, op: str, reason: str) -> None:
        """Nothing was booked (the bank refused every attempt): record it and park the task."""
        self.actions.fail(cp.task_id, op, lease.fence, reason)
        self._advance(
            cp,
            keys.runtime_id("review", op, cp.state_version),
            lambda c: refund.review(c, reason),
            lease,
            {"refused": reason},
        )
        self.log("executor.needs_review", task_id=cp.task_id, reason=reason)

    def _advance(
        self, cp: Checkpoint, message_id: str, fn: Any, lease: Lease, detail: dict[str, Any]
    ) -> None:
        try:
            self.store.transition(cp.task_id, cp.state_version, message_id, fn, lease=lease, detail=detail)
        except StaleVersion as exc:
            raise Retry(str(exc)) from exc


def _entry_from(result: dict[str, Any] | None, bank: Bank, op: str) -> LedgerEntry | None:
    found = bank.lookup(op)
    if found is None:
        raise Retry(f"action log says {op} succeeded ({result}) but the bank has no booking")
    return found


def main(settings: Settings, stop: threading.Event) -> None:
    log = Log(role="executor")
    # Local files first (keys, keyring, passwords): a missing one stops the role before any wait.
    keys = load_keys(settings, "executor")
    executor = Executor(
        wiring.store_for(settings, "executor"),
        wiring.leases_for(settings, "executor"),
        wiring.actions_for(settings, "executor"),
        Bank(acl.connect(settings, "bank")),
        log,
        keys=keys,
    )
    producer, failures = make_producer(settings, "executor")
    runner = Runner(
        "executor",
        topics.PROPOSALS,
        executor.handle,
        Consumer(consumer_config(settings, "executor", "wakeful-executor")),
        producer,
        log=log,
        threads=settings.threads,
        failures=failures,
    )
    executor.runner = runner
    log("role.start")
    runner.run(stop)
