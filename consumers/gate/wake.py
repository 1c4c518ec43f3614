"""A wake behind the door: gate 1 again, with the authority read in the task's first step.

A wake is only as good as the signed event inside it, and only the role that judges that kind of
wake may send it. `authenticate()` re-verifies the event against the live signer registry in the
round trip that takes the WATCH of the change to come and reads the task, the live authority
snapshot, the task's evidence and the event's receipt; what it finds comes back as a `Wake`, or as
the reason to dead-letter the message. The gate takes no lease: its change calls nothing outside
Redis, so it needs the task's lease free and WATCHed instead, and waits while another worker holds
it (docs/decisions.md D49). `verified_event()` finds whom to tell when the gate fails on a wake.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from confluent_kafka import Message

from wakeful.authority.kept import Kept
from wakeful.authority.signer_seal import SignerSeal
from wakeful.authority.snapshot import Snapshot, decode_signer
from wakeful.authority.store import AuthorityStore
from wakeful.consumers.gate import reads as wake_reads
from wakeful.consumers.gate import rules as gate_rules
from wakeful.core import ids, topics
from wakeful.core.errors import DecodeError
from wakeful.core.provenance import Forged, RoleKeys
from wakeful.core.retry import Retry
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.schemas.signatures import VerifyKey
from wakeful.sdk.app import App
from wakeful.state import checks, first_step, keys
from wakeful.state.evidence import excerpt
from wakeful.state.pinned import Pinned
from wakeful.state.replies import hash_reply
from wakeful.workflow import pending, replays

WAKE_SENDER = {"event": "inbound", "deadline": "timer"}  # who judged what the wake says
HELD_RECEIPT = b'{"status":"held"'  # how a held wake's receipt begins (schemas/receipt.encode)


@dataclass(frozen=True)
class Wake:
    """A wake that passed authentication, with what was read live in the round trip that did it."""

    envelope: Envelope
    event: SignedEvent | None  # None for a deadline wake
    principal: str | None
    auth: Snapshot
    evidence: dict[str, str]
    answered: bool = False  # its event has a receipt: it was decided before, whatever the outcome
    # (but "held": decided())
    tenant: str = ""  # the signer's tenant, from its registry record ("" for a deadline wake)


@dataclass(frozen=True)
class Untrusted:
    """The wake fails authentication: it goes to the dead-letter topic with this reason."""

    reason: str


@dataclass(frozen=True)
class Taken:
    """An authenticated wake, and its task as read with the lease free, WATCHed on `pinned` for
    the change to come."""

    wake: Wake
    pinned: Pinned
    first: list[Any]  # the replies to first_step.reads(task, identity): the change's first step, done
    ops: Any  # the task's action log (HGETALL), for an event gate_rules.needs_started(); else None
    held: int = 0  # wakes a freeze held for the task, waiting to be replayed (state/keys.py)

    def started(self) -> frozenset[str]:
        """Op keys whose effect has started (an intent that did not fail): money may have moved.
        Read while no one held the task's lease, WATCHed until the change's EXEC: an executor must
        take it to add one (begin checks), which aborts that EXEC."""
        return frozenset(k for k, e in self.entries.items() if e.status is not ActionStatus.FAILED)

    def recorded(self) -> dict[str, Mapping[str, Any]]:
        """The outcome of each call that succeeded, by op key (pending.outcomes), read with
        started(): a reopen waits again on a call whose answer comes later."""
        return pending.outcomes(self.entries)

    @functools.cached_property
    def entries(self) -> dict[str, ActionLogEntry]:
        """The task's action log as read, by op key (empty unless the event's kind needs it)."""
        found = hash_reply(self.ops).items() if self.ops is not None else ()
        return {k.decode(): ActionLogEntry.decode(v) for k, v in found}


def authenticate(
    envelope: Envelope,
    sender: str,
    pinned: Pinned,
    *,
    max_age: timedelta,
    keep: timedelta,
    appended: datetime | None,
    app: App,
    kept: Kept,
    seal: SignerSeal | None,
) -> Taken | Untrusted:
    """Gate 1 again, behind the door: a wake is only as good as the signed event inside it, and
    only the role that judges that kind of wake may send it. One round trip on `pinned` WATCHes and
    reads the task (first_step.reads) and reads the live authority, the task's evidence and the
    event's receipt. A task whose lease another worker holds is retried with nothing judged: what
    was read may straddle that worker's EXEC. A wake that fails comes back `Untrusted`, with why."""
    claimed = _claimed(envelope, sender)
    if isinstance(claimed, Untrusted):
        return claimed
    event, replay = claimed
    task_id = envelope.task_id
    ask = kept.ask()  # the authority token, and the Snapshot's reads unless one is kept
    asked = wake_reads.asked(task_id, event, replay)
    replies = pinned.batch(
        [*first_step.reads(task_id, identity(envelope, event)), *ask.commands, *wake_reads.commands(asked)]
    )
    first, rest = replies[: first_step.READS], replies[first_step.READS :]
    checks.raise_replies(task_id, *first[: first_step.WATCHED])
    if first_step.watched(first)[2] is not None:
        raise Retry("task lease is held by another worker", after=0.005)
    checks.raise_replies(task_id, *rest)
    # A policy version this process has not parsed yet, or a token that moved: one more round trip.
    auth = kept.snapshot(ask, rest[: len(ask.commands)], pinned.batch)
    got = wake_reads.got(asked, rest[len(ask.commands) :])
    found = hash_reply(got.evidence).items()
    evidence = {k.decode(): excerpt(v.decode("utf-8", "replace")) for k, v in found}
    held = int(got.held or 0)
    if event is None:
        return Taken(Wake(envelope, None, None, auth, evidence), pinned, first, None, held)
    judged = _verified(envelope, event, replay, got, seal, max_age=max_age, keep=keep, appended=appended)
    if isinstance(judged, Untrusted):
        return judged
    key, vouched = judged
    # A replay is judged afresh: a receipt (a refusal writes nothing else) does not make it decided;
    # the task's inbox, in the change's compare-and-swap, keeps an applied event from applying twice.
    answered = decided(got.receipt) and vouched is None
    wake = Wake(envelope, event, key.principal, auth, evidence, answered, key.tenant)
    return Taken(wake, pinned, first, got.ops, held)


def _claimed(envelope: Envelope, sender: str) -> tuple[SignedEvent | None, SignedEvent | None] | Untrusted:
    """The event a wake claims to carry and the operator's replay that vouches for it (D71), both
    unverified (None, None for a deadline wake); `Untrusted` if the wake may not be from `sender`
    or carries no readable event."""
    reason = envelope.payload.get("reason")
    if WAKE_SENDER.get(str(reason)) not in (None, sender):
        return Untrusted(f"a {reason} wake from {sender}: only {WAKE_SENDER[str(reason)]} sends those")
    if reason == "deadline":  # a deadline wake is trusted only as far as the stored deadline
        return None, None
    if reason != "event":
        return Untrusted(f"wake with unknown reason {reason!r}")
    try:
        return _event_in(envelope), _replay_in(envelope)
    except DecodeError as exc:
        return Untrusted(f"wake carries a malformed event: {exc.reason}")


def _verified(
    envelope: Envelope,
    event: SignedEvent,
    replay: SignedEvent | None,
    got: wake_reads.Got,
    seal: SignerSeal | None,
    *,
    max_age: timedelta,
    keep: timedelta,
    appended: datetime | None,
) -> tuple[VerifyKey, SignedEvent | None] | Untrusted:
    """The event's signer key, as its live record (`got.signer`) says, and the replay that vouches
    for it (None for a wake that carries none); `Untrusted` with why if it does not verify, is
    misaddressed, or its replay does not vouch."""
    found = decode_signer(event.key_id, got.signer, seal) if isinstance(got.signer, bytes) else None
    key, kinds = found if found else (None, frozenset[str]())
    tenant = key.tenant if key is not None else ids.DEFAULT_TENANT
    vouched = _vouched(envelope, replay, got.replay_signer, tenant, seal)
    if isinstance(vouched, str):
        return Untrusted(vouched)
    refused = gate_rules.misaddressed(
        event,
        envelope,
        key is not None and key.verify(event),
        kinds,
        tenant=tenant,
        max_age=max_age,
        keep=keep,
        appended=appended,
        issued=vouched.issued_at if vouched is not None else None,
    )
    if refused or key is None:
        return Untrusted(refused or "no signer")
    return key, vouched


def decided(receipt: bytes | None) -> bool:
    """Whether an event's receipt says it was decided: any receipt but a freeze's "held", which
    says only that the wake waits on the task's held list (hold.py) to be decided."""
    return receipt is not None and not receipt.startswith(HELD_RECEIPT)


def identity(envelope: Envelope, event: SignedEvent | None) -> str:
    """The task inbox member for this wake, derived from what is verified, never from the wake's
    own message id (anyone who can write to wakeful.wake chooses that): a signed event is (key id,
    event id); a deadline is the runtime's own id for the task and due time it names."""
    if event is not None:
        return keys.event_identity(event.key_id, event.event_id)
    return keys.runtime_id("deadline", envelope.task_id, str(envelope.payload.get("due_ms")))


def verified_event(
    msg: Message, role_keys: RoleKeys, authority: AuthorityStore
) -> tuple[SignedEvent, str, str] | None:
    """The signed event inside a wake message, with the wake's task id and the signer's tenant, if
    the wake comes from a role that may send it and the event verifies against the live signer
    registry; else None."""
    value = msg.value() or b""
    if isinstance(role_keys.sender(topics.WAKE, msg.key() or b"", value, msg.headers()), Forged):
        return None
    try:
        envelope = Envelope.decode(value)
        event = _event_in(envelope)
    except DecodeError:
        return None  # a deadline wake, or one with no event in it
    signer = authority.signer(event.key_id)
    if signer is None or not signer[0].verify(event):
        return None
    return event, envelope.task_id, signer[0].tenant


def _replay_in(envelope: Envelope) -> SignedEvent | None:
    """The operator's replay a wake carries beside its event, if any; DecodeError if it is no event."""
    text = envelope.payload.get("replay")
    if text is None:
        return None
    if not isinstance(text, str):
        raise DecodeError("event", b"", "the wake's replay is not the signed replay's JSON text")
    return SignedEvent.decode(text.encode())


def _vouched(
    envelope: Envelope, replay: SignedEvent | None, signer: Any, tenant: str, seal: SignerSeal | None
) -> SignedEvent | str | None:
    """The replay that vouches for the wake's event, verified against its signer's live record
    (`signer`); None for a wake that carries none; a reason when it does not vouch."""
    if replay is None:
        return None
    found = decode_signer(replay.key_id, signer, seal) if isinstance(signer, bytes) else None
    key, kinds = found if found else (None, frozenset[str]())
    text, event = str(envelope.payload["replay"]), str(envelope.payload["event"])
    return replays.vouched(text, event, key, kinds, tenant=tenant)


def _event_in(envelope: Envelope) -> SignedEvent:
    """The signed event a wake carries, as the door received it; DecodeError if it carries none."""
    text = envelope.payload.get("event")
    if envelope.payload.get("reason") != "event" or not isinstance(text, str):
        raise DecodeError("event", b"", "the wake's event is not the signed event's JSON text")
    return SignedEvent.decode(text.encode())
