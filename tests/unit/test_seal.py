"""Sealed checkpoints: a blob opens only under its own task, unedited, with a key the keyring still holds."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from wakeful.core.errors import IntegrityError, KeyringError, MisplacedState, TamperedState
from wakeful.state.seal import MAGIC, Header, Keyring, Sealer, read_header

# Module-level rings: hypothesis tests cannot use function-scoped fixtures.
RING = Keyring.generate()
SEALER = Sealer(RING)
TASK = "refund-7"
PLAIN = b'{"stage":"ready","amount":1250}'
NONCE = 12
TAG = 16

task_ids = st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True)
u64 = st.integers(0, 2**64 - 1)
u16 = st.integers(0, 2**16 - 1)


def _seal(task_id: str = TASK, version: int = 3, schema: int = 2, plain: bytes = PLAIN) -> bytes:
    return SEALER.seal(task_id, version, schema, plain)


def _flip(blob: bytes, pos: int, mask: int = 0x01) -> bytes:
    edited = bytearray(blob)
    edited[pos] ^= mask
    return bytes(edited)


def _ring_json(doc: Any) -> bytes:
    return orjson.dumps(doc)


# --- round trip and header ------------------------------------------------------------------------


@settings(max_examples=200)
@given(task_id=task_ids, version=u64, schema=u16, plain=st.binary(max_size=512))
def test_sealed_blob_opens_to_its_plaintext_under_its_own_task(
    task_id: str, version: int, schema: int, plain: bytes
) -> None:
    blob = SEALER.seal(task_id, version, schema, plain)
    head, opened = SEALER.unseal(task_id, blob)
    assert opened == plain
    assert head == Header(RING.active, task_id, version, schema, head.size)


def test_header_claims_are_readable_before_any_key_is_used() -> None:
    blob = _seal(version=41, schema=7)
    head = read_header(TASK, blob)
    assert head == Header(kid="k1", task_id=TASK, state_version=41, schema=7, size=head.size)
    assert blob.startswith(MAGIC)
    # Header, then a 12-byte nonce, then ciphertext the size of the plaintext plus a 16-byte tag.
    assert len(blob) == head.size + NONCE + len(PLAIN) + TAG


def test_plaintext_does_not_appear_in_the_blob() -> None:
    assert PLAIN not in _seal()


def test_sealing_the_same_state_twice_uses_a_fresh_nonce() -> None:
    first, second = _seal(), _seal()
    assert first != second
    assert SEALER.unseal(TASK, first)[1] == SEALER.unseal(TASK, second)[1] == PLAIN


# --- tampering ------------------------------------------------------------------------------------


@settings(max_examples=200)
@given(data=st.data(), mask=st.integers(1, 255))
def test_any_single_edited_byte_anywhere_in_the_blob_never_opens(data: st.DataObject, mask: int) -> None:
    blob = _seal()
    pos = data.draw(st.integers(0, len(blob) - 1), label="pos")
    # An edit inside the key id makes the blob name a key nobody has: that is a KeyringError by
    # contract (see test_blob_naming_an_unknown_key_id_is_a_keyring_error). Everything else is an
    # IntegrityError, which quarantines the task.
    with pytest.raises((IntegrityError, KeyringError)):
        SEALER.unseal(TASK, _flip(blob, pos, mask))


@settings(max_examples=200)
@given(data=st.data(), mask=st.integers(1, 255))
def test_edited_magic_version_schema_nonce_ciphertext_or_tag_is_tampered(
    data: st.DataObject, mask: int
) -> None:
    blob = _seal()
    head = read_header(TASK, blob)
    tail = range(head.size - 10, head.size)  # state_version:u64 | schema:u16
    positions = [*range(len(MAGIC)), *tail, *range(head.size, len(blob))]
    pos = data.draw(st.sampled_from(positions), label="pos")
    with pytest.raises(TamperedState) as info:
        SEALER.unseal(TASK, _flip(blob, pos, mask))
    assert info.value.task_id == TASK


def test_raising_the_version_in_the_header_does_not_verify() -> None:
    # The header is associated data: claiming a newer state_version (to dodge rollback checks) breaks the tag.
    blob = _seal(version=3)
    head = read_header(TASK, blob)
    forged = blob[: head.size - 10] + (4).to_bytes(8, "big") + blob[head.size - 2 :]
    assert read_header(TASK, forged).state_version == 4
    with pytest.raises(TamperedState):
        SEALER.unseal(TASK, forged)


def test_blob_sealed_for_another_task_is_refused_as_misplaced() -> None:
    blob = _seal(task_id="refund-8")
    with pytest.raises(MisplacedState) as info:
        SEALER.unseal(TASK, blob)
    assert info.value.task_id == TASK
    assert "'refund-8'" in info.value.detail
    assert info.value.reason_code == "misplaced"


def test_blob_relabelled_for_this_task_does_not_verify() -> None:
    # Copying another task's blob and rewriting its header to name this task is caught by the tag.
    other = _seal(task_id="refund-8")
    assert len("refund-8") == len(TASK)
    relabelled = other.replace(b"refund-8", TASK.encode(), 1)
    assert read_header(TASK, relabelled).task_id == TASK
    with pytest.raises(TamperedState):
        SEALER.unseal(TASK, relabelled)


def test_blob_sealed_under_same_key_id_but_another_key_is_tampered() -> None:
    stranger = Sealer(Keyring.generate())  # also names its key "k1"
    with pytest.raises(TamperedState):
        SEALER.unseal(TASK, stranger.seal(TASK, 3, 2, PLAIN))


def test_blob_naming_an_unknown_key_id_is_a_keyring_error() -> None:
    newer = RING.rotated("k9")
    blob = Sealer(newer).seal(TASK, 3, 2, PLAIN)
    with pytest.raises(KeyringError) as info:
        SEALER.unseal(TASK, blob)
    assert "'k9'" in str(info.value)
    assert "add the retired key back" in str(info.value)


@settings(max_examples=200)
@given(data=st.data())
def test_any_truncation_of_a_blob_is_tampered(data: st.DataObject) -> None:
    blob = _seal()
    cut = data.draw(st.integers(0, len(blob) - 1), label="cut")
    with pytest.raises(TamperedState):
        SEALER.unseal(TASK, blob[:cut])


@settings(max_examples=200)
@given(garbage=st.binary(max_size=300))
def test_garbage_without_the_magic_is_tampered(garbage: bytes) -> None:
    if garbage.startswith(MAGIC):
        garbage = b"X" + garbage
    with pytest.raises(TamperedState):
        SEALER.unseal(TASK, garbage)


@settings(max_examples=200)
@given(body=st.binary(max_size=300))
def test_garbage_after_the_magic_never_opens(body: bytes) -> None:
    with pytest.raises((IntegrityError, KeyringError)):
        SEALER.unseal(TASK, MAGIC + body)


def test_empty_blob_is_tampered() -> None:
    with pytest.raises(TamperedState):
        SEALER.unseal(TASK, b"")


# --- rotation -------------------------------------------------------------------------------------


def test_blobs_sealed_before_rotation_stay_readable_after_it() -> None:
    ring = Keyring.generate()
    old_blob = Sealer(ring).seal(TASK, 1, 2, PLAIN)
    rotated = ring.rotated()
    head, opened = Sealer(rotated).unseal(TASK, old_blob)
    assert (head.kid, opened) == ("k1", PLAIN)


def test_blobs_sealed_after_rotation_use_the_new_key_id() -> None:
    ring = Keyring.generate()
    rotated = ring.rotated()
    assert rotated.active != ring.active
    assert rotated.kids == sorted([ring.active, rotated.active])
    blob = Sealer(rotated).seal(TASK, 2, 2, PLAIN)
    assert read_header(TASK, blob).kid == rotated.active
    assert Sealer(rotated).unseal(TASK, blob)[1] == PLAIN


def test_rotation_returns_a_new_keyring_and_leaves_the_old_one_as_it_was() -> None:
    ring = Keyring.generate()
    ring.rotated("k2")
    assert (ring.active, ring.kids) == ("k1", ["k1"])


def test_rotation_to_a_named_key_id_activates_that_id() -> None:
    rotated = Keyring.generate().rotated("2026-q3")
    assert rotated.active == "2026-q3"
    assert read_header(TASK, Sealer(rotated).seal(TASK, 1, 2, PLAIN)).kid == "2026-q3"


def test_repeated_rotation_keeps_every_key_readable() -> None:
    ring = Keyring.generate()
    blobs = []
    for version in range(1, 5):
        blobs.append(Sealer(ring).seal(TASK, version, 2, PLAIN))
        ring = ring.rotated()
    assert len(ring.kids) == 5
    heads = [Sealer(ring).unseal(TASK, blob)[0] for blob in blobs]
    assert [h.state_version for h in heads] == [1, 2, 3, 4]
    assert len({h.kid for h in heads}) == 4


def test_rotation_never_replaces_an_existing_key() -> None:
    # Re-using a key id would swap in a fresh random key under the old id and make every blob sealed
    # with the old key unreadable. Refusing the id is the only safe answer.
    ring = Keyring.generate()
    with pytest.raises(KeyringError):
        ring.rotated("k1")


# --- keyring construction and files ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("keys", "active"),
    [
        ({"k1": os.urandom(32)}, "k2"),
        ({"k1": os.urandom(31)}, "k1"),
        ({"k1": os.urandom(33)}, "k1"),
        ({"": os.urandom(32)}, ""),
        ({"k" * 256: os.urandom(32)}, "k" * 256),
        ({"k1": os.urandom(32), "k2": b""}, "k1"),
    ],
    ids=["active-missing", "short-key", "long-key", "empty-id", "id-over-255-bytes", "one-bad-key"],
)
def test_malformed_keyring_is_refused_at_construction(keys: dict[str, bytes], active: str) -> None:
    with pytest.raises(KeyringError):
        Keyring(keys, active)


def test_generated_keyrings_are_independent() -> None:
    first, second = Keyring.generate(), Keyring.generate()
    assert first.kids == second.kids == ["k1"]
    assert first.to_json() != second.to_json()


def test_keyring_survives_save_and_load_and_still_opens_old_blobs(tmp_path: Path) -> None:
    ring = Keyring.generate().rotated("k2")
    blob = Sealer(ring).seal(TASK, 5, 2, PLAIN)
    path = tmp_path / "nested" / "keyring.json"
    ring.save(path)
    loaded = Keyring.load(path)
    assert (loaded.active, loaded.kids) == ("k2", ["k1", "k2"])
    assert loaded.to_json() == ring.to_json()
    assert Sealer(loaded).unseal(TASK, blob)[1] == PLAIN


def test_saved_keyring_file_is_private_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    Keyring.generate().save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keyring.json"]


def test_saving_over_a_world_readable_keyring_makes_it_private(tmp_path: Path) -> None:
    path = tmp_path / "keyring.json"
    path.write_bytes(b"{}")
    path.chmod(0o644)
    Keyring.generate().save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_saved_keyring_is_private_even_when_a_stale_temp_file_exists(tmp_path: Path) -> None:
    # A leftover temp file (an interrupted save, a copy by hand) must not pass its mode on to the keyring.
    path = tmp_path / "keyring.json"
    stale = path.with_suffix(".tmp")
    stale.write_bytes(b"stale")
    stale.chmod(0o644)
    Keyring.generate().save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_missing_keyring_file_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(KeyringError) as info:
        Keyring.load(tmp_path / "absent.json")
    assert "wakeful dev up" in str(info.value)
    assert "WAKEFUL_KEYRING" in str(info.value)


GOOD_KEY = base64.b64encode(bytes(32)).decode()


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b"null",
        b'"k1"',
        _ring_json({"keys": {"k1": GOOD_KEY}}),
        _ring_json({"active": "k1"}),
        _ring_json({"active": "k1", "keys": {"k1": "not base64!"}}),
        _ring_json({"active": "k1", "keys": {"k1": 5}}),
        _ring_json({"active": ["k1"], "keys": {"k1": GOOD_KEY}}),
    ],
)
def test_file_that_is_not_a_keyring_is_a_keyring_error_naming_the_file(raw: bytes) -> None:
    with pytest.raises(KeyringError) as info:
        Keyring.from_json(raw, "/etc/wakeful/keyring.json")
    assert "/etc/wakeful/keyring.json is not a keyring file" in str(info.value)


@pytest.mark.parametrize(
    ("doc", "complaint"),
    [
        ({"active": "k2", "keys": {"k1": GOOD_KEY}}, "active key id 'k2'"),
        ({"active": "k1", "keys": {"k1": base64.b64encode(bytes(16)).decode()}}, "must be 32 bytes"),
    ],
)
def test_keyring_file_with_an_unusable_key_is_a_keyring_error(doc: Any, complaint: str) -> None:
    with pytest.raises(KeyringError) as info:
        Keyring.from_json(_ring_json(doc), "keyring.json")
    assert complaint in str(info.value)


@pytest.mark.parametrize("keys", [[], "k1", 5, None], ids=["list", "string", "number", "null"])
def test_keyring_file_whose_keys_are_not_an_object_is_a_keyring_error(keys: object) -> None:
    with pytest.raises(KeyringError):
        Keyring.from_json(_ring_json({"active": "k1", "keys": keys}), "keyring.json")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=200)
@given(
    doc=st.fixed_dictionaries(
        {},
        optional={
            "active": st.sampled_from(["k1", ""]) | json_values,
            "keys": st.dictionaries(st.sampled_from(["k1", "k2", ""]), st.just(GOOD_KEY) | json_values)
            | json_values,
        },
    )
    | json_values
)
@example(doc={"active": "k1", "keys": []})
def test_any_json_document_is_either_a_keyring_or_a_keyring_error(doc: Any) -> None:
    try:
        ring = Keyring.from_json(orjson.dumps(doc), "keyring.json")
    except KeyringError:
        return
    assert ring.active in ring.kids
    assert Sealer(ring).unseal(TASK, Sealer(ring).seal(TASK, 1, 2, PLAIN))[1] == PLAIN
