"""`wakeful dlq replay`: a dead letter's input sent again by the door it came through, after its
cause is fixed, re-verified and never trusted because it was once seen (docs/decisions.md D71).

workflow/replays.py decides how (pure); this reads what the decision needs from the live store
(the operator's key, the event's signer, whether the door marked the event, whether its task
applied it), claims the replay in its record (state/replays.py), then does it: the event's own bytes
to wakeful.events, the event inside the operator's signed wrapper, or the task woken through the
timer. Anything refused writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from wakeful.core import ids, kafka_auth, topics
from wakeful.core.errors import WakefulError
from wakeful.core.log import Log, librdkafka_config
from wakeful.operate.client import Client
from wakeful.operate.dlq.read import DlqReader, Letter
from wakeful.producers.keys import public_bytes
from wakeful.producers.signing import Ed25519Signer
from wakeful.schemas import events
from wakeful.schemas.events import SignedEvent
from wakeful.state import keys
from wakeful.state.replays import FAILED, Replay, ReplayStore
from wakeful.workflow import replays
from wakeful.workflow.replays import EventInput, Plan, Republish, Unreplayable, Wake, Wrap

SEND_TIMEOUT_S = 15.0


class NotReplayable(WakefulError):
    """The letter cannot be replayed (now, or ever): the message says why and what to do."""


class AppliedAlready(NotReplayable):
    """The letter's event was applied by its task already: there is nothing left to replay."""


@dataclass(frozen=True)
class Done:
    """What a replay did (or, dry, would do)."""

    letter: Letter
    plan: Plan
    record: Replay
    dry_run: bool
    wrapper: SignedEvent | None = None

    def as_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"letter": self.letter.id, "dry_run": self.dry_run, **self.record.__dict__}
        if self.wrapper is not None:
            doc["wrapper"] = {"event_id": self.wrapper.event_id, "key_id": self.wrapper.key_id}
        return doc


class Replayer:
    def __init__(self, client: Client, reader: DlqReader) -> None:
        self.client = client
        self.reader = reader
        self.store = ReplayStore(client.admin)
        self.max_age = timedelta(seconds=client.settings.event_max_age)
        self.log = Log(role="dlq")
        self._producer: Producer | None = None

    def operator(self, by: str) -> Ed25519Signer:
        """`by`'s key from the local keystore, if it is the key registered for `by` and that key may
        send event.replay; else a WakefulError that says what to do."""
        signer = self.client.signer(by)  # no key in the keystore: says how to make one
        found = self.client.authority.signer(signer.key_id)
        add = f"`wakeful authority signers add {by} --kinds {events.REPLAY}` (with any kinds it has already)"
        if found is None:
            raise WakefulError(
                f"{by} has no registered signer key (revoked, or never added): register it with {add}"
            )
        key, kinds = found
        if key.material != public_bytes(signer):
            raise WakefulError(
                f"the key for {by} in {self.client.keystore()} is not the one registered for {by}"
            )
        if events.REPLAY not in kinds:
            raise WakefulError(
                f"{by} may not replay dead letters: its key may send {', '.join(sorted(kinds))}; {add}"
            )
        return signer

    def plan(self, letter: Letter) -> tuple[Plan, str]:
        """How `letter` would be replayed now, and the task it concerns ("" when unknown)."""
        if letter.letter is None:
            return Unreplayable(f"the letter does not decode ({letter.problem})"), ""
        found = replays.subject(letter.letter)
        if isinstance(found, EventInput):
            return self._event_plan(found)
        plan = replays.route(found, datetime.now(UTC), self.max_age, marked=False)
        if isinstance(plan, Wake) and not self.client.admin.exists(keys.state(plan.task_id)):
            return Unreplayable(f"task {plan.task_id} does not exist: there is nothing to wake"), plan.task_id
        return plan, plan.task_id if isinstance(plan, Wake) else ""

    def _event_plan(self, found: EventInput) -> tuple[Plan, str]:
        event, admin = found.event, self.client.admin
        signer = self.client.authority.signer(event.key_id)
        if signer is None:
            return Unreplayable(
                f"the event's key {event.key_id} is not registered (never added, or revoked): the door would "
                "refuse it again; register its signer first (`wakeful authority signers add`)"
            ), ""
        if not signer[0].verify(event):  # the door would refuse it too: say so before anything is sent
            return Unreplayable(
                f"the event's signature does not verify against key {event.key_id} as registered now: the "
                "letter was altered, or the key was replaced since"
            ), ""
        task = self._task(event, signer[0].tenant)
        identity = keys.event_identity(event.key_id, event.event_id)
        if task and admin.sismember(keys.inbox(task), identity):
            return Unreplayable(
                f"task {task} applied event {event.event_id} already: it is not applied twice", applied=True
            ), task
        receipts = [keys.receipt(event.event_id, None, key_id=event.key_id)]
        if task:
            receipts.append(keys.receipt(event.event_id, task, key_id=event.key_id))
        marked = bool(admin.exists(keys.seen(event.key_id, event.event_id), *receipts))
        return replays.route(found, datetime.now(UTC), self.max_age, marked=marked), task

    def _task(self, event: SignedEvent, tenant: str) -> str:
        """The runtime's id of the task the event names, or whose wait it answers; "" if none is found."""
        if event.task_id:
            return ids.task_in(tenant, event.task_id)
        raw = self.client.admin.get(keys.corr(event.correlation_id)) if event.correlation_id else None
        return keys.corr_target(raw)[1] if isinstance(raw, bytes) else ""

    def replay(self, letter_id: str, by: str, reason: str, *, dry_run: bool, again: bool) -> Done:
        signer = self.operator(by)
        return self.replay_letter(
            self.reader.one(letter_id), signer, by, reason, dry_run=dry_run, again=again
        )

    def replay_letter(
        self, letter: Letter, signer: Ed25519Signer, by: str, reason: str, *, dry_run: bool, again: bool
    ) -> Done:
        """Replay `letter` as `by` (whose key operator() gave as `signer`): the one path of a
        single replay and of each letter of a bulk one."""
        self.store.check(letter.id, again=again)
        plan, task = self.plan(letter)
        if isinstance(plan, Unreplayable):
            refused = AppliedAlready if plan.applied else NotReplayable
            raise refused(f"letter {letter.id} cannot be replayed: {plan.reason}")
        at = datetime.now(UTC)
        event = plan.event if isinstance(plan, Republish | Wrap) else None
        wrapper = (
            replays.wrap(signer, plan.event, plan.raw, letter.id, now=at) if isinstance(plan, Wrap) else None
        )
        if wrapper is not None and len(wrapper.encode()) > events.MAX_EVENT_BYTES:
            raise NotReplayable(
                f"letter {letter.id}: its event is too large to travel inside a replay wrapper"
            )
        record = Replay(
            letter=letter.id,
            by=by,
            reason=reason,
            at=at.isoformat(),
            action=plan.action,
            event=keys.event_identity(event.key_id, event.event_id) if event else "",
            task=task,
            wrapper=wrapper.event_id if wrapper else "",
        )
        done = Done(letter, plan, record, dry_run, wrapper)
        if dry_run:
            return done
        self.store.claim(record, again=again)  # ReplayedAlready: nothing written
        try:
            self._act(plan, wrapper, at)
        except Exception as exc:
            self.store.add(Replay(**{**record.__dict__, "action": f"{FAILED}: {exc}"}))
            raise
        fields = {("identity" if k == "event" else k): v for k, v in record.__dict__.items()}
        self.log("dlq.replayed", **fields)  # `event` names the log line itself
        return done

    def _act(self, plan: Plan, wrapper: SignedEvent | None, at: datetime) -> None:
        if isinstance(plan, Wake):
            now_ms = int(at.timestamp() * 1000)  # as authority/store.py wake_held: due now, for the timer
            self.client.admin.zadd(keys.DEADLINES, {f"{plan.task_id}|{now_ms}": now_ms})
        elif isinstance(plan, Republish):
            self._send(plan.event.routing_key, plan.raw.encode())
        elif wrapper is not None:
            self._send(wrapper.routing_key, wrapper.encode())

    def _send(self, key: str, value: bytes) -> None:
        """One message to wakeful.events, as the admin, delivered or a WakefulError."""
        if self._producer is None:  # one for every replay of a bulk run
            config = kafka_auth.client_config(self.client.settings, kafka_auth.ADMIN) | librdkafka_config()
            self._producer = Producer(config | {"enable.idempotence": True, "linger.ms": 0})
        producer = self._producer
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        producer.produce(topics.EVENTS, key=key.encode(), value=value, on_delivery=delivered)
        if producer.flush(SEND_TIMEOUT_S) > 0:
            raise WakefulError(f"{topics.EVENTS} did not take the replay within {SEND_TIMEOUT_S:.0f}s")
        if errors:
            raise WakefulError(f"{topics.EVENTS} refused the replay: {errors[0].str()}")
