"""The gate: gates 2 to 6 for every Wake, then the event applied to Progress by compare-and-swap.

For each wake: re-verify the event's signature against the live signer registry
(`gate_wake.authenticate()`: one pipelined read that also WATCHes and reads the task, with its
lease free, and brings the live authority snapshot); then one transition whose function loads
nothing itself but sees the verified state and calls the pure `gate_rules.decide()`: the task is
the signer's tenant's; a closed task takes no more events; policy and tool-catalog compatibility
by the declared rule; then the workflow decides (authorization, bound versions, approvals and their
deadlines, all read live). What it rules is written or, when it writes nothing (a refusal, a
stranger's event, a quarantine, nothing to do), kept: the transition returns the task as read, and
only the sender's receipt says why (docs/pipeline.md, "Outcomes").

What to do after the CAS (register a wait's deadline and correlation id, publish a
ProposalRequest, write the receipt) is derived from the stored state and written by
`gate_writes.FollowUps`, so a wake redelivered after a crash between the CAS and these steps does
them again.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import redis
from confluent_kafka import Message, Producer

from wakeful.authority import freezes, signer_seal
from wakeful.authority.kept import Kept
from wakeful.authority.signer_seal import SignerSeal
from wakeful.authority.store import AuthorityStore
from wakeful.consumers.gate import create as gate_create
from wakeful.consumers.gate import hold as gate_hold
from wakeful.consumers.gate import rules as gate_rules
from wakeful.consumers.gate import writes as gate_writes
from wakeful.consumers.gate.fair import WHEN, Fair
from wakeful.consumers.gate.hold import Source, StillFrozen
from wakeful.consumers.gate.judge import Judge, stranger, told
from wakeful.consumers.gate.memory_read import Recaller
from wakeful.consumers.gate.wake import Taken, Untrusted, Wake, authenticate, identity, verified_event
from wakeful.consumers.kafka import client as kafka_client
from wakeful.consumers.kafka import switch_acks, unreadable, wiring, wordings
from wakeful.consumers.kafka.producing import RunnerProducer
from wakeful.consumers.kafka.role import Hooks, run_role
from wakeful.consumers.kafka.runner import Runner
from wakeful.core import metrics, topics, tracing
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
from wakeful.schemas.events import Envelope
from wakeful.sdk.app import App, load_app
from wakeful.sdk.workflow import Refuse
from wakeful.state.pinned import Command
from wakeful.state.store import Change, Store
from wakeful.state.wording import Wordings
from wakeful.workflow import engine, wording

_DRAIN = "drain"  # _take(): the task has held wakes; replay them before this one
_REPLAY = Source(None)


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
        events_retention_hours: int = 168,
        seal: SignerSeal | None = None,
    ) -> None:
        self.app = app
        self.seal = seal  # opens the HMAC signers' secrets (D91); without it no HMAC event verifies
        self.kept = Kept(app.name, app.shipped_policy)  # the authority Snapshot, while it stands
        self.store = store
        self.role_keys = keys
        self.max_age = timedelta(seconds=event_max_age)
        # A wake may wait in Kafka behind a backlog of any length: the door judged its event by when
        # the broker appended it, and that verdict can be no older than the door can read (D84).
        self.keep = timedelta(seconds=topics.event_keep_s(events_retention_hours))
        self.client: redis.Redis = store.client
        self.authority = AuthorityStore(store.client, seal)
        self.producer = producer
        self.log = log
        recall = Recaller(store.client, app, log, store.sealer.keyring, seal)
        pinned = wording.Read(Wordings(store.client, app.name).raw)  # the tools as each task knew them
        self.writes = gate_writes.FollowUps(producer, app, log, recall=recall, wordings=pinned)
        self.fair = Fair(store.client, app, log)  # the tenants' in-flight limits (D108)
        self.runner: Runner | None = None
        self.arrived = kafka_client.ArrivalClock(log)  # when a wake reached Kafka

    def handle(self, msg: Message) -> None:
        parts = gate_hold.parts_of(msg)
        if self._take(parts, Source(parts, msg)) == _DRAIN:  # held wakes first, oldest first (hold.py)
            task_id = Envelope.decode(parts[1]).task_id
            emptied = gate_hold.drain(
                self.client, task_id, self._replay, self._dead_held, self.log, partition=msg.partition()
            )
            self._take(parts, Source(parts, msg, drained=True, behind=not emptied))

    def pins(self, msgs: list[Message]) -> dict[tuple[str, int], int]:
        """The floors the batch's partitions' held wakes pin (D115): a change goes no higher."""
        found = gate_hold.pins(self.client, (m.partition() or 0 for m in msgs))
        return {(topics.WAKE, partition): offset for partition, offset in found.items()}

    def _take(self, parts: gate_hold.Parts, source: Source) -> str:
        """One wake message, from Kafka or replayed from a held list (`source`): what it did,
        gate_hold.REPLAYED or KEPT; _DRAIN when the task has held wakes to replay before this one."""
        key, value, headers = parts
        msg = source.msg
        sender = self.role_keys.sender(topics.WAKE, key, value, headers)
        if isinstance(sender, Forged):
            return self._dead(msg, parts, sender.reason)
        try:
            envelope = Envelope.decode(value)
        except DecodeError as exc:
            return self._dead(msg, parts, f"malformed wake: {exc.reason}")
        tracing.stamp(task_id=envelope.task_id, app=self.app.name)
        fault("gate.before_read")
        # A wake from Kafka is held to its broker time; one replayed from the held list was when it came.
        appended = self.arrived(msg) if msg is not None else None
        with self.store.pinned(envelope.task_id) as pinned:
            taken = authenticate(
                envelope,
                sender,
                pinned,
                max_age=self.max_age,
                keep=self.keep,
                appended=appended,
                app=self.app,
                kept=self.kept,
                seal=self.seal,
            )
            if isinstance(taken, Untrusted):
                return self._dead(msg, parts, taken.reason)
            if taken.held and source.parts is not None and not source.drained:
                return _DRAIN
            try:
                fault("gate.after_read")
                self._apply(taken, source)
            except StillFrozen:
                return gate_hold.KEPT
            except engine.UnknownWorkflow as exc:
                if source.parts is None:  # kept for a worker that runs the task's app
                    return gate_hold.KEPT
                # Retrying would hold up every task behind it on the partition; the letter keeps the
                # wake for a replay by a worker that runs the task's app.
                return self._dead(msg, parts, f"task {envelope.task_id}: {exc}")
        return gate_hold.REPLAYED

    def _apply(self, step: Taken, source: Source) -> None:
        """Gates 2 to 5 for one wake in one compare-and-swap (gate 3 reads and verifies the task,
        gate_rules.decide() judges it), then the answer: the sender's receipt, a quarantine, a
        hold, and for a task that may go on gate 6, its proposal request. A replayed wake is judged
        as of when the door judged its event: it waited on the held list, not its sender."""
        wake, event = step.wake, step.wake.event
        if wake.answered:
            return self._decided_before(step)
        if source.behind:  # older wakes of the task are still held: this one waits behind them
            return self._held(step, "held behind the task's earlier held wakes", source)
        now = datetime.now(UTC)
        if source.parts is None and event is not None:
            now = gate_rules.judged_at(wake.envelope) or now
        if event is not None and event.kind == events.CREATE:
            task_id = step.wake.envelope.task_id
            freeze = freezes.holding(wake.auth.frozen, self.app.name, wake.tenant, task_id)
            if freeze is not None:
                return self._held(step, f"task is {freeze.said()}", source)
            return gate_create.create(
                step,
                now,
                app=self.app,
                store=self.store,
                writes=self.writes,
                log=self.log,
                fair=self.fair,
                hold=lambda why: self._held(step, why, source, fix=WHEN),
            )
        started = step.started()  # empty unless the event's kind is decided with ctx.started
        judge = Judge(self.app, wake, now, started, step.recorded(), self.store.sealer.keyring)
        try:
            change = self._transition(step, judge)
        except (TaskNotFound, TaskQuarantined, IntegrityError) as exc:
            return self._unreadable(step, exc)
        except (KeyringError, DecodeError) as exc:
            return self._sealed_away(step, exc, source)
        cp = change.checkpoint
        if change.status == "duplicate":  # applied before a crash: redo only what follows the CAS
            self.writes.finish(None, "", "", cp.task_id, cp, pinned=step.pinned)
        elif change.status == "kept":
            return self._kept(step, judge.last, cp, source)
        else:
            fault("gate.after_cas")
            self._changed(wake, judge, cp)
        self.fair.after(cp, wake.auth, judge.was if change.status == "applied" else None)
        # Even after a review: the change bumped state_version, so a proposal already in flight
        # is stale now and a ready task needs a fresh request.
        return self.writes.follow_up(cp, wake)

    def _transition(self, step: Taken, judge: Judge) -> Change:
        """The task judged and changed by compare-and-swap, from the read `step` made."""
        envelope, event = step.wake.envelope, step.wake.event
        return self.store.transition(
            envelope.task_id,
            None,
            identity(envelope, event),
            judge.write,
            lease=None,
            detail=judge.detail,
            restamp=True,
            before=judge.before,
            also=judge.also,
            pinned=step.pinned,
            first=step.first,
        )

    def _sealed_away(self, step: Taken, exc: KeyringError | DecodeError, source: Source) -> None:
        """A task this gate cannot open (a key its keyring lacks: not tampering, D9): its wake is
        held and the task marked, so the wakes behind it on the partition go on; the gate or
        executor that starts with the key wakes it (unreadable.py)."""
        task_id = step.wake.envelope.task_id
        self.log("gate.unreadable", task_id=task_id, error=str(exc), fix=unreadable.fix_for(exc))
        if source.parts is None:  # a held wake replayed: it stays held, the task marked again
            unreadable.mark(self.client, task_id)
        why = f"this worker cannot read the task ({exc})"
        self._held(step, why, source, unreadable.marks(task_id), fix=unreadable.fix_for(exc))

    def _unreadable(self, step: Taken, exc: TaskNotFound | TaskQuarantined | IntegrityError) -> None:
        """Answer a wake for a task that is not there, or cannot be trusted: nothing is written."""
        wake, task_id = step.wake, step.wake.envelope.task_id
        if isinstance(exc, TaskNotFound):
            said, named = f"no task {task_id}", task_id
        else:  # its tenant is unknown: the sender hears why only about its own task
            said, named = told(wake.event, wake.tenant, task_id, str(exc))
        self.writes.finish(wake.event, "rejected", said, named, None, pinned=step.pinned)

    def _changed(self, wake: Wake, judge: Judge, cp: Checkpoint) -> None:
        """Log a change: its receipt (written in its transaction) or, for a deadline, the stage."""
        if wake.event is None:
            self.log("gate.deadline", task_id=cp.task_id, stage=cp.stage, reason=cp.business.last_refusal)
            return
        review = judge.review()
        status, reason = ("rejected", review) if review else ("accepted", f"task is {cp.stage}")
        self.log(
            "gate.receipt", task_id=cp.task_id, event_id=wake.event.event_id, status=status, reason=reason
        )

    def _kept(self, step: Taken, ruled: gate_rules.WakeRuling, cp: Checkpoint, source: Source) -> None:
        """Answer a ruling that wrote nothing to the task, `cp` as it was read."""
        wake, event = step.wake, step.wake.event
        finish = functools.partial(self.writes.finish, event, pinned=step.pinned)
        if isinstance(ruled, gate_rules.Stranger):
            assert event is not None  # only an event has a signer of another tenant
            # the answer the signer's own namespace gives, in a receipt outside this task's slot
            said, named = stranger(event, wake.tenant)
            metrics.wrong_tenant("gate")
            self.log("gate.wrong_tenant", task_id=cp.task_id, key_id=event.key_id, tenant=wake.tenant)
            return finish("rejected", said, named, None)
        if isinstance(ruled, Refuse):  # tell the sender at once, change nothing
            metrics.event_refused(ruled.reason)
            return finish("rejected", ruled.reason, cp.task_id, None)
        if isinstance(ruled, gate_rules.Incompatible):
            self._quarantine(step, ruled.detail)
            return finish("rejected", f"task quarantined: {ruled.detail}", wake.envelope.task_id, None)
        if isinstance(ruled, gate_rules.Frozen):
            return self._held(step, f"task is {ruled.freeze.said()}", source)
        # "run" on a ready task, or a deadline not due: nothing to write
        finish("accepted", f"task is {cp.stage}", cp.task_id, cp)
        return self.writes.follow_up(cp, wake)

    def _held(
        self, step: Taken, why: str, source: Source, marks: Sequence[Command] = (), fix: str = ""
    ) -> None:
        """Keep a frozen task's wake for the thaw, and tell its sender it is held, not refused. A
        deadline wake is not kept: the task is marked, and the thaw's own wake checks its waits.
        Nothing else is written (a hold re-registers no deadline: the timer would fire it again)."""
        if source.parts is None:
            raise StillFrozen()
        wake, task_id = step.wake, step.wake.envelope.task_id
        if wake.event and source.msg is not None and (full := gate_hold.full(task_id, step.held)):
            # Kept whole in the dead letters instead; the receipt stays "held" (undecided), so the
            # letter replayed after the thaw is judged then, not answered as decided.
            assert self.runner is not None
            self.runner.dead_letter(source.msg, full, task_id)
            said = f"held in the dead letters: {full}"
            return self.writes.finish(
                wake.event, "held", said, task_id, None, pinned=step.pinned, also=list(marks)
            )
        kept = [
            *gate_hold.hold_writes(
                task_id,
                gate_hold.record(source.parts) if wake.event else None,
                (source.msg.partition() or 0, source.msg.offset() or 0) if source.msg is not None else None,
            ),
            *marks,
        ]
        said = f"held: {why}; {fix or 'it runs when thawed'}"
        self.writes.finish(wake.event, "held", said, task_id, None, pinned=step.pinned, also=kept)
        self.log("gate.held", task_id=task_id, why=why)

    def _quarantine(self, step: Taken, detail: str) -> None:
        """Quarantine a task the deployed versions cannot run, under the WATCH of the read that
        judged it: the gate holds no lease, so a holder that took it since is not quarantined mid-step."""
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
        except (KeyringError, DecodeError) as exc:  # the follow-up waits for a worker with the key
            self.log("gate.unreadable", task_id=task_id, error=str(exc), fix=unreadable.fix_for(exc))
            return unreadable.mark(self.client, task_id)
        event_id = wake.event.event_id if wake.event else None
        self.log("gate.decided_before", task_id=cp.task_id, event_id=event_id)
        self.writes.finish(None, "", "", cp.task_id, cp, pinned=step.pinned)
        self.fair.after(cp, wake.auth)
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

    def _replay(self, held: gate_hold.Parts) -> str:
        return self._take(held, _REPLAY)

    def _dead_held(self, held: gate_hold.Parts, reason: str) -> str:
        return self._dead(None, held, reason)

    def _dead(self, msg: Message | None, parts: gate_hold.Parts, reason: str) -> str:
        """Dead-letter a wake: the message from Kafka, or a held one (`parts`) as the message it
        was, its bytes whole. Either way the gate is done with it (gate_hold.REPLAYED)."""
        assert self.runner is not None
        if msg is None:
            self.log("gate.held_dropped", reason=reason)
            self.runner.dead_letter(gate_hold.letter(parts), f"held wake: {reason}")
        else:
            self.runner.dead_letter(msg, reason)
        return gate_hold.REPLAYED


def main(settings: Settings, stop: threading.Event) -> None:
    # Local files first (keys, keyring, passwords): a missing one stops the role before any wait.
    keys = load_keys(settings, "gate")
    app = load_app(settings.app)
    store = wiring.store_for(settings, "gate", app)
    seal = signer_seal.load(settings, "gate")

    def build(producer: RunnerProducer, log: Log) -> Gate:
        wordings.deploy(store.client, app, stop, log)  # an egress widened for sleeping tasks stops it (D119)
        unreadable.wake_at_start(store.client, log)  # this gate may hold the key a task was sealed under now
        return Gate(
            store,
            producer,
            log,
            keys=keys,
            app=app,
            event_max_age=settings.event_max_age,
            events_retention_hours=settings.events_retention_hours,
            seal=seal,
        )

    def hooks(gate: Gate) -> Hooks:
        return Hooks(
            on_poison=gate.poisoned,
            between_batches=switch_acks.acker(gate.client, "gate", gate.log),
            pins=gate.pins,
        )

    run_role(settings, stop, "gate", topics.WAKE, build, hooks=hooks)
