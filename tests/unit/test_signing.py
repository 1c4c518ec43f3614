"""A signature covers every field of an event, the timestamp included; verification never raises."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from wakeful.authority.snapshot import decode_signer
from wakeful.core.errors import ConfigError
from wakeful.producers import keys
from wakeful.producers.signing import (
    Ed25519Signer,
    HmacSigner,
    VerifyKey,
    sign_event,
    signing_bytes,
)
from wakeful.schemas.events import APPROVE, SignedEvent

# signing.Signer declares key_id and alg as settable attributes, which the frozen signer dataclasses
# do not offer, so mypy refuses them as a Signer; the cast in approval() goes with that fix.
AnySigner = Ed25519Signer | HmacSigner
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ED = Ed25519Signer.from_seed("crm-1", bytes(range(32)))
ED_KEY = VerifyKey("crm-1", "ed25519", keys.public_bytes(ED), "system:crm")
HM = HmacSigner("ui-1", b"shared-secret-of-the-approvals-ui")
HM_KEY = VerifyKey("ui-1", "hmac-sha256", HM.secret, "system:approvals-ui")
PAIRS: list[tuple[AnySigner, VerifyKey]] = [(ED, ED_KEY), (HM, HM_KEY)]

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
payloads = st.dictionaries(st.text(max_size=8), json_values, max_size=6)
ids = st.text(min_size=8, max_size=40)

# Every field the signature must cover, with a strategy for a replacement value.
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "schema_version": st.integers(0, 2**31),
    "event_id": ids,
    "kind": st.text(max_size=20),
    "task_id": st.none() | ids,
    "correlation_id": st.none() | ids,
    "key_id": st.text(min_size=1, max_size=20),
    "issued_at": st.datetimes(timezones=st.just(UTC)),
    "payload": payloads,
}


def test_every_event_field_is_covered_by_the_signature() -> None:
    assert set(FIELD_VALUES) == set(SignedEvent.model_fields) - {"signature"}


def approval(signer: AnySigner, payload: dict[str, Any] | None = None) -> SignedEvent:
    return sign_event(
        signer,
        APPROVE,
        payload if payload is not None else {"version": 2},
        correlation_id="corr-7",
        task_id="refund-7",
        event_id="ev-00000001",
        issued_at=T0,
    )


@pytest.mark.parametrize(("signer", "key"), PAIRS, ids=["ed25519", "hmac"])
@settings(max_examples=50)
@given(payload=payloads)
def test_a_signed_event_verifies_after_the_wire_round_trip(
    signer: AnySigner, key: VerifyKey, payload: dict[str, Any]
) -> None:
    event = approval(signer, payload)
    assert key.verify(SignedEvent.decode(event.encode()))


@pytest.mark.parametrize(("signer", "key"), PAIRS, ids=["ed25519", "hmac"])
@settings(max_examples=100)
@given(change=st.sampled_from(sorted(FIELD_VALUES)).flatmap(lambda f: st.tuples(st.just(f), FIELD_VALUES[f])))
def test_changing_any_field_breaks_the_signature(
    signer: AnySigner, key: VerifyKey, change: tuple[str, Any]
) -> None:
    event = approval(signer)
    field, value = change
    tampered = event.model_copy(update={field: value})
    assume(tampered != event)  # the draw may repeat the signed value
    assert not key.verify(tampered)


@pytest.mark.parametrize(("signer", "key"), PAIRS, ids=["ed25519", "hmac"])
@pytest.mark.parametrize("shift", [timedelta(microseconds=1), timedelta(days=-30)])
def test_a_replayed_event_with_a_fresh_timestamp_fails_verification(
    signer: AnySigner, key: VerifyKey, shift: timedelta
) -> None:
    event = approval(signer)
    assert key.verify(event)
    assert not key.verify(event.model_copy(update={"issued_at": event.issued_at + shift}))


def test_an_ed25519_signature_from_another_key_fails() -> None:
    other = Ed25519Signer.from_seed("crm-1", bytes(32))
    assert not ED_KEY.verify(approval(other))


def test_a_re_keyed_signer_record_is_read_anew_despite_the_cache() -> None:
    """Decoded records and loaded keys are cached by their bytes: a signer re-keyed under the same
    key id must never be checked against the key it had before."""

    def record(signer: Ed25519Signer) -> bytes:
        material = base64.b64encode(keys.public_bytes(signer)).decode()
        return orjson.dumps(
            {"alg": "ed25519", "material": material, "principal": "system:crm", "kinds": [APPROVE]}
        )

    rekeyed = Ed25519Signer.from_seed("crm-1", bytes(32))
    before, _ = decode_signer("crm-1", record(ED))
    assert before.verify(approval(ED))
    after, _ = decode_signer("crm-1", record(rekeyed))
    assert not after.verify(approval(ED)) and after.verify(approval(rekeyed))


def test_an_hmac_tag_made_with_another_secret_fails() -> None:
    assert not HM_KEY.verify(approval(HmacSigner("ui-1", b"a-guessed-secret")))


def test_a_tag_of_one_algorithm_is_refused_by_a_key_of_the_other() -> None:
    assert not ED_KEY.verify(approval(HM))
    assert not HM_KEY.verify(approval(ED))


@pytest.mark.parametrize("key", [ED_KEY, HM_KEY], ids=["ed25519", "hmac"])
@settings(max_examples=200)
@given(signature=st.text(max_size=120) | st.binary(max_size=90).map(lambda b: base64.b64encode(b).decode()))
def test_a_garbage_signature_is_refused_without_raising(key: VerifyKey, signature: str) -> None:
    event = approval(ED).model_copy(update={"signature": signature})
    assert key.verify(event) is False


def reversed_order(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: reversed_order(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reversed_order(v) for v in value]
    return value


@settings(max_examples=100)
@given(payload=payloads)
def test_the_signed_bytes_do_not_depend_on_payload_insertion_order(payload: dict[str, Any]) -> None:
    event = approval(ED, payload)
    reordered = event.model_copy(update={"payload": reversed_order(payload)})
    assert signing_bytes(reordered) == signing_bytes(event)
    assert ED_KEY.verify(reordered)


def test_a_generated_key_is_private_to_its_owner_and_loads_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "crm-1.key"
    signer = keys.generate_signer("crm-1", path)
    assert path.stat().st_mode & 0o777 == 0o600
    loaded = keys.load_signer("crm-1", path)
    assert keys.public_bytes(loaded) == keys.public_bytes(signer)
    assert len(keys.public_bytes(signer)) == 32
    key = VerifyKey("crm-1", "ed25519", keys.public_bytes(signer), "system:crm")
    assert key.verify(approval(loaded))


def test_generating_a_key_never_overwrites_an_existing_one(tmp_path: Path) -> None:
    path = tmp_path / "crm-1.key"
    first = keys.generate_signer("crm-1", path)
    before = path.read_bytes()
    with pytest.raises(ConfigError, match="already there"):
        keys.generate_signer("crm-1", path)
    assert path.read_bytes() == before
    assert keys.public_bytes(keys.load_signer("crm-1", path)) == keys.public_bytes(first)


@pytest.mark.parametrize("content", [b"", b"not base64!\n", base64.b64encode(os.urandom(31)) + b"\n"])
def test_a_malformed_key_file_is_a_config_error_naming_the_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.key"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=r"bad\.key"):
        keys.load_signer("crm-1", path)
