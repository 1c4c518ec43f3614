"""The gate: gates 2 to 6 for every Wake, then the event applied to Progress by compare-and-swap.

For each wake: re-verify the event's signature against the live signer registry
(`gate_wake.authenticate()`: one pipelined read that also WATCHes and reads the task, with its
lease free, and brings the live authority snapshot); then one transition whose function loads
nothing itself but sees the verified state and calls the pure `gate_rules.decide()`: a closed task
takes no more events; policy and tool-catalog compatibility by the declared rule; then the
workflow decides (authorization, bound versions, approvals and their deadlines, all read live).
Refusals are recorded on the task and in the sender's receipt.

What to do after the CAS (register a wait's deadline and correlation id, publish a
ProposalRequest, write the receipt) is derived from the stored state and written by
`gate_writes.FollowUps`, so a wake redelivered after a crash between the CAS and these steps does
them again.
"""

from __future__ import annotations

import functools
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from confluent_kafka import Message, Producer

from wakeful.authority.store import AuthorityStore
from wakeful.consumers import gate_create, gate_rules, gate_writes, wiring
from wakeful.consumers.gate_wake import DeadLetter, Taken, authenticate, identity, verified_event
from wakeful.consumers.producing import RunnerProducer
from wakeful.consumers.role import Hooks, run_role
from wakeful.consumers.runner import Runner
from wakeful.core import ids, topics
from wakeful.core.errors import (
    DecodeError,
    IntegrityError,
    KeyringError,
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
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.sdk.app import App, load_app
from wakeful.state.store import Store
from wakeful.workflow import engine

BACKLOG_ALLOWANCE = timedelta(hours=1)


class _NoWrite(Exception):
    """The decision changes nothing (a deadline not due, "run" on a ready task, a closed task)."""

    def __init__(
        self, checkpoint: Checkpoint, rejected: str | None = None, *, told: str | None = None
    ) -> None:
        self.checkpoint = checkpoint
        self.rejected = rejected
        self.told = checkpoint.task_id if told is None else told  # the task the sender's receipt names


class _Incompatible(Exception):
    def __init__(self, detail: str) -> None:
        self.detail = detail


class Gate:
    def __init__(
        self,
        store: Store,
        producer: Producer,
        log: Log,
        *,
        keys: RoleKeys,
        app: App,
        event_max_age: float = 300.0,
    ) -> None:
        self.app = app
        self.store = store
        self.role_keys = keys
        self.max_age = timedelta(seconds=event_max_age)
        # A wake may wait in Kafka behind a backlog; the door already held the event to max age.
        self.max_lag = timedelta(seconds=event_max_age) + BACKLOG_ALLOWANCE
        self.client: redis.Redis = store.client
        self.authority = AuthorityStore(store.client)
        self.producer = producer
        self.log = log
        self.writes = gate_writes.FollowUps(producer, app, log)
        self.runner: Runner | None = None

    def handle(self, msg: Message) -> None:
        sender = self.role_keys.sender(topics.WAKE, msg.key() or b"", msg.value() or b"", msg.headers())
        if isinstance(sender, Forged):
            self._dead(msg, sender.reason)
            return None
        try:
            envelope = Envelope.decode(msg.value() or b"")
        except DecodeError as exc:
            self._dead(msg, f"malformed wake: {exc.reason}")
            return None
        fault("gate.before_read")
        with self.store.pinned(envelope.task_id) as pinned:
            taken = authenticate(envelope, sender, pinned, max_age=self.max_age, max_lag=self.max_lag)
            if isinstance(taken, DeadLetter):
                self._dead(msg, taken.reason)
                return None
            try:
                fault("gate.after_read")
                self._apply(taken)
            except engine.UnknownWorkflow as exc:
                # Retrying would hold up every task behind it on the partition; the letter keeps the
                # wake for a replay by a worker that runs the task's app.
                self._dead(msg, f"task {envelope.task_id}: {exc}")
        return None

    def _apply(self, step: Taken) -> None:
        wake = step.wake
        env, event, auth = wake.envelope, wake.event, wake.auth
        now = datetime.now(UTC)
        if wake.answered:
            return self._decided_before(step)
        if event is not None and event.kind == events.CREATE:
            return gate_create.create(
                step, now, app=self.app, store=self.store, writes=self.writes, log=self.log
            )
        refusal: list[str] = []
        evidence: dict[str, str] = {}
        started = step.started() if event is not None and event.kind == events.AMEND else frozenset()

        def decide(cp: Checkpoint) -> Checkpoint:
            refusal.clear()
            evidence.clear()
            if event is not None and cp.security.tenant != wake.tenant:
                # Another tenant's task (one made before the namespaces, D52, or reached through a
                # correlation id stored before its tenant was) is, to this signer, no task at all:
                # the answer its own namespace gives, in a receipt outside this task's slot.
                said, named = stranger(event, wake.tenant)
                raise _NoWrite(cp, said, told=named)
            decided = gate_rules.decide(
                self.app, cp, event, wake.principal or "", auth=auth, now=now, started=started
            )
            if isinstance(decided, gate_rules.Incompatible):
                raise _Incompatible(decided.detail)
            if decided is None or isinstance(decided, gate_rules.Rejected):
                raise _NoWrite(cp, decided.reason if decided else None)
            if isinstance(decided, gate_rules.Refused):
                refusal.append(decided.reason)
                return decided.checkpoint
            evidence.update(decided.evidence)
            return decided.checkpoint

        def receipt(new: Checkpoint) -> list[tuple[Any, ...]]:
            return gate_writes.change_writes(event, evidence, refusal[0] if refusal else None, new)

        finish = functools.partial(self.writes.finish, pinned=step.pinned)
        try:
            outcome = self.store.transition(
                env.task_id,
                None,
                identity(env, event),
                decide,
                lease=None,
                detail=gate_writes.event_detail(event),
                restamp=True,
                before=gate_writes.wait_writes,
                also=receipt,
                pinned=step.pinned,
                first=step.first,
            )
            cp = outcome.checkpoint
            if outcome.status == "duplicate":  # applied before a crash: redo only what follows the CAS
                finish(None, "", "", cp.task_id, cp)
                return self.writes.follow_up(cp, wake)
        except _NoWrite as nothing:
            cp = nothing.checkpoint
            if nothing.rejected is not None:  # refused: tell the sender at once, change nothing
                return finish(event, "rejected", nothing.rejected, nothing.told, None)
        except TaskNotFound:
            return finish(event, "rejected", f"no task {env.task_id}", env.task_id, None)
        except (TaskQuarantined, IntegrityError) as exc:
            # Unreadable, so its tenant is unknown: the sender hears why only about its own task.
            return finish(event, "rejected", *told(event, wake.tenant, env.task_id, str(exc)), None)
        except _Incompatible as exc:
            self._park(step, exc.detail)
            return finish(event, "rejected", f"task quarantined: {exc.detail}", env.task_id, None)
        except (KeyringError, DecodeError) as exc:
            # Not tampering, but this worker cannot read the task: keep the message, loudly.
            raise Retry(f"cannot read task {env.task_id}: {exc}", after=5.0) from exc
        else:
            fault("gate.after_cas")
            status, reason = ("rejected", refusal[0]) if refusal else ("accepted", f"task is {cp.stage}")
            if event is None:
                self.log("gate.deadline", task_id=cp.task_id, stage=cp.stage, reason=cp.business.last_refusal)
            else:
                self.log(
                    "gate.receipt", task_id=cp.task_id, event_id=event.event_id, status=status, reason=reason
                )
            # Even after a refusal: the change bumped state_version, so a proposal already in flight
            # is stale now and a ready task needs a fresh request.
            return self.writes.follow_up(cp, wake)
        # "run" on a ready task, or a deadline not due: nothing was written
        finish(event, "accepted", f"task is {cp.stage}", cp.task_id, cp)
        return self.writes.follow_up(cp, wake)

    def _park(self, step: Taken, detail: str) -> None:
        """Quarantine a task the deployed versions cannot run, under the WATCH of the read that
        judged it: the gate holds no lease, so a holder that took it since is not parked mid-step."""
        task_id = step.wake.envelope.task_id
        if not self.store.quarantine_watched(step.pinned, task_id, "incompatible", detail):
            raise Retry(f"task {task_id} moved before it could be quarantined", after=0.005)
        self.log("gate.quarantined", task_id=task_id, detail=detail)

    def _decided_before(self, step: Taken) -> None:
        """A wake whose event has a receipt was decided before: a redelivery, or a replay of the
        signed wake. It is not decided again (a refusal writes nothing to the task, so only its
        receipt remembers it): only what follows from the stored state is redone, as after a crash
        between a change and its follow-up."""
        wake, task_id = step.wake, step.wake.envelope.task_id
        try:
            cp = self.store.read_back(task_id, step.first)
        except (TaskNotFound, TaskQuarantined, IntegrityError):
            return None  # refused because the task was not there to take it: still nothing to do
        except (KeyringError, DecodeError) as exc:
            raise Retry(f"cannot read task {task_id}: {exc}", after=5.0) from exc
        event_id = wake.event.event_id if wake.event else None
        self.log("gate.decided_before", task_id=cp.task_id, event_id=event_id)
        self.writes.finish(None, "", "", cp.task_id, cp, pinned=step.pinned)
        return self.writes.follow_up(cp, wake)

    def poisoned(self, msg: Message, reason: str) -> None:
        """The runner dead-lettered msg after the gate failed on it: the sender of the verified
        event inside hears it was rejected, instead of waiting for a receipt that never comes."""
        found = verified_event(msg, self.role_keys, self.authority)
        if found is None:
            return  # a forged wake, a deadline wake, or one with no verified event in it: nobody to tell
        event, task_id, tenant = found
        said, named = told(event, tenant, task_id, f"the gate could not apply this event: {reason}")
        _, name, doc, _, ttl = gate_writes.receipt_write(event, "rejected", said, None, named)
        self.client.set(name, doc, ex=ttl, nx=True)  # an outcome already written stands

    def _dead(self, msg: Message, reason: str) -> None:
        assert self.runner is not None
        self.runner.dead_letter(msg, reason)


def main(settings: Settings, stop: threading.Event) -> None:
    # Local files first (keys, keyring, passwords): a missing one stops the role before any wait.
    keys = load_keys(settings, "gate")
    app = load_app(settings.app)
    store = wiring.store_for(settings, "gate")

    def build(producer: RunnerProducer, log: Log) -> Gate:
        return Gate(store, producer, log, keys=keys, app=app, event_max_age=settings.event_max_age)

    run_role(settings, stop, "gate", topics.WAKE, build, hooks=lambda gate: Hooks(on_poison=gate.poisoned))


def told(event: SignedEvent | None, tenant: str, task_id: str, reason: str) -> tuple[str, str]:
    """(what the sender of `event`, of `tenant`, hears, the task its receipt names) when task_id
    could not be judged for its tenant: `reason` about a task of the sender's own namespace;
    otherwise (a task reached through the fallback to an id as sent, D52, or through a correlation
    id) the answer a task or wait that does not exist gets, outside that task's slot. A deadline
    wake (no event) is the runtime's own: nobody to tell."""
    if event is None:
        return reason, task_id
    if not event.correlation_id and event.task_id and ids.task_in(tenant, event.task_id) == task_id:
        return reason, task_id
    return stranger(event, tenant)


def stranger(event: SignedEvent, tenant: str) -> tuple[str, str]:
    """(what the sender of `event`, of `tenant`, hears about a task that is not its tenant's, the
    task its receipt names): what a wait or task that does not exist gets, in the slot of the task
    its own namespace names (none for a correlation id)."""
    if event.correlation_id:
        return f"unknown correlation id {event.correlation_id!r}", ""
    assert event.task_id is not None  # the door lets no event through that names neither
    own = ids.task_in(tenant, event.task_id)
    return f"no task {own}", own
