"""Dedupe identities cannot be squatted or forged (docs/decisions.md D29), as pure rules: an outside
event is (key id, event id), ids the runtime makes for itself live in "rt:", which no outside
identity can have, and the first message with an identity in a batch holds it. The keys' formats
are the documented ones. End to end: tests/test_dedupe.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from wakeful.consumers.inbound.main import claim
from wakeful.state import keys

KEY_ID = st.from_regex(r"[A-Za-z0-9_.@-]{1,20}", fullmatch=True)
EVENT_ID = st.from_regex(r"[A-Za-z0-9_.-]{8,30}", fullmatch=True)


@given(KEY_ID, EVENT_ID, KEY_ID, EVENT_ID)
def test_two_outside_identities_are_equal_only_for_the_same_signer_and_event_id(
    k1: str, e1: str, k2: str, e2: str
) -> None:
    same = (k1, e1) == (k2, e2)
    assert (keys.event_identity(k1, e1) == keys.event_identity(k2, e2)) is same
    assert (keys.seen(k1, e1) == keys.seen(k2, e2)) is same
    assert (keys.receipt(e1, "t-1", key_id=k1) == keys.receipt(e2, "t-1", key_id=k2)) is same
    assert (keys.receipt(e1, key_id=k1) == keys.receipt(e2, key_id=k2)) is same


@given(KEY_ID, EVENT_ID, st.sampled_from(["close", "deadline", "refused", "review"]), st.text(max_size=40))
def test_an_outside_identity_is_never_a_runtime_id(key_id: str, event_id: str, kind: str, part: str) -> None:
    outside = keys.event_identity(key_id, event_id)
    assert outside.startswith("ev:")
    assert outside != keys.runtime_id(kind, part)
    assert keys.runtime_id(kind, part).startswith("rt:")


def test_runtime_ids_name_their_kind_and_parts() -> None:
    assert keys.runtime_id("close", "REFUND:t-1:v1") == "rt:close:REFUND:t-1:v1"
    assert keys.runtime_id("deadline", "t-1", 1767225600000) == "rt:deadline:t-1:1767225600000"
    assert keys.event_identity("key-alice", "ev-0123abcd") == "ev:key-alice:ev-0123abcd"


def test_the_first_message_with_an_identity_in_a_batch_holds_it_and_keeps_it_on_retry() -> None:
    claims: dict[str, tuple[str, int, int]] = {}
    first, second = ("wakeful.events", 0, 10), ("wakeful.events", 1, 4)
    assert claim(claims, "ev:k:e-00000001", first)
    assert not claim(claims, "ev:k:e-00000001", second)
    assert claim(claims, "ev:k:e-00000001", first)  # the same message, retried or read again
    assert claim(claims, "ev:other:e-00000001", second)
    assert claims == {"ev:k:e-00000001": first, "ev:other:e-00000001": second}


def test_dedupe_key_formats_are_the_documented_ones() -> None:
    assert keys.receipt("ev-0123abcd", "t-1", key_id="key-alice") == "wk:{t-1}:receipt:key-alice:ev-0123abcd"
    assert keys.receipt("ev-0123abcd", key_id="key-alice") == "wk:receipt:key-alice:ev-0123abcd"
    assert keys.seen("key-alice", "ev-0123abcd") == "wk:seen:key-alice:ev-0123abcd"
