"""Gate 1 at the door as pure code: raw bytes + the signer's registered key + now -> Accepted or
Refused, for an event and for an operator's replay of one (docs/decisions.md D71). Inbound calls it
with what it read from Redis; nothing here reads or writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from wakeful.core import ids
from wakeful.core.errors import DecodeError
from wakeful.schemas import events
from wakeful.schemas.events import SignedEvent
from wakeful.schemas.signatures import VerifyKey
from wakeful.workflow import replays


@dataclass(frozen=True)
class Accepted:
    event: SignedEvent
    principal: str
    tenant: str  # the signer's, from its registry record


# Every refusal's code. The door's own: malformed, too_large, unknown_key, bad_signature, stale,
# unknown_kind, not_allowed, unaddressed; the inbound role adds duplicate and unknown_wait.
CODES = (
    "malformed",
    "too_large",
    "unknown_key",
    "bad_signature",
    "stale",
    "unknown_kind",
    "not_allowed",
    "unaddressed",
    "duplicate",
    "unknown_wait",
)


@dataclass(frozen=True)
class Refused:
    """Refused at the door: dead-lettered with `reason`, and its sender told in a receipt."""

    reason: str
    event: SignedEvent | None = None
    # Set when its signature verified, to its key's tenant: only then does a receipt tell its sender.
    tenant: str | None = None
    # What kind of refusal, in one word of CODES: the HTTP door's status and the metrics' label.
    code: str = "malformed"

    @property
    def task_id(self) -> str | None:
        """The task it names as its signer's tenant names it (never another tenant's task of that id)."""
        named = self.event.task_id if self.event else None
        return ids.task_in(self.tenant, named) if named and self.tenant else named


def parse(raw: bytes) -> SignedEvent | Refused:
    if len(raw) > events.MAX_EVENT_BYTES:
        return Refused(
            f"malformed event: {len(raw)} bytes is over the {events.MAX_EVENT_BYTES}-byte limit",
            code="too_large",
        )
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
    fresh: bool = True,
) -> Accepted | Refused:
    """Gate 1 for one decoded event: signature by key id, freshness, and the signer's allowed kinds.
    `fresh` False waives the max age (and only it): the event inside an operator's replay."""
    if key is None:
        return Refused(f"unknown key id {event.key_id!r}", event, code="unknown_key")
    if not key.verify(event):
        return Refused(f"bad signature for key id {event.key_id!r}", event, code="bad_signature")
    tenant = key.tenant
    issued = event.issued_at if event.issued_at.tzinfo else event.issued_at.replace(tzinfo=UTC)
    if fresh and issued < now - max_age:
        age = max_age.total_seconds()
        why = f"event is too old: issued {issued.isoformat()}, max age {age:.0f}s"
        return Refused(why, event, tenant, code="stale")
    if issued > now + events.FUTURE_SKEW:
        return Refused(f"event is from the future: issued {issued.isoformat()}", event, tenant, code="stale")
    if event.kind not in known:  # the runtime's kinds and the loaded app's own
        return Refused(f"unknown event kind {event.kind!r}", event, tenant, code="unknown_kind")
    if event.kind not in kinds:
        why = f"key {event.key_id!r} ({key.principal}) may not send {event.kind}"
        return Refused(why, event, tenant, code="not_allowed")
    if event.kind == events.REPLAY:  # what it names is its event's, judged with that event
        return Accepted(event, key.principal, key.tenant)
    if event.kind != events.APPROVE and not event.task_id:
        return Refused(f"{event.kind} must name its task_id", event, tenant, code="unaddressed")
    if event.kind == events.APPROVE and not (event.correlation_id or event.task_id):
        why = "an approval must carry the correlation id of the wait it answers"
        return Refused(why, event, tenant, code="unaddressed")
    return Accepted(event, key.principal, key.tenant)


@dataclass(frozen=True)
class Vouched:
    """An operator's replay the door accepts: the event inside, judged, and the wrapper that vouched."""

    inner: Accepted
    wrapper: Accepted
    letter: str


def judge_replay(
    wrapper: SignedEvent,
    key: VerifyKey | None,
    kinds: frozenset[str],
    inner_signer: tuple[VerifyKey | None, frozenset[str]],
    *,
    now: datetime,
    max_age: timedelta,
    known: frozenset[str],
) -> Vouched | Refused:
    """Gate 1 for a replay: the wrapper as any event (its signer's key registered and not revoked,
    its signature, its freshness, its signer registered for event.replay), then the event inside
    against its signer's key as registered now (`inner_signer`: an unknown or revoked key is
    refused), with only its max age waived, by an operator of its own tenant."""
    outer = judge(wrapper, key, kinds, now, max_age, known=known)
    if isinstance(outer, Refused):
        return outer
    unwrapped = replays.unwrap(wrapper)
    if isinstance(unwrapped, str):
        return Refused(f"malformed replay: {unwrapped}", wrapper, outer.tenant)
    inner, letter = unwrapped[0], str(wrapper.payload["letter"])
    verdict = judge(inner, *inner_signer, now, max_age, known=known, fresh=False)
    if isinstance(verdict, Refused):
        why = f"replay of letter {letter} by {outer.principal}: {verdict.reason}"
        return Refused(why, wrapper, outer.tenant, code=verdict.code)
    if verdict.tenant != outer.tenant:
        said = (
            f"{outer.principal} of tenant {outer.tenant} may not replay an event of tenant {verdict.tenant}"
        )
        return Refused(f"replay of letter {letter}: {said}", wrapper, outer.tenant, code="not_allowed")
    return Vouched(verdict, outer, letter)
