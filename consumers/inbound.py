"""Inbound: the door. Verify, decode once, dedupe, authorize the signer, resolve the task, wake it.

`judge()` is the pure part: raw bytes + the signer's registered key + now -> Accepted or Refused.
The handler adds what needs Redis (seen-set, correlation lookup, receipts) and publishes a Wake
keyed by task id. A refused event goes to wakeful.dlq with its reason and never crashes the role.

An event's dedupe identity is (key id, event id): another signer cannot squat an id. The first
message with an identity in a batch wins; a later one in the same batch is a duplicate before
anything is written, as it is in a later batch once the first is marked seen.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
from confluent_kafka import Message, Producer

from wakeful.authority.snapshot import decode_signer
from wakeful.consumers.producing import RunnerProducer
from wakeful.consumers.role import Hooks, run_role
from wakeful.consumers.runner import Runner
from wakeful.core import ids, topics
from wakeful.core.errors import DecodeError
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.core.settings import Settings
from wakeful.producers.signing import VerifyKey
from wakeful.schemas import events
from wakeful.schemas import receipt as receipts
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.sdk.app import load_app
from wakeful.state import acl, keys


@dataclass(frozen=True)
class Accepted:
    event: SignedEvent
    principal: str
    tenant: str  # the signer's, from its registry record


@dataclass(frozen=True)
class Refused:
    """Refused at the door: dead-lettered with `reason`, and its sender told in a receipt."""

    reason: str
    event: SignedEvent | None = None
    # Set when its signature verified, to its key's tenant: only then does a receipt tell its sender.
    tenant: str | None = None

    @property
    def task_id(self) -> str | None:
        """The task it names as its signer's tenant names it (never another tenant's task of that id)."""
        named = self.event.task_id if self.event else None
        return ids.task_in(self.tenant, named) if named and self.tenant else named


Position = tuple[str, int, int]


def parse(raw: bytes) -> SignedEvent | Refused:
    if len(raw) > events.MAX_EVENT_BYTES:
        return Refused(f"malformed event: {len(raw)} bytes is over the {events.MAX_EVENT_BYTES}-byte limit")
    try:
        return SignedEvent.decode(raw)
    except DecodeError as exc:
        return Refused(f"malformed event: {exc.reason}")


def judge(
    event: SignedEvent,
    key: VerifyKey | None,
    kinds: frozenset[str],
    now: datetime,
    max_age: timedelta,
    *,
    known: frozenset[str],
) -> Accepted | Refused:
    """Gate 1 for one decoded event: signature by key id, freshness, and the signer's allowed kinds."""
    if key is None:
        return Refused(f"unknown key id {event.key_id!r}", event)
    if not key.verify(event):
        return Refused(f"bad signature for key id {event.key_id!r}", event)
    tenant = key.tenant
    issued = event.issued_at if event.issued_at.tzinfo else event.issued_at.replace(tzinfo=UTC)
    if issued < now - max_age:
        age = max_age.total_seconds()
        return Refused(f"event is too old: issued {issued.isoformat()}, max age {age:.0f}s", event, tenant)
    if issued > now + events.FUTURE_SKEW:
        return Refused(f"event is from the future: issued {issued.isoformat()}", event, tenant)
    if event.kind not in known:  # the runtime's kinds and the loaded app's own
        return Refused(f"unknown event kind {event.kind!r}", event, tenant)
    if event.kind not in kinds:
        return Refused(f"key {event.key_id!r} ({key.principal}) may not send {event.kind}", event, tenant)
    if event.kind != events.APPROVE and not event.task_id:
        return Refused(f"{event.kind} must name its task_id", event, tenant)
    if event.kind == events.APPROVE and not (event.correlation_id or event.task_id):
        return Refused("an approval must carry the correlation id of the wait it answers", event, tenant)
    return Accepted(event, key.principal, key.tenant)


def claim(claims: dict[str, Position], identity: str, position: Position) -> bool:
    """First occurrence wins within a batch: True if `identity` is now, or already was, claimed by
    the message at `position` (a retried or re-read message keeps its claim); False if an earlier
    message in the batch holds it."""
    return claims.setdefault(identity, position) == position


class Inbound:
    def __init__(
        self, client: redis.Redis, producer: Producer, log: Log, max_age: float, *, kinds: frozenset[str]
    ) -> None:
        self.kinds = kinds  # every event kind the loaded app knows
        self.client = client
        self.producer = producer
        self.log = log
        self.max_age = timedelta(seconds=max_age)
        self.runner: Runner | None = None
        self._accepted: list[tuple[str, str]] = []  # (key id, event id) whose wake is published
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
        event, (signer_raw, seen, *found) = read
        corr = found[0] if found else None
        key, kinds = _signer(event.key_id, signer_raw)
        judged = datetime.now(UTC)  # one clock reading: the verdict the wake carries is this one
        verdict = judge(event, key, kinds, judged, self.max_age, known=self.kinds)
        if isinstance(verdict, Refused):
            return self._refuse(msg, verdict)
        # The receipt under this identity is the first message's: a duplicate writes nothing.
        duplicate = Refused(f"duplicate event {event.event_id} from key {event.key_id}", event)
        if seen:
            return self._refuse(msg, duplicate, receipt=False)
        if event.correlation_id:
            # Another tenant's wait is, to this signer, no wait at all: the same answer, no task id.
            owner, task_id = keys.corr_target(corr) if isinstance(corr, bytes) else (None, "")
            if not task_id or owner not in (None, verdict.tenant):
                unknown = Refused(f"unknown correlation id {event.correlation_id!r}", event, verdict.tenant)
                return self._refuse(msg, unknown)
        else:
            assert event.task_id is not None  # judge() made sure an event names its task or its wait
            task_id = self._task(verdict.tenant, event)
        with self._lock:
            first = claim(self._claims, keys.event_identity(event.key_id, event.event_id), _position(msg))
        if not first:
            return self._refuse(msg, duplicate, receipt=False)
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
                # The event exactly as it arrived (the gate verifies it again): no re-encoding.
                "event": (msg.value() or b"").decode(),
            },
        )
        self.producer.produce(topics.WAKE, key=task_id.encode(), value=wake.encode())
        fault("inbound.after_publish")
        with self._lock:
            self._accepted.append((event.key_id, event.event_id))
        return None

    def after_batch(self) -> None:
        """The wakes are on Kafka now: remember the events as seen (a replay guard, not the dedupe),
        then forget the batch's claims. A batch read again (its output did not all reach Kafka) keeps
        its claims, so the same message wins again."""
        with self._lock:
            accepted = list(dict.fromkeys(self._accepted))
        if accepted:
            pipe = self.client.pipeline(transaction=False)
            for key_id, event_id in accepted:
                pipe.set(keys.seen(key_id, event_id), 1, ex=keys.SEEN_TTL_S)
            pipe.execute()
        with self._lock:
            self._accepted, self._claims = [], {}

    def poisoned(self, msg: Message, reason: str) -> None:
        """The runner dead-lettered msg after this role failed on it: a verified sender hears why."""
        parsed = parse(msg.value() or b"")
        if isinstance(parsed, Refused):
            return
        key, kinds = _signer(parsed.key_id, self.client.hget(keys.AUTH_SIGNERS, parsed.key_id))
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
    reads = [("HGET", keys.AUTH_SIGNERS, event.key_id), ("EXISTS", keys.seen(event.key_id, event.event_id))]
    if event.correlation_id:
        reads.append(("GET", keys.corr(event.correlation_id)))
    return reads


def _position(msg: Message) -> Position:
    return (msg.topic() or "", msg.partition() or 0, msg.offset() or 0)


def _signer(key_id: str, raw: object) -> tuple[VerifyKey | None, frozenset[str]]:
    if not isinstance(raw, bytes):
        return None, frozenset()
    return decode_signer(key_id, raw)


def main(settings: Settings, stop: threading.Event) -> None:
    client = acl.connect(settings, "inbound")  # its password before any wait on the broker
    kinds = load_app(settings.app).kinds

    def build(producer: RunnerProducer, log: Log) -> Inbound:
        return Inbound(client, producer, log, settings.event_max_age, kinds=kinds)

    def hooks(inbound: Inbound) -> Hooks:
        return Hooks(
            before_batch=inbound.before_batch, after_batch=inbound.after_batch, on_poison=inbound.poisoned
        )

    run_role(settings, stop, "inbound", topics.EVENTS, build, hooks=hooks)
