"""What `wakeful recover` reads from wakeful.log is what the relay tagged and signed, and nothing
else: an untagged message, one tagged by another role or with a key it does not hold, or one whose
bytes changed after the tag, is named with its position and folded into nothing; so is a tagged one
without the relay's log signature, or whose bytes are not those it signed (operate/log_reader.py,
D92)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from confluent_kafka import Message
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wakeful.core import topics
from wakeful.core.log_signing import LogSigner
from wakeful.core.provenance import RoleKeys, RoleSigner
from wakeful.operate.log_reader import Read, _items
from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL, OutboxRecord

pytestmark = pytest.mark.timeout(30)

RELAY = RoleSigner("relay", "relay-k1", b"r" * 32)
GATE = RoleSigner("gate", "gate-k1", b"g" * 32)
KEYS = RoleKeys({"relay-k1": ("relay", b"r" * 32), "gate-k1": ("gate", b"g" * 32)})
LOG_KEY = LogSigner("log-1", Ed25519PrivateKey.from_private_bytes(b"\x03" * 32))


def record() -> bytes:
    return OutboxRecord(
        record_id="t-1:1",
        task_id="t-1",
        state_version=1,
        message_id="m-1",
        stage="ready",
        task_version=1,
        at=datetime(2026, 1, 1, tzinfo=UTC),
        sealed=base64.b64encode(b"blob").decode(),
    ).encode()


def new_read() -> Read:
    """A read that found a message the relay signed in partition 2 already."""
    return Read(log_keys={LOG_KEY.key_id: LOG_KEY.public()}, signed_in={2})


def signed(value: bytes, records: list[bytes]) -> list[tuple[str, str | bytes | None]]:
    """The relay's headers: its channel tag over `value`, its log signature over `records`."""
    return [*RELAY.headers(topics.LOG, b"", value), *LOG_KEY.headers(topics.LOG, records)]


def batch() -> bytes:
    return LOG_BATCH_HEAD + record() + LOG_BATCH_TAIL


def message(value: bytes, headers: list[tuple[str, str | bytes | None]]) -> Message:
    return Message(topic=topics.LOG, partition=2, offset=7, key=None, value=value, headers=headers)


def test_a_message_the_relay_tagged_is_read() -> None:
    read = new_read()
    items = _items(KEYS, topics.LOG, message(batch(), signed(batch(), [record()])), read)
    assert [i.record_id for i in items] == ["t-1:1"] and read.refused == [] and read.unsigned == 0


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ([], "unsigned"),
        (GATE.headers(topics.LOG, b"", batch()), "may not send"),
        (RoleSigner("relay", "relay-k9", b"x" * 32).headers(topics.LOG, b"", batch()), "not a key"),
        (RELAY.headers(topics.LOG, b"", batch().replace(b'"ready"', b'"closed"')), "bad signature"),
    ],
    ids=["untagged", "another-role", "unknown-key", "edited-after-the-tag"],
)
def test_a_message_not_tagged_by_the_relay_is_named_and_folded_into_nothing(
    headers: list[tuple[str, str | bytes | None]], why: str
) -> None:
    read = new_read()
    assert _items(KEYS, topics.LOG, message(batch(), headers), read) == []
    assert len(read.refused) == 1 and read.refused[0].startswith("2:7: ") and why in read.refused[0]


def test_a_tagged_message_that_is_not_a_batch_is_named() -> None:
    read = new_read()
    value = b"not json"
    headers = [*RELAY.headers(topics.LOG, b"", value), *LOG_KEY.headers(topics.LOG, [])]
    assert _items(KEYS, topics.LOG, message(value, headers), read) == []
    assert read.unsigned == 1 and "not those the relay signed" in read.unsigned_named[0]


OTHER_KEY = LogSigner("log-1", Ed25519PrivateKey.from_private_bytes(b"\x04" * 32))


@pytest.mark.parametrize(
    ("log_headers", "why"),
    [
        ([], "no log signature"),
        (LogSigner("log-9", OTHER_KEY.private).headers(topics.LOG, [record()]), "exported keys do not hold"),
        (OTHER_KEY.headers(topics.LOG, [record()]), "does not verify"),  # the right key id, another key
        (
            LOG_KEY.headers(topics.LOG, [record().replace(b'"ready"', b'"closed"')]),
            "not those the relay signed",
        ),
    ],
    ids=["no-log-signature", "unknown-log-key", "forged-signature", "another-records-signature"],
)
def test_a_tagged_message_without_the_relays_log_signature_is_named_and_folded_into_nothing(
    log_headers: list[tuple[str, str | bytes | None]], why: str
) -> None:
    """The channel key is a secret every relay login holds; the log key's private half is in the
    relay's process alone: a message tagged with the first and not signed with the second is a
    forgery, whatever it says (a tombstone included)."""
    read = new_read()
    headers = [*RELAY.headers(topics.LOG, b"", batch()), *log_headers]
    assert _items(KEYS, topics.LOG, message(batch(), headers), read) == []
    assert read.unsigned == 1 and read.unsigned_named[0].startswith("2:7: ") and why in read.unsigned_named[0]
    assert read.refused == []


def test_unsigned_messages_before_the_first_signed_one_of_their_partition_are_history_not_forgeries() -> None:
    """A log written before the relay signed it (D72) is folded no more than a forgery, but not named
    as one: nothing can be appended in front of a message already on the log."""
    read = Read(log_keys={LOG_KEY.key_id: LOG_KEY.public()})
    tagged_only = message(batch(), RELAY.headers(topics.LOG, b"", batch()))
    assert _items(KEYS, topics.LOG, tagged_only, read) == []
    assert (read.unsigned_before_d72, read.unsigned) == (1, 0)
    assert [
        i.record_id for i in _items(KEYS, topics.LOG, message(batch(), signed(batch(), [record()])), read)
    ] == ["t-1:1"]
    assert _items(KEYS, topics.LOG, tagged_only, read) == []  # after a signed one: a forgery, named
    assert (read.unsigned_before_d72, read.unsigned) == (1, 1) and read.unsigned_named[0].startswith("2:7: ")
