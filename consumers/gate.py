"""The gate: gates 2 to 6 for every Wake, then the event applied to Progress by compare-and-swap.

For each wake: take the task's lease; re-verify the event's signature against the live signer
registry; load and verify the state; check policy and tool-catalog compatibility by the declared
rule; let the refund workflow decide (authorization, bound versions and approvals read live); apply
the decision with `transition()`; when the task is ready, assemble the window and publish a
ProposalRequest. What to publish is derived from the stored state, so a wake redelivered after a
crash between the CAS and the publish publishes again (downstream dedupes by message id).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
import redis
from confluent_kafka import Consumer, Message, Producer

from wakeful.authority.store import AuthorityStore, Snapshot, decode_signer
from wakeful.consumers.runner import Runner, consumer_config, producer_config
from wakeful.core import topics
from wakeful.core.errors import (
    DecodeError,
    IntegrityError,
    KeyringError,
    LeaseBusy,
    StaleVersion,
    TaskExists,
    TaskNotFound,
    TaskQuarantined,
)
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.core.retry import Retry
from wakeful.core.settings import Settings
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.schemas.stage import Stage
from wakeful.state import keys, wiring
from wakeful.state.lease import Lease, Leases
from wakeful.state.store import Store
from wakeful.workflow import refund, window

TENANT = "default"


@dataclass(frozen=True)
class Wake:
    envelope: Envelope
    event: SignedEvent | None
    principal: str | None


class Gate:
    def __init__(self, store: Store, leases: Leases, producer: Producer, log: Log) -> None:
        self.store = store
        self.client: redis.Redis = store.client
        self.authority = AuthorityStore(store.client)
        self.leases = leases
        self.producer = producer
        self.log = log
        self.runner: Runner | None = None

    # ---- the handler ---------------------------------------------------------------------------

    def handle(self, msg: Message) -> None:
        try:
            envelope = Envelope.decode(msg.value() or b"")
        except DecodeError as exc:
            self._dead(msg, f"malformed wake: {exc.reason}")
            return None
        wake = self._authenticate(msg, envelope)
        if wake is None:
            return None
        task_id = envelope.task_id
        fault("gate.before_lease")
        try:
            lease = self.leases.acquire(task_id)
        except LeaseBusy:
            raise Retry("task lease is held by another worker", after=0.05) from None
        try:
            fault("gate.after_lease")
            self._apply(wake, lease)
        finally:
            self.leases.release(lease)
        return None

    def _authenticate(self, msg: Message, envelope: Envelope) -> Wake | None:
        """Gate 1 again, behind the door: a wake is only as good as the signed event inside it."""
        reason = envelope.payload.get("reason")
        if reason == "deadline":
            return Wake(envelope, None, None)  # trusted only as far as the stored deadline says
        if reason != "event":
            self._dead(msg, f"wake with unknown reason {reason!r}")
            return None
        try:
            event = SignedEvent.decode(orjson.dumps(envelope.payload.get("event")))
        except DecodeError as exc:
            self._dead(msg, f"wake carries a malformed event: {exc.reason}")
            return None
        raw = self.client.hget(keys.AUTH_SIGNERS, event.key_id)
        key = decode_signer(event.key_id, raw)[0] if isinstance(raw, bytes) else None
        if key is None or not key.verify(event):
            self._dead(msg, f"wake carries an event whose signature does not verify ({event.key_id})")
            return None
        if event.event_id != envelope.message_id:
            self._dead(msg, "wake message id does not match its event")
            return None
        return Wake(envelope, event, key.principal)

    def _apply(self, wake: Wake, lease: Lease) -> None:
        env, event = wake.envelope, wake.event
        auth = self.authority.snapshot()
        now = datetime.now(UTC)
        if event is not None and event.kind == events.CREATE:
            return self._create(wake, auth, now)
        try:
            cp = self.store.load(env.task_id)
        except TaskNotFound:
            return self._receipt(event, "rejected", f"no task {env.task_id}", env.task_id)
        except (TaskQuarantined, IntegrityError) as exc:
            return self._receipt(event, "rejected", str(exc), env.task_id)
        except (KeyringError, DecodeError) as exc:
            # Not tampering, but this worker cannot read the task: park the message loudly.
            raise Retry(f"cannot read task {env.task_id}: {exc}", after=5.0) from exc
        fault("gate.after_load")
        compatible = self._compatible(cp, auth, env.message_id, lease)
        if compatible is None:
            return self._receipt(event, "rejected", "task quarantined: incompatible versions", env.task_id)
        cp = compatible
        if event is None:
            return self._deadline(cp, env, lease, now)
        if wake.principal is None:
            return None
        decided = self._decide(cp, event, wake.principal, auth, now)
        if decided is None:  # "run" on a ready task: nothing to write, just ask for a proposal again
            self._receipt(event, "accepted", "ready; proposal requested", cp.task_id, cp)
            return self._follow_up(cp, auth, event)
        if isinstance(decided, refund.Refusal):
            fn = (
                (lambda c: refund.review(c, decided.reason))
                if decided.review
                else (lambda c: refund.refused(c, decided.reason))
            )
            out = self._transition(
                cp, event.event_id, fn, lease, {"event": event.kind, "refused": decided.reason}
            )
            return self._receipt(event, "rejected", decided.reason, cp.task_id, out)
        self._register_wait(decided)
        out = self._transition(cp, event.event_id, lambda _: decided, lease, {"event": event.kind})
        fault("gate.after_cas")
        self._receipt(event, "accepted", f"task is {out.stage.value}", cp.task_id, out)
        return self._follow_up(out, auth, event)

    # ---- decisions -------------------------------------------------------------------------------

    def _decide(
        self, cp: Checkpoint, event: SignedEvent, principal: str, auth: Snapshot, now: datetime
    ) -> Checkpoint | refund.Refusal | None:
        if event.kind == events.APPROVE:
            return refund.approve(cp, principal, event.payload.get("version"), auth, now)
        if event.kind == events.AMEND:
            if principal != refund.requester(cp):
                return refund.Refusal(f"{principal} did not request this refund and may not amend it")
            return refund.amend(cp, event.payload, auth, now)
        if event.kind == events.RUN:
            return refund.run(cp)
        return refund.Refusal(f"{event.kind} does not apply to an existing task")

    def _create(self, wake: Wake, auth: Snapshot, now: datetime) -> None:
        event, task_id = wake.event, wake.envelope.task_id
        assert event is not None and wake.principal is not None
        decided = refund.create(task_id, wake.principal, TENANT, event.payload, auth=auth, now=now)
        if isinstance(decided, refund.Refusal):
            return self._receipt(event, "rejected", decided.reason, task_id)
        note = event.payload.get("note")
        if isinstance(note, str) and note:
            self.client.hset(keys.evidence(task_id), f"evidence:{task_id}:note", note[:10_000])
        self._register_wait(decided)
        try:
            out = self.store.create(decided, event.event_id, {"event": event.kind}).checkpoint
        except TaskExists:
            return self._receipt(event, "rejected", f"task {task_id} already exists", task_id)
        fault("gate.after_cas")
        self._receipt(event, "accepted", f"task is {out.stage.value}", task_id, out)
        return self._follow_up(out, auth, event)

    def _deadline(self, cp: Checkpoint, env: Envelope, lease: Lease, now: datetime) -> None:
        decided = refund.deadline(cp, now)
        if decided is None:
            return None  # not due (or no longer waiting): a stale or early deadline wake
        out = self._transition(
            cp, env.message_id, lambda c: refund.deadline(c, now) or c, lease, {"event": "deadline"}
        )
        self.log("gate.deadline", task_id=cp.task_id, stage=out.stage.value, reason=out.business.last_refusal)
        return None

    def _compatible(self, cp: Checkpoint, auth: Snapshot, message_id: str, lease: Lease) -> Checkpoint | None:
        """Gate 4: the versions the task started with against what is deployed, by declared rule."""
        changed = {
            name: (stamped, live)
            for name, stamped, live in (
                ("policy", cp.versions.policy, auth.policy),
                ("tool_catalog", cp.versions.tool_catalog, auth.tool_catalog),
            )
            if stamped != live
        }
        rules = {name: auth.compat.get(name, "quarantine") for name in changed}
        if not changed or all(rule == "pin" for rule in rules.values()):
            return cp
        if any(rule == "quarantine" for rule in rules.values()):
            detail = ", ".join(f"{n} {a} -> {b} ({rules[n]})" for n, (a, b) in changed.items())
            self.store.quarantine(cp.task_id, "incompatible", detail)
            self.log("gate.quarantined", task_id=cp.task_id, detail=detail)
            return None
        update = {name: live for name, (_, live) in changed.items() if rules[name] == "migrate"}
        out = self.store.transition(
            cp.task_id,
            cp.state_version,
            f"restamp:{message_id}",
            lambda c: c.model_copy(update={"versions": c.versions.model_copy(update=update)}),
            lease=lease,
            detail={"restamped": update},
            restamp=True,
        )
        return out.checkpoint

    # ---- effects -------------------------------------------------------------------------------

    def _transition(
        self, cp: Checkpoint, message_id: str, fn: Any, lease: Lease, detail: dict[str, Any]
    ) -> Checkpoint:
        try:
            return self.store.transition(
                cp.task_id, cp.state_version, message_id, fn, lease=lease, detail=detail
            ).checkpoint
        except StaleVersion as exc:
            raise Retry(str(exc)) from exc

    def _register_wait(self, cp: Checkpoint) -> None:
        """Before the CAS: a waiting task always has its deadline and its correlation id on record."""
        if not cp.execution.pending_waits:
            return
        pipe = self.client.pipeline(transaction=False)
        for wait in cp.execution.pending_waits:
            due_ms = int(wait.deadline.timestamp() * 1000)
            pipe.zadd(keys.DEADLINES, {f"{cp.task_id}|{due_ms}": due_ms})
            pipe.set(keys.corr(wait.correlation_id), cp.task_id)
        pipe.execute()

    def _follow_up(self, cp: Checkpoint, auth: Snapshot, event: SignedEvent | None) -> None:
        if cp.stage is not Stage.READY:
            return
        evidence = {
            k.decode(): v.decode("utf-8", "replace")
            for k, v in _bytes_map(self.client.hgetall(keys.evidence(cp.task_id)))
        }
        recent = [f"{event.kind} by key {event.key_id} at {event.issued_at.isoformat()}"] if event else []
        body = window.build(cp, auth, recent, evidence, memory=[])
        request = Envelope(
            message_id=f"propreq:{cp.task_id}:{cp.state_version}",
            task_id=cp.task_id,
            task_version=cp.state_version,
            kind="proposal.request",
            created_at=datetime.now(UTC),
            trace_id=event.event_id if event else cp.task_id,
            payload={"window": body},
        )
        self.producer.produce(topics.PROPOSALS_REQUEST, key=cp.task_id.encode(), value=request.encode())

    def _receipt(
        self, event: SignedEvent | None, status: str, reason: str, task_id: str, cp: Checkpoint | None = None
    ) -> None:
        if event is None:
            return
        doc: dict[str, Any] = {"status": status, "reason": reason, "task_id": task_id, "by": "gate"}
        if cp is not None:
            doc |= {
                "stage": cp.stage.value,
                "version": cp.business.version,
                "state_version": cp.state_version,
            }
        self.client.set(keys.receipt(event.event_id), orjson.dumps(doc), ex=keys.RECEIPT_TTL_S)
        self.log("gate.receipt", task_id=task_id, event_id=event.event_id, status=status, reason=reason)

    def _dead(self, msg: Message, reason: str) -> None:
        assert self.runner is not None
        self.runner.dead_letter(msg, reason)


def main(settings: Settings, stop: threading.Event) -> None:
    log = Log(role="gate")
    producer = Producer(producer_config(settings))
    gate = Gate(wiring.store_for(settings, "gate"), wiring.leases_for(settings, "gate"), producer, log)
    runner = Runner(
        "gate",
        topics.WAKE,
        gate.handle,
        Consumer(consumer_config(settings, "wakeful-gate")),
        producer,
        log=log,
        threads=settings.threads,
    )
    gate.runner = runner
    log("role.start")
    runner.run(stop)


def _bytes_map(reply: object) -> list[tuple[bytes, bytes]]:
    """HGETALL's reply as bytes pairs (the client never decodes responses)."""
    assert isinstance(reply, dict)
    return [(k, v) for k, v in reply.items() if isinstance(k, bytes) and isinstance(v, bytes)]
