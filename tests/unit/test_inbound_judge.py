"""Gate 1 at the door, as pure code: `parse` turns any bytes into an event or a reason, and `judge`
accepts only a fresh event signed by a registered key that may send its kind and names its task
or its wait. Real Ed25519 and HMAC signatures; no Kafka, no Redis, a fixed clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from wakeful.consumers.inbound.main import Accepted, Refused, judge, parse
from wakeful.examples.refund import app as refund_app
from wakeful.producers.keys import public_bytes
from wakeful.producers.signing import Ed25519Signer, HmacSigner, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import APPROVE, CREATE, FUTURE_SKEW, KINDS, SignedEvent
from wakeful.schemas.signatures import VerifyKey

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
MAX_AGE = timedelta(minutes=5)
ALL_KINDS = frozenset(KINDS)
CRM = Ed25519Signer("crm-1", Ed25519PrivateKey.generate())
CRM_KEY = VerifyKey("crm-1", "ed25519", public_bytes(CRM), "system:crm")
IMPOSTOR = Ed25519Signer("crm-1", Ed25519PrivateKey.generate())  # same key id, other private key
UI = HmacSigner("ui-1", b"shared-secret-of-the-approvals-ui")
UI_KEY = VerifyKey("ui-1", "hmac-sha256", UI.secret, "system:approvals-ui")


def signed(
    kind: str = CREATE,
    *,
    task_id: str | None = "t-1",
    correlation_id: str | None = None,
    issued_at: datetime = NOW,
    payload: dict[str, Any] | None = None,
    signer: Ed25519Signer | HmacSigner = CRM,
) -> SignedEvent:
    return sign_event(
        signer,
        kind,
        payload if payload is not None else {"amount": 100},
        task_id=task_id,
        correlation_id=correlation_id,
        event_id="ev-00000001",
        issued_at=issued_at,
    )


def verdict(
    event: SignedEvent,
    key: VerifyKey | None = CRM_KEY,
    kinds: frozenset[str] = ALL_KINDS,
    now: datetime = NOW,
    max_age: timedelta = MAX_AGE,
) -> Accepted | Refused:
    return judge(event, key, kinds, now, max_age, known=refund_app.kinds)


def rejected(result: object) -> str:
    assert isinstance(result, Refused), f"expected a rejection, got {result}"
    return result.reason


# ---- parse -----------------------------------------------------------------------------------


def test_a_signed_event_parses_back_equal_and_is_accepted_as_its_signers_principal() -> None:
    event = signed()
    parsed = parse(event.encode())
    assert parsed == event
    assert isinstance(parsed, SignedEvent)
    assert verdict(parsed) == Accepted(event, "system:crm", "default")


def test_an_accepted_event_carries_its_signers_tenant_for_the_correlation_check() -> None:
    globex = VerifyKey("crm-1", "ed25519", public_bytes(CRM), "system:crm", "globex")
    accepted = verdict(signed(), globex)
    assert isinstance(accepted, Accepted) and accepted.tenant == "globex"


def test_an_event_over_the_size_limit_is_rejected_before_it_is_decoded() -> None:
    raw = signed(payload={"note": "x" * events.MAX_EVENT_BYTES}).encode()
    reason = rejected(parse(raw))
    assert f"{len(raw)} bytes is over the {events.MAX_EVENT_BYTES}-byte limit" in reason
    assert reason.startswith("malformed event")


def _doc(**changes: Any) -> bytes:
    doc = orjson.loads(signed().encode())
    doc.update(changes)
    return orjson.dumps({k: v for k, v in doc.items() if v is not ...})


@pytest.mark.parametrize(
    ("raw", "part"),
    [
        (b"", "not JSON"),
        (b"not json at all", "not JSON"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b"[1, 2, 3]", "not a JSON object"),
        (b'"a string"', "not a JSON object"),
        (b'{"schema_version": 1}', "event_id"),
        (_doc(schema_version=2), "schema_version 2 > 1"),
        (_doc(schema_version=0), "expected a positive integer"),
        (_doc(issued_at="yesterday"), "issued_at"),
        (_doc(event_id="short"), "event_id"),
        (_doc(key_id=""), "key_id"),
        (_doc(signature=...), "signature"),
        (_doc(payload=[1, 2]), "payload"),
        (_doc(admin=True), "admin"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_malformed_bytes_are_rejected_with_what_is_wrong_and_no_event(raw: bytes, part: str) -> None:
    result = parse(raw)
    assert isinstance(result, Refused)
    assert result.reason.startswith("malformed event: ")
    assert part in result.reason
    assert result.event is None


@settings(max_examples=150, deadline=None)
@given(raw=st.binary(max_size=300) | st.text(max_size=200).map(str.encode))
def test_any_bytes_parse_to_an_event_or_a_malformed_event_rejection(raw: bytes) -> None:
    result = parse(raw)
    assert isinstance(result, SignedEvent) or result.reason.startswith("malformed event: ")


# ---- signature and key -----------------------------------------------------------------------


def test_an_hmac_signed_event_is_accepted_as_its_keys_principal() -> None:
    event = signed(APPROVE, task_id=None, correlation_id="corr-1", signer=UI)
    assert verdict(event, UI_KEY) == Accepted(event, "system:approvals-ui", "default")


def test_an_event_from_an_unregistered_key_id_is_rejected_naming_the_key() -> None:
    assert rejected(verdict(signed(), key=None)) == "unknown key id 'crm-1'"


@pytest.mark.parametrize(
    ("signer", "key"),
    [(IMPOSTOR, CRM_KEY), (UI, CRM_KEY), (CRM, UI_KEY)],
    ids=["other-ed25519-key-same-id", "hmac-tag-for-ed25519-key", "ed25519-sig-for-hmac-key"],
)
def test_a_signature_not_made_by_the_registered_key_is_rejected(
    signer: Ed25519Signer | HmacSigner, key: VerifyKey
) -> None:
    event = signed(signer=signer)
    assert rejected(verdict(event, key)) == f"bad signature for key id {event.key_id!r}"


@pytest.mark.parametrize("signature", ["", "not base64!", "AAAA", "=" * 8])
def test_a_garbage_signature_is_a_rejection_not_a_crash(signature: str) -> None:
    event = signed().model_copy(update={"signature": signature})
    assert rejected(verdict(event)).startswith("bad signature")


TAMPERING: dict[str, st.SearchStrategy[Any]] = {
    "kind": st.sampled_from([*KINDS, "task.delete"]),
    "task_id": st.none() | st.text(min_size=1, max_size=20),
    "correlation_id": st.text(min_size=1, max_size=20),
    "payload": st.dictionaries(
        st.text(max_size=8), st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8), max_size=3
    ),
    "issued_at": st.integers(-86_400, 86_400).map(lambda s: NOW + timedelta(seconds=s)),
    "event_id": st.text(min_size=8, max_size=40),
}


@settings(max_examples=100, deadline=None)
@given(change=st.sampled_from(sorted(TAMPERING)).flatmap(lambda f: st.tuples(st.just(f), TAMPERING[f])))
def test_any_field_changed_after_signing_is_rejected_as_a_bad_signature(change: tuple[str, Any]) -> None:
    field, value = change
    original = signed()
    tampered = original.model_copy(update={field: value})
    assume(getattr(tampered, field) != getattr(original, field))
    assert rejected(verdict(tampered)) == "bad signature for key id 'crm-1'"


# ---- freshness -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("issued", "outcome"),
    [
        (NOW, None),
        (NOW - MAX_AGE, None),  # exactly max age old is still fresh
        (NOW - MAX_AGE - timedelta(microseconds=1), "event is too old"),
        (NOW - timedelta(days=3), "event is too old"),
        (NOW + FUTURE_SKEW, None),  # a sender's clock may run a little ahead
        (NOW + FUTURE_SKEW + timedelta(seconds=1), "event is from the future"),
    ],
    ids=["now", "at-max-age", "just-past-max-age", "days-old", "at-skew", "past-skew"],
)
def test_an_event_is_fresh_from_max_age_ago_to_the_clock_skew_ahead(
    issued: datetime, outcome: str | None
) -> None:
    result = verdict(signed(issued_at=issued))
    if outcome is None:
        assert isinstance(result, Accepted)
    else:
        assert rejected(result).startswith(outcome)


def test_event_older_than_max_age_is_rejected_with_its_issue_time_and_the_max_age() -> None:
    issued = NOW - timedelta(hours=2)
    reason = rejected(verdict(signed(issued_at=issued)))
    assert reason == f"event is too old: issued {issued.isoformat()}, max age 300s"


@pytest.mark.parametrize(
    ("age", "fresh"),
    [(timedelta(minutes=4), True), (timedelta(hours=2), False), (-timedelta(hours=1), False)],
)
def test_a_timestamp_without_a_zone_is_read_as_utc(age: timedelta, fresh: bool) -> None:
    naive = (NOW - age).replace(tzinfo=None)
    result = verdict(signed(issued_at=naive))
    assert isinstance(result, Accepted) is fresh


@settings(max_examples=100, deadline=None)
@given(
    offset_s=st.integers(-3 * 3600, 3 * 3600),
    max_age_s=st.integers(1, 2 * 3600),
)
def test_an_event_is_accepted_exactly_inside_the_freshness_window(offset_s: int, max_age_s: int) -> None:
    max_age = timedelta(seconds=max_age_s)
    result = verdict(signed(issued_at=NOW + timedelta(seconds=offset_s)), max_age=max_age)
    fresh = -max_age_s <= offset_s <= FUTURE_SKEW.total_seconds()
    assert isinstance(result, Accepted) is fresh


# ---- kinds and addressing --------------------------------------------------------------------


def test_an_unknown_event_kind_is_rejected_even_when_the_key_lists_it() -> None:
    event = signed("task.delete")
    assert rejected(verdict(event, kinds=ALL_KINDS | {"task.delete"})) == "unknown event kind 'task.delete'"


def test_a_key_may_send_only_the_kinds_registered_for_it_and_the_reason_names_its_principal() -> None:
    reason = rejected(verdict(signed(CREATE), kinds=frozenset({APPROVE})))
    assert reason == "key 'crm-1' (system:crm) may not send task.create"


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(KINDS), allowed=st.frozensets(st.sampled_from(KINDS)))
def test_an_event_is_accepted_only_if_its_kind_is_registered_for_the_key(
    kind: str, allowed: frozenset[str]
) -> None:
    result = verdict(signed(kind, task_id="t-1", correlation_id="corr-1"), kinds=allowed)
    assert isinstance(result, Accepted) is (kind in allowed)


@pytest.mark.parametrize("kind", [k for k in KINDS if k != APPROVE])
@pytest.mark.parametrize("correlation_id", [None, "corr-1"], ids=["no-corr", "with-corr"])
def test_every_event_but_an_approval_must_name_its_task_id(kind: str, correlation_id: str | None) -> None:
    # A correlation id does not stand in for the task id of a task-level event.
    event = signed(kind, task_id=None, correlation_id=correlation_id)
    assert rejected(verdict(event)) == f"{kind} must name its task_id"
    assert isinstance(verdict(signed(kind, task_id="t-1", correlation_id=correlation_id)), Accepted)


@pytest.mark.parametrize(
    ("task_id", "correlation_id", "accepted"),
    [(None, "corr-1", True), ("t-1", None, True), ("t-1", "corr-1", True), (None, None, False)],
)
def test_an_approval_must_name_the_wait_it_answers_or_its_task(
    task_id: str | None, correlation_id: str | None, accepted: bool
) -> None:
    result = verdict(signed(APPROVE, task_id=task_id, correlation_id=correlation_id, payload={"version": 1}))
    if accepted:
        assert isinstance(result, Accepted)
    else:
        assert "must carry the correlation id of the wait it answers" in rejected(result)


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**30], ids=["2^64", "-2^63-1", "1e30"])
def test_an_integer_past_64_bits_is_judged_like_any_other_value(number: int) -> None:
    # JSON decoding accepts any integer, and so does the canonical signed form: an event that
    # carries one verifies when it was signed (its sender then gets the workflow's refusal in a
    # receipt), and is a bad signature when it was edited in, never a crash.
    event = signed(payload={"amount": number})
    assert isinstance(parse(event.encode()), SignedEvent)
    assert isinstance(verdict(event), Accepted)
    raw = signed(payload={"amount": 7}).encode().replace(b'"amount":7', b'"amount":%d' % number)
    edited = parse(raw)
    assert isinstance(edited, SignedEvent)
    assert rejected(verdict(edited)).startswith("bad signature")


def test_an_integer_too_long_to_print_has_no_signed_form_and_is_refused_not_a_crash() -> None:
    raw = signed(payload={"amount": 7}).encode().replace(b'"amount":7', b'"amount":%s' % (b"9" * 4400))
    event = parse(raw)
    result = verdict(event) if isinstance(event, SignedEvent) else event
    assert isinstance(result, Refused)


def test_a_rejection_after_decoding_carries_the_event_for_the_senders_receipt() -> None:
    event = signed(issued_at=NOW - timedelta(days=1))
    result = verdict(event)
    assert isinstance(result, Refused)
    assert result.event == event


def test_a_release_signoff_is_no_event_the_door_takes_even_from_a_key_registered_for_it() -> None:
    event = signed(events.SIGNOFF, payload={})
    said = rejected(verdict(event, kinds=frozenset({events.SIGNOFF})))
    assert said == "unknown event kind 'release.signoff'"
