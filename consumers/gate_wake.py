"""A wake behind the door: gate 1 again, and the task's lease taken with the authority read.

A wake is only as good as the signed event inside it, and only the role that judges that kind of
wake may send it. `authenticate()` re-verifies the event against the live signer registry in the
round trip that takes the task's lease and reads the live authority snapshot, the task's evidence
and the event's receipt; what it finds comes back as a `Wake` with the lease held, or as the reason
to dead-letter the message. `verified_event()` finds whom to tell when the gate fails on a wake.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from confluent_kafka import Message

from wakeful.authority.store import AuthorityStore, Snapshot, decode_signer
from wakeful.consumers import gate_rules
from wakeful.core import topics
from wakeful.core.errors import DecodeError, LeaseBusy
from wakeful.core.provenance import Forged, RoleKeys
from wakeful.core.retry import Retry
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.state import keys
from wakeful.state.lease import Held, Leases

WAKE_SENDER = {"event": "inbound", "deadline": "timer"}  # who judged what the wake says


@dataclass(frozen=True)
class Wake:
    """A wake that passed authentication, with what was read live in the round trip that did it."""

    envelope: Envelope
    event: SignedEvent | None  # None for a deadline wake
    principal: str | None
    auth: Snapshot
    evidence: dict[str, str]
    answered: bool = False  # its event has a receipt: it was decided before, whatever the outcome
    tenant: str = ""  # the signer's tenant, from its registry record ("" for a deadline wake)


@dataclass(frozen=True)
class DeadLetter:
    """The wake fails authentication: it goes to the dead-letter topic with this reason."""

    reason: str


def authenticate(
    envelope: Envelope,
    sender: str,
    authority: AuthorityStore,
    leases: Leases,
    *,
    max_age: timedelta,
    max_lag: timedelta,
) -> tuple[Wake, Held] | DeadLetter:
    """Gate 1 again, behind the door: a wake is only as good as the signed event inside it, and
    only the role that judges that kind of wake may send it. The task's lease is taken in the
    same round trip as the authority read; the wake comes back with it held, a wake that fails as
    a `DeadLetter` with the lease given back."""
    reason = envelope.payload.get("reason")
    event: SignedEvent | None = None
    if WAKE_SENDER.get(str(reason)) not in (None, sender):
        return DeadLetter(f"a {reason} wake from {sender}: only {WAKE_SENDER[str(reason)]} sends those")
    if reason == "event":
        try:
            event = _event_in(envelope)
        except DecodeError as exc:
            return DeadLetter(f"wake carries a malformed event: {exc.reason}")
    elif reason != "deadline":  # a deadline wake is trusted only as far as the stored deadline
        return DeadLetter(f"wake with unknown reason {reason!r}")
    receipt = keys.receipt(event.event_id, envelope.task_id, key_id=event.key_id) if event else None
    auth, signer, evidence, answered, (taken,) = authority.snapshot_with(
        signer=event.key_id if event else None,
        evidence=keys.evidence(envelope.task_id),
        receipt=receipt,
        first=[leases.acquire_command(envelope.task_id)],  # the reads are made under it
    )
    try:
        held = Held(leases.granted(envelope.task_id, taken))
    except LeaseBusy:
        raise Retry("task lease is held by another worker", after=0.005) from None
    if event is None:
        return Wake(envelope, None, None, auth, evidence), held
    key, kinds = decode_signer(event.key_id, signer) if signer else (None, frozenset[str]())
    verified = key is not None and key.verify(event)
    refused = gate_rules.misaddressed(
        event,
        envelope,
        verified,
        kinds,
        max_age=max_age,
        max_lag=max_lag,
        now=datetime.now(UTC),
    )
    if refused or key is None:
        leases.finish(held)
        return DeadLetter(refused or "no signer")
    return Wake(envelope, event, key.principal, auth, evidence, answered, key.tenant), held


def verified_event(
    msg: Message, role_keys: RoleKeys, authority: AuthorityStore
) -> tuple[SignedEvent, str] | None:
    """The signed event inside a wake message, with the wake's task id, if the wake comes from a
    role that may send it and the event verifies against the live signer registry; else None."""
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
    return event, envelope.task_id


def _event_in(envelope: Envelope) -> SignedEvent:
    """The signed event a wake carries, as the door received it; DecodeError if it carries none."""
    text = envelope.payload.get("event")
    if envelope.payload.get("reason") != "event" or not isinstance(text, str):
        raise DecodeError("event", b"", "the wake's event is not the signed event's JSON text")
    return SignedEvent.decode(text.encode())
