"""Where an audit's messages and keys come from (D72): a task's partition of wakeful.log read as the
Kafka admin, or a file from `wakeful log export`; the public keys from this machine's secrets and the
signer registry, or a file from `wakeful keys export`."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import orjson

from wakeful.consumers.kafka import client as kafka_client
from wakeful.core import log_signing, topics
from wakeful.core.settings import Settings
from wakeful.operate import log_reader
from wakeful.operate.audit.file import Logged, PublicKeys, keys_doc, read_keys, read_messages
from wakeful.schemas.signatures import VerifyKey


def holds(task_id: str, value: bytes) -> bool:
    """Whether a log message mentions the task's records (its id as a record's task_id): the
    messages an export keeps, an edited or unreadable one included, for the audit to judge."""
    return b'"task_id":' + orjson.dumps(task_id) in value


def from_kafka(settings: Settings, task_id: str, topic: str = topics.LOG) -> Iterator[Logged]:
    """The messages of the task's partition that hold its records, in offset order."""
    where = functools.partial(kafka_client.partition_of, task_id)
    for msg in log_reader.partition_messages(settings, where, topic):
        value: bytes = msg.value() or b""
        if not holds(task_id, value):
            continue
        headers = tuple((str(h[0]), h[1] if isinstance(h[1], bytes) else b"") for h in msg.headers() or ())
        yield Logged(topic, msg.partition() or 0, msg.offset() or 0, headers, value)


def from_file(path: Path) -> list[Logged]:
    with path.open("rb") as f:
        return list(read_messages(f))


def keys_from_file(path: Path) -> PublicKeys:
    return read_keys(path.read_bytes())


def exported_keys(settings: Settings, signers: list[tuple[VerifyKey, frozenset[str]]]) -> bytes:
    """The keys file: the relay's log public keys and the signer registry's public keys."""
    kinds = {key.key_id: kinds for key, kinds in signers}
    return keys_doc(log_signing.public_log_keys(settings), [key for key, _ in signers], kinds)


def keys_here(settings: Settings, signers: list[tuple[VerifyKey, frozenset[str]]]) -> PublicKeys:
    return read_keys(exported_keys(settings, signers))
