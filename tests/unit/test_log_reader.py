"""What `wakeful recover` reads from wakeful.log is what the relay tagged, and nothing else: an
untagged message, one tagged by another role or with a key it does not hold, or one whose bytes
changed after the tag, is named with its position and folded into nothing (consumers/log_reader.py)."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
from confluent_kafka import Message

from wakeful.consumers.log_reader import Read, _items
from wakeful.core import topics
from wakeful.core.provenance import RoleKeys, RoleSigner
from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL, OutboxRecord

pytestmark = pytest.mark.timeout(30)

RELAY = RoleSigner("relay", "relay-k1", b"r" * 32)
GATE = RoleSigner("gate", "gate-k1", b"g" * 32)
KEYS = RoleKeys({"relay-k1": ("relay", b"r" * 32), "gate-k1": ("gate", b"g" * 32)})


def batch() -> bytes:
    record = OutboxRecord(
        record_id="t-1:1",
        task_id="t-1",
        state_version=1,
        message_id="m-1",
        stage="ready",
        task_version=1,
        at=datetime(2026, 1, 1, tzinfo=UTC),
        sealed=base64.b64encode(b"blob").decode(),
    )
    return LOG_BATCH_HEAD + record.encode() + LOG_BATCH_TAIL


def message(value: bytes, headers: list[tuple[str, str | bytes | None]]) -> Message:
    return Message(topic=topics.LOG, partition=2, offset=7, key=None, value=value, headers=headers)


def test_a_message_the_relay_tagged_is_read() -> None:
    read = Read()
    items = _items(KEYS, topics.LOG, message(batch(), RELAY.headers(topics.LOG, b"", batch())), read)
    assert [i.record_id for i in items] == ["t-1:1"] and read.refused == []


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
    read = Read()
    assert _items(KEYS, topics.LOG, message(batch(), headers), read) == []
    assert len(read.refused) == 1 and read.refused[0].startswith("2:7: ") and why in read.refused[0]


def test_a_tagged_message_that_is_not_a_batch_is_named() -> None:
    read = Read()
    value = b"not json"
    assert _items(KEYS, topics.LOG, message(value, RELAY.headers(topics.LOG, b"", value)), read) == []
    assert read.refused and "not JSON" in read.refused[0]
