"""Replaying a dead letter (`wakeful dlq replay`, docs/decisions.md D71), as pure code.

Which letter can be replayed how (`subject()` then `route()`), and the wrapper an operator signs to
vouch for a dead-lettered event past its max age (`wrap()`, `unwrap()`, `vouched()`). Nothing here
reads or writes: the door (workflow/door.py) and the gate (consumers/gate/wake.py) verify with it,
the CLI (operate/dlq/replay.py) decides with it.

A letter's input is replayed by the door it came through, never trusted because it was once seen:
- an upstream signed event (a door letter, or a gate letter whose wake carries one) is sent to
  wakeful.events again: as its own bytes while it is fresh and the door never marked it (it was
  not accepted, and no receipt answers it), else inside a wrapper the operator signs;
- a runtime message (a deadline wake, a proposal request, a proposal) carries a role's channel
  signature that nobody may forge: its task is woken instead, and the gate judges it afresh;
- anything else (an outbox entry, a digest, bytes that are no message) cannot be replayed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from wakeful.core.errors import DecodeError
from wakeful.producers.signing import Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.schemas.logs import DeadLetter
from wakeful.schemas.signatures import VerifyKey

LETTER_ID = re.compile(r"([0-9]{1,9}):([0-9]{1,19})")  # "<partition>:<offset>" on wakeful.dlq
# An event this close to its max age goes in a wrapper: it may be too old by the time the door reads it.
FRESH_MARGIN = timedelta(seconds=30)
DOOR, GATE = "inbound", "gate"
TASK_WAKERS = ("gate", "proposer", "executor")  # their letters hold a runtime message of one task


def letter_id(partition: int, offset: int) -> str:
    return f"{partition}:{offset}"


def parse_letter_id(text: str) -> tuple[int, int]:
    """(partition, offset) of a letter id; ValueError that says the form."""
    found = LETTER_ID.fullmatch(text)
    if found is None:
        raise ValueError(
            f"{text[:40]!r} is not a letter id: write <partition>:<offset>, as `wakeful dlq list` shows"
        )
    return int(found[1]), int(found[2])


@dataclass(frozen=True)
class EventInput:
    """The letter holds an upstream signed event: `raw` is its text exactly as it was signed and sent."""

    event: SignedEvent
    raw: str


@dataclass(frozen=True)
class TaskInput:
    """The letter holds a runtime message of one task: replay wakes the task."""

    task_id: str
    what: str  # what the message was, for the operator


@dataclass(frozen=True)
class Unreplayable:
    """Nothing can be replayed from the letter, and why; a replay of it writes nothing."""

    reason: str
    applied: bool = False  # nothing is left to replay: its task applied the event already


@dataclass(frozen=True)
class Republish:
    """Send the event's own bytes to wakeful.events again: the door judges it as on its first day."""

    event: SignedEvent
    raw: str
    action = "republished"


@dataclass(frozen=True)
class Wrap:
    """Send the event inside a wrapper the operator signs: the door waives only its max age."""

    event: SignedEvent
    raw: str
    action = "wrapped"


@dataclass(frozen=True)
class Wake:
    """Wake the task through the timer: the gate judges it afresh from its stored state."""

    task_id: str
    what: str
    action = "woke task"


Input = EventInput | TaskInput | Unreplayable
Plan = Republish | Wrap | Wake | Unreplayable


def subject(letter: DeadLetter) -> Input:
    """What a letter's input is, as far as a replay is concerned."""
    if letter.digest:
        return Unreplayable(
            f"only a digest of the input was kept ({letter.size} bytes, sha256 {letter.sha256}, from "
            f"{letter.topic}:{letter.partition}:{letter.offset}): the letter cannot carry it back"
        )
    if letter.raw_base64 is not None:
        return Unreplayable(
            "the input is not UTF-8 text, so it is neither a signed event nor a wakeful message"
        )
    if letter.source == DOOR:
        return _event(letter.raw, "the input")
    if letter.source in TASK_WAKERS:
        try:
            envelope = Envelope.decode(letter.raw.encode())
        except DecodeError as exc:
            return Unreplayable(f"the input is not a wakeful message: {exc.reason}")
        if letter.source == GATE and envelope.payload.get("reason") == "event":
            text = envelope.payload.get("event")
            if not isinstance(text, str):
                return Unreplayable("the wake says it carries an event, but holds no event text")
            return _event(text, "the wake's event")
        return TaskInput(envelope.task_id, f"{envelope.kind} {envelope.message_id}")
    if letter.source == "relay":
        return Unreplayable(
            "a relay letter holds an outbox entry that could not be published; the task's state "
            "already holds the change: read it with `wakeful task show`"
        )
    return Unreplayable(f"letters from {letter.source!r} hold nothing a replay can send")


def _event(text: str, what: str) -> EventInput | Unreplayable:
    raw = text.encode()
    if len(raw) > events.MAX_EVENT_BYTES:
        return Unreplayable(f"{what} is {len(raw)} bytes, over the {events.MAX_EVENT_BYTES}-byte event limit")
    try:
        event = SignedEvent.decode(raw)
    except DecodeError as exc:
        return Unreplayable(f"{what} is not a signed event: {exc.reason}")
    if event.kind == events.REPLAY:
        return Unreplayable("the input is itself a replay: replay the letter it names again (with --again)")
    return EventInput(event, text)


def route(found: Input, now: datetime, max_age: timedelta, *, marked: bool) -> Plan:
    """How to replay what subject() found. `marked`: the door accepted the event once (its
    identity is in the seen set) or a receipt answers it: its own bytes would be refused as a
    duplicate or taken for decided, so it goes in a wrapper whatever its age."""
    if isinstance(found, Unreplayable):
        return found
    if isinstance(found, TaskInput):
        return Wake(found.task_id, found.what)
    issued = _aware(found.event.issued_at)
    if not marked and issued >= now - max_age + FRESH_MARGIN and issued <= now + events.FUTURE_SKEW:
        return Republish(found.event, found.raw)
    return Wrap(found.event, found.raw)


def wrap(signer: Signer, event: SignedEvent, raw: str, letter: str, *, now: datetime) -> SignedEvent:
    """The operator's signed vouching for `event` (its text `raw`, exactly as it was signed), read
    from `letter`. It names what the event names, so it travels on the event's own partition."""
    return sign_event(
        signer,
        events.REPLAY,
        {"letter": letter, "event": raw},
        task_id=event.task_id,
        correlation_id=event.correlation_id,
        issued_at=now,
    )


def unwrap(wrapper: SignedEvent) -> tuple[SignedEvent, str] | str:
    """The event a wrapper carries, with its text; or why the wrapper is malformed."""
    payload = wrapper.payload
    if set(payload) != {"letter", "event"}:
        return "a replay's payload holds exactly `letter` and `event`"
    letter, text = payload["letter"], payload["event"]
    if not isinstance(letter, str) or LETTER_ID.fullmatch(letter) is None:
        return "a replay's `letter` is <partition>:<offset>"
    if not isinstance(text, str):
        return "a replay's `event` is the event's JSON text"
    found = _event(text, "the replayed event")
    if isinstance(found, Unreplayable):
        return found.reason
    inner = found.event
    if (wrapper.task_id, wrapper.correlation_id) != (inner.task_id, inner.correlation_id):
        return "a replay names the task and the wait its event names, and no other"
    return inner, text


def vouched(
    wrapper_text: str, event_text: str, key: VerifyKey | None, kinds: frozenset[str], *, tenant: str
) -> SignedEvent | str:
    """Behind the door: the wrapper a wake carries beside `event_text`, if it verifies against the
    live registry (`key`, `kinds`: its signer's record), may be sent by its signer, who is of the
    event's signer's `tenant`, and carries exactly that event; else why not. Its freshness is the
    caller's to hold to the door's verdict."""
    try:
        wrapper = SignedEvent.decode(wrapper_text.encode())
    except DecodeError as exc:
        return f"wake carries a malformed replay: {exc.reason}"
    if wrapper.kind != events.REPLAY:
        return f"wake carries a {wrapper.kind!r} where its replay should be"
    if key is None or not key.verify(wrapper):
        return f"wake carries a replay whose signature does not verify ({wrapper.key_id})"
    if events.REPLAY not in kinds:
        return f"key {wrapper.key_id} ({key.principal}) may not replay events"
    if key.tenant != tenant:
        return f"a replay by {key.principal} of tenant {key.tenant} of another tenant's event"
    inner = unwrap(wrapper)
    if isinstance(inner, str):
        return f"wake carries a malformed replay: {inner}"
    if inner[1] != event_text:
        return "wake carries a replay of another event than its own"
    return wrapper


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)
