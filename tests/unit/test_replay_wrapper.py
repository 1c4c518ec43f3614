"""An operator's replay of a dead-lettered event (docs/decisions.md D71), as the door and the gate
verify it: the wrapper as any event (registered key, signature, freshness, a signer allowed to
replay), then the event inside against its signer's key as registered now, with only its max age
waived. Real Ed25519 signatures; no Kafka, no Redis, a fixed clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wakeful.consumers.gate import rules as gate_rules
from wakeful.consumers.gate.wake import identity
from wakeful.consumers.inbound.main import claim
from wakeful.examples.refund import app as refund_app
from wakeful.producers.keys import public_bytes
from wakeful.producers.signing import Ed25519Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import Envelope, SignedEvent
from wakeful.schemas.signatures import VerifyKey
from wakeful.state import keys
from wakeful.workflow import replays
from wakeful.workflow.door import Refused, Vouched, judge_replay

pytestmark = pytest.mark.timeout(30)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MAX_AGE = timedelta(minutes=5)
CRM = Ed25519Signer("key-crm", Ed25519PrivateKey.generate())
CRM_KEY = VerifyKey("key-crm", "ed25519", public_bytes(CRM), "svc-crm")
OPS = Ed25519Signer("key-ops", Ed25519PrivateKey.generate())
OPS_KEY = VerifyKey("key-ops", "ed25519", public_bytes(OPS), "ops-oncall")
IMPOSTOR = Ed25519Signer("key-ops", Ed25519PrivateKey.generate())  # the operator's key id, another key
REPLAYER = frozenset({events.REPLAY})
SENDER = frozenset({events.CREATE, events.AMEND})
STALE = NOW - timedelta(hours=6)


def inner(issued: datetime = STALE, signer: Ed25519Signer = CRM) -> SignedEvent:
    return sign_event(
        signer, events.AMEND, {"amount": 7}, task_id="t-9", event_id="ev-inner-01", issued_at=issued
    )


def wrapper(
    of: SignedEvent | None = None, signer: Ed25519Signer = OPS, issued: datetime = NOW, **payload: Any
) -> SignedEvent:
    event = of or inner()
    made = replays.wrap(signer, event, event.encode().decode(), "0:42", now=issued)
    if not payload:
        return made
    return sign_event(
        signer,
        events.REPLAY,
        {**made.payload, **payload},
        task_id=made.task_id,
        event_id=made.event_id,
        issued_at=issued,
    )


def judged(
    sent: SignedEvent,
    key: VerifyKey | None = OPS_KEY,
    kinds: frozenset[str] = REPLAYER,
    inner_key: VerifyKey | None = CRM_KEY,
    inner_kinds: frozenset[str] = SENDER,
) -> Vouched | Refused:
    return judge_replay(
        sent, key, kinds, (inner_key, inner_kinds), now=NOW, max_age=MAX_AGE, known=refund_app.kinds
    )


def refused(result: Vouched | Refused) -> str:
    assert isinstance(result, Refused), f"expected a refusal, got {result}"
    return result.reason


def test_a_replay_vouches_for_a_stale_event_whose_signer_is_registered_now() -> None:
    result = judged(wrapper())
    assert isinstance(result, Vouched)
    assert result.inner.event == inner() and result.inner.principal == "svc-crm"
    assert (result.wrapper.principal, result.letter) == ("ops-oncall", "0:42")


def test_a_forged_wrapper_is_refused() -> None:
    assert "bad signature" in refused(judged(wrapper(signer=IMPOSTOR)))


def test_a_wrapper_by_an_unregistered_or_revoked_operator_is_refused() -> None:
    assert "unknown key id" in refused(judged(wrapper(), key=None))


def test_a_wrapper_by_a_principal_not_allowed_to_replay_is_refused() -> None:
    assert "may not send event.replay" in refused(judged(wrapper(), kinds=SENDER))


def test_a_stale_wrapper_is_refused() -> None:
    assert "too old" in refused(judged(wrapper(issued=NOW - MAX_AGE - timedelta(seconds=1))))


def test_a_forged_inner_event_is_refused() -> None:
    forged = inner().model_copy(update={"payload": {"amount": 7_000_000}})
    assert "bad signature" in refused(judged(wrapper(forged)))


def test_an_inner_event_whose_key_is_revoked_or_unknown_is_refused() -> None:
    assert "unknown key id 'key-crm'" in refused(judged(wrapper(), inner_key=None))


def test_an_inner_event_of_a_kind_its_signer_may_no_longer_send_is_refused() -> None:
    assert "may not send task.amend" in refused(judged(wrapper(), inner_kinds=frozenset({events.CREATE})))


def test_only_the_inner_events_max_age_is_waived_not_its_clock_skew() -> None:
    future = inner(issued=NOW + events.FUTURE_SKEW + timedelta(minutes=1))
    assert "from the future" in refused(judged(wrapper(future)))


def test_an_operator_of_another_tenant_may_not_vouch() -> None:
    other = VerifyKey("key-ops", "ed25519", public_bytes(OPS), "ops-oncall", "globex")
    assert "may not replay an event of tenant default" in refused(judged(wrapper(), key=other))


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        ({"extra": 1}, "exactly `letter` and `event`"),
        ({"letter": "zero"}, "<partition>:<offset>"),
        ({"event": {"not": "text"}}, "JSON text"),
        ({"event": "{}"}, "not a signed event"),
    ],
)
def test_a_malformed_wrapper_is_refused(payload: dict[str, Any], said: str) -> None:
    assert said in refused(judged(wrapper(**payload)))


def test_a_wrapper_that_names_another_task_than_its_event_is_refused() -> None:
    made = wrapper()
    moved = sign_event(
        OPS, events.REPLAY, made.payload, task_id="t-other", event_id=made.event_id, issued_at=NOW
    )
    assert "names the task and the wait its event names" in refused(judged(moved))


def test_a_replay_of_a_replay_is_refused() -> None:
    assert "itself a replay" in refused(judged(wrapper(wrapper())))


def test_the_inner_identity_is_the_dedupe_key_at_the_door_and_in_the_tasks_inbox() -> None:
    """Two replays of one event in one batch: the first wins; the gate's inbox member is the inner
    event's own identity, so an event the task applied already is not applied twice."""
    event = inner()
    mark = keys.event_identity(event.key_id, event.event_id)
    claims: dict[str, tuple[str, int, int]] = {}
    assert claim(claims, mark, ("wakeful.events", 0, 1))
    assert not claim(claims, mark, ("wakeful.events", 0, 2))
    wake = Envelope(
        message_id=event.event_id,
        task_id="t-9",
        task_version=0,
        kind="wake",
        created_at=NOW,
        trace_id=event.event_id,
        payload={"reason": "event", "event": event.encode().decode(), "replay": wrapper().encode().decode()},
    )
    assert identity(wake, event) == mark


# ---- behind the door: the gate's check of the wrapper a wake carries ---------------------------


def vouched(sent: SignedEvent, text: str | None = None, **kw: object) -> SignedEvent | str:
    event_text = text if text is not None else inner().encode().decode()
    args: dict[str, object] = {"key": OPS_KEY, "kinds": REPLAYER, "tenant": "default", **kw}
    return replays.vouched(sent.encode().decode(), event_text, **args)  # type: ignore[arg-type]


def test_the_gate_takes_a_wrapper_that_verifies_and_carries_the_wakes_own_event() -> None:
    sent = wrapper()
    assert vouched(sent) == sent


@pytest.mark.parametrize(
    ("kw", "said"),
    [
        ({"key": None}, "does not verify"),
        ({"kinds": SENDER}, "may not replay"),
        ({"tenant": "globex"}, "another tenant's event"),
        ({"text": "{}"}, "another event than its own"),
    ],
)
def test_the_gate_refuses_a_wrapper_that_does_not_vouch_for_its_wake(
    kw: dict[str, object], said: str
) -> None:
    text = kw.pop("text", None)
    found = vouched(wrapper(), text if isinstance(text, str) else None, **kw)
    assert isinstance(found, str) and said in found


def test_the_gate_holds_the_wrapper_not_the_stale_event_to_the_doors_verdict() -> None:
    event = inner()
    wake = Envelope(
        message_id=event.event_id,
        task_id="t-9",
        task_version=0,
        kind="wake",
        created_at=NOW,
        trace_id=event.event_id,
        payload={"reason": "event", "judged_at": NOW.isoformat()},
    )
    common = {"tenant": "default", "max_age": MAX_AGE, "keep": MAX_AGE, "appended": NOW}
    stale = gate_rules.misaddressed(event, wake, True, SENDER, **common)  # type: ignore[arg-type]
    assert stale is not None and "the door refuses it" in stale
    assert gate_rules.misaddressed(event, wake, True, SENDER, issued=NOW, **common) is None  # type: ignore[arg-type]
    old_wrapper = NOW - MAX_AGE - timedelta(seconds=1)
    assert gate_rules.misaddressed(event, wake, True, SENDER, issued=old_wrapper, **common) is not None  # type: ignore[arg-type]
