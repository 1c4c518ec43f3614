"""Inbound: the door. Verify, decode once, dedupe, authorize the signer, resolve the task, wake it.

`judge()` is the pure part (workflow/door.py): raw bytes + the signer's registered key + now ->
Accepted or Refused; `judge_replay()` the same for an operator's replay of a dead letter. The
handler adds what needs Redis (seen-set, correlation lookup, receipts) and publishes a Wake keyed
by task id. A refused event goes to wakeful.dlq with its reason and never crashes the role.

An event's dedupe identity is (key id, event id): another signer cannot squat an id. The first
message with an identity in a batch wins; a later one in the same batch is a duplicate before
anything is written, as it is in a later batch once the first is marked seen.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from confluent_kafka import Message, Producer

from wakeful.authority import signer_seal
from wakeful.authority.signer_seal import SignerSeal
from wakeful.authority.snapshot import decode_signer
from wakeful.consumers.kafka import client as kafka_client
from wakeful.consumers.kafka.producing import RunnerProducer
from wakeful.consumers.kafka.role import Hooks, run_role
from wakeful.consumers.kafka.runner import Runner
from wakeful.core import ids, metrics, topics, tracing
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.core.settings import Settings
from wakeful.schemas import events
from wakeful.schemas import receipt as receipts
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.schemas.signatures import VerifyKey
from wakeful.sdk.app import load_app
from wakeful.state import acl, keys
from wakeful.workflow import replays
from wakeful.workflow.door import Accepted, Refused, Vouched, judge, judge_replay, parse

__all__ = ["Accepted", "Inbound", "Refused", "claim", "judge", "lookups", "main", "parse"]
Position = tuple[str, int, int]


def claim(claims: dict[str, Position], identity: str, position: Position) -> bool:
    """First occurrence wins within a batch: True if `identity` is now, or already was, claimed by
    the message at `position` (a retried or re-read message keeps its claim); False if an earlier
    message in the batch holds it."""
    return claims.setdefault(identity, position) == position


class Inbound:
    def __init__(
        self,
        client: redis.Redis,
        producer: Producer,
        log: Log,
        max_age: float,
        *,
        kinds: frozenset[str],
        seal: SignerSeal | None = None,
    ) -> None:
        self.kinds = kinds  # every event kind the loaded app knows
        self.seal = seal  # opens the HMAC signers' secrets (D91); without it no HMAC event verifies
        self.client = client
        self.producer = producer
        self.log = log
        self.max_age = timedelta(seconds=max_age)
        self.seen_ttl = keys.seen_ttl(max_age)  # past the max age an event is stale, never a repeat
        self.runner: Runner | None = None
        self.arrived = kafka_client.ArrivalClock(log)  # when an event reached Kafka
        # (key id, event id, the mark of the message that carried it) whose wake is published
        self._accepted: list[tuple[str, str, bytes]] = []
        self._claims: dict[str, Position] = {}  # this batch's identities -> the message holding each
        self._found: dict[Position, tuple[SignedEvent, list[Any]]] = {}  # before_batch()'s reads
        self._lock = threading.Lock()

    def before_batch(self, msgs: list[Message]) -> None:
        """Read what every event of the batch needs (lookups()) in one pipeline, for handle() to
        take. A read is only a read: an event whose lookups are not here (they failed, or the
        message is being retried) reads its own in handle()."""
        batch = [(_position(m), e) for m in msgs if not isinstance(e := parse(m.value() or b""), Refused)]
        try:
            replies = self._lookups([event for _, event in batch])
        except redis.RedisError as exc:
            self.log("inbound.batch_read_failed", error=repr(exc), events=len(batch))
            batch, replies = [], []
        found = {position: (event, r) for (position, event), r in zip(batch, replies, strict=True)}
        with self._lock:
            self._found = found

    def _lookups(self, batch: list[SignedEvent]) -> list[list[Any]]:
        """Each event's replies to lookups(), for all of them in one pipeline."""
        if not batch:
            return []
        pipe = self.client.pipeline(transaction=False)
        sizes = []
        for event in batch:
            reads = lookups(event)
            for command in reads:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            sizes.append(len(reads))
        replies, at, split = pipe.execute(), 0, []
        for n in sizes:
            split.append(replies[at : at + n])
            at += n
        return split

    def handle(self, msg: Message) -> None:
        with self._lock:
            read = self._found.pop(_position(msg), None)
        if read is None:
            parsed = parse(msg.value() or b"")
            if isinstance(parsed, Refused):
                return self._refuse(msg, parsed)
            read = (parsed, self._lookups([parsed])[0])
        sent, (signer_raw, seen, *found) = read
        corr = found[0] if sent.correlation_id else None
        key, kinds = _signer(sent.key_id, signer_raw, self.seal)
        # Freshness is judged at the moment the broker appended the event, so a backlog of any length
        # never makes accepted work stale (D84); a topic made before that judges by this clock.
        judged = self.arrived(msg)
        verdict = self._judge(sent, key, kinds, judged, found[-1] if found else None)
        if isinstance(verdict, Refused):
            return self._refuse(msg, verdict)
        # A replay's event is the one applied, under its own identity (D71); its wrapper only vouches:
        # the task's inbox, in the gate's compare-and-swap, keeps an applied event from applying twice.
        event = verdict.event
        # The receipt under this identity is the first message's: a duplicate writes nothing.
        duplicate = Refused(f"duplicate event {sent.event_id} from key {sent.key_id}", sent, code="duplicate")
        if seen:
            if seen == _mark(_position(msg)):
                # This very message, its wake on Kafka before its offset was committed (a broker
                # away at the commit): read again, not sent again. Nothing to refuse or redo.
                return self.log("inbound.read_again", event_id=sent.event_id, key_id=sent.key_id)
            return self._refuse(msg, duplicate, receipt=False)
        if event.correlation_id:
            # Another tenant's wait is, to this signer, no wait at all: the same answer, no task id.
            owner, task_id = keys.corr_target(corr) if isinstance(corr, bytes) else (None, "")
            if owner not in (None, verdict.tenant):
                metrics.wrong_tenant("inbound")
            if not task_id or owner not in (None, verdict.tenant):
                why = f"unknown correlation id {event.correlation_id!r}"
                unknown = Refused(why, sent, verdict.tenant, code="unknown_wait")
                return self._refuse(msg, unknown)
        else:
            assert event.task_id is not None  # judge() made sure an event names its task or its wait
            task_id = self._task(verdict.tenant, event)
        with self._lock:
            first = claim(self._claims, keys.event_identity(event.key_id, event.event_id), _position(msg))
        if not first:
            return self._refuse(msg, duplicate, receipt=False)
        tracing.stamp(task_id=task_id, event_kind=event.kind, event_id=event.event_id, tenant=verdict.tenant)
        text = (msg.value() or b"").decode()
        # The event exactly as it arrived (the gate verifies it again): no re-encoding. A replay's
        # wake carries its wrapper beside it, which the gate verifies too.
        carried = {"event": text} if event is sent else {"event": _inner_text(sent), "replay": text}
        wake = Envelope(
            message_id=event.event_id,
            task_id=task_id,
            task_version=0,
            kind="wake",
            created_at=judged,
            trace_id=event.event_id,
            payload={
                "reason": "event",
                "principal": verdict.principal,
                "judged_at": judged.isoformat(),  # the door's verdict: the gate holds the event to it
                **carried,
            },
        )
        self.producer.produce(topics.WAKE, key=task_id.encode(), value=wake.encode())
        fault("inbound.after_publish")
        with self._lock:
            at = _mark(_position(msg))
            self._accepted += list(
                dict.fromkeys([(sent.key_id, sent.event_id, at), (event.key_id, event.event_id, at)])
            )
        return None

    def _judge(
        self,
        event: SignedEvent,
        key: VerifyKey | None,
        kinds: frozenset[str],
        now: datetime,
        inner_raw: object,
    ) -> Accepted | Refused:
        """judge() for an event; judge_replay() for an operator's replay, whose inner event's signer
        record lookups() read last (`inner_raw`): the Accepted is then the inner event's."""
        if event.kind != events.REPLAY:
            return judge(event, key, kinds, now, self.max_age, known=self.kinds)
        inner = replays.unwrap(event)
        inner_key = (
            _signer(inner[0].key_id, inner_raw, self.seal)
            if not isinstance(inner, str)
            else (None, frozenset[str]())
        )
        vouched = judge_replay(event, key, kinds, inner_key, now=now, max_age=self.max_age, known=self.kinds)
        if isinstance(vouched, Vouched):
            self.log(
                "inbound.replay",
                event_id=vouched.inner.event.event_id,
                by=vouched.wrapper.principal,
                letter=vouched.letter,
                key_id=vouched.inner.event.key_id,
            )
            return vouched.inner
        return vouched

    def after_batch(self) -> None:
        """The wakes are on Kafka now: remember the events as seen (a replay guard, not the dedupe),
        each by the message that carried it (`_mark`), then forget the batch's claims. A batch read
        again (its output did not all reach Kafka) keeps its claims, so the same message wins again."""
        with self._lock:
            accepted = list(dict.fromkeys(self._accepted))
        if accepted:
            pipe = self.client.pipeline(transaction=False)
            for key_id, event_id, at in accepted:
                pipe.set(keys.seen(key_id, event_id), at, ex=self.seen_ttl)
            pipe.execute()
        with self._lock:
            self._accepted, self._claims = [], {}

    def poisoned(self, msg: Message, reason: str) -> None:
        """The runner dead-lettered msg after this role failed on it: a verified sender hears why."""
        parsed = parse(msg.value() or b"")
        if isinstance(parsed, Refused):
            return
        key, kinds = _signer(parsed.key_id, self.client.hget(keys.AUTH_SIGNERS, parsed.key_id), self.seal)
        verdict = judge(parsed, key, kinds, datetime.now(UTC), self.max_age, known=self.kinds)
        if verdict.tenant is not None:
            told = Refused(f"inbound could not take this event: {reason}", parsed, verdict.tenant)
            self._receipt(parsed, told.reason, told.task_id)

    def _refuse(self, msg: Message, refused: Refused, receipt: bool = True) -> None:
        assert self.runner is not None
        self.runner.dead_letter(msg, refused.reason, refused.task_id)
        # An unverified event's key id is only a claim: its refusal must not fill that key's receipt.
        if receipt and refused.event is not None and refused.tenant is not None:
            self._receipt(refused.event, refused.reason, refused.task_id)

    def _receipt(self, event: SignedEvent, reason: str, task_id: str | None) -> None:
        """In the slot of `task_id`, the task as the signer's tenant names it: never another tenant's."""
        self.client.set(
            keys.receipt(event.event_id, task_id, key_id=event.key_id),
            receipts.encode("rejected", reason, task_id, "inbound"),
            ex=keys.RECEIPT_TTL_S,
            nx=True,
        )

    def _task(self, tenant: str, event: SignedEvent) -> str:
        """The runtime's id of the task the event names, in its signer's tenant's namespace. A task
        of a tenant other than the default one made before the namespaces kept the id it was sent
        with: one EXISTS pair finds it (its events reach it still; a create always makes a new one)."""
        assert event.task_id is not None
        task_id = ids.task_in(tenant, event.task_id)
        if task_id == event.task_id or event.kind == events.CREATE:
            return task_id
        pipe = self.client.pipeline(transaction=False)
        pipe.exists(keys.state(task_id))
        pipe.exists(keys.state(event.task_id))
        scoped, legacy = pipe.execute()
        return event.task_id if legacy and not scoped else task_id


def lookups(event: SignedEvent) -> list[tuple[str, ...]]:
    """What judging an event reads: its signer's record, whether it was seen, and the task its
    correlation id names (no PING in its place: a cluster pipeline sends no keyless command)."""
    reads = [("HGET", keys.AUTH_SIGNERS, event.key_id), ("GET", keys.seen(event.key_id, event.event_id))]
    if event.correlation_id:
        reads.append(("GET", keys.corr(event.correlation_id)))
    inner = replays.unwrap(event) if event.kind == events.REPLAY else None
    if inner is not None and not isinstance(inner, str):  # a replay: its event's signer, last
        reads.append(("HGET", keys.AUTH_SIGNERS, inner[0].key_id))
    return reads


def _inner_text(sent: SignedEvent) -> str:
    """The text of the event inside a replay that judge_replay() accepted (`sent` is the wrapper)."""
    return str(sent.payload["event"])


def _position(msg: Message) -> Position:
    return (msg.topic() or "", msg.partition() or 0, msg.offset() or 0)


def _mark(at: Position) -> bytes:
    """What an event's seen key holds: the message that carried it, so that the same message read
    again (its offset not committed) is told from another copy of the event. A mark written before
    marks named their message ("1") names none: any copy read again is a duplicate, as before."""
    topic, partition, offset = at
    return f"{topic}:{partition}:{offset}".encode()


def _signer(key_id: str, raw: object, seal: SignerSeal | None) -> tuple[VerifyKey | None, frozenset[str]]:
    if not isinstance(raw, bytes):
        return None, frozenset()
    return decode_signer(key_id, raw, seal)


def main(settings: Settings, stop: threading.Event) -> None:
    client = acl.connect(settings, "inbound")  # its password before any wait on the broker
    seal = signer_seal.load(settings, "inbound")
    kinds = load_app(settings.app).kinds

    def build(producer: RunnerProducer, log: Log) -> Inbound:
        return Inbound(client, producer, log, settings.event_max_age, kinds=kinds, seal=seal)

    def hooks(inbound: Inbound) -> Hooks:
        return Hooks(
            before_batch=inbound.before_batch, after_batch=inbound.after_batch, on_poison=inbound.poisoned
        )

    run_role(settings, stop, "inbound", topics.EVENTS, build, hooks=hooks)
