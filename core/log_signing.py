"""The relay's public-key signature on wakeful.log (D72).

The channel tag (core/provenance.py) proves a log message came from the relay only to holders of the
relay's channel key. An auditor outside the fleet holds no secret, so each log message also carries
an Ed25519 signature by the relay's log key, checkable with its public half alone:

    b"wakeful-log/1\\n" + topic + b"\\n" + index

where the value is a batch (schemas/logs.py: a head, the records joined by commas, a tail) and the
index holds, for each record in order, its length (4 bytes, big-endian) and its sha256. The index
rides in `wakeful-log-index`, the key's id in `wakeful-log-kid` (so keys can rotate), the signature
in `wakeful-log-sig`. The index fixes every byte of the value, and it lets a reader name the very
record that was changed in a message whose bytes no longer match what was signed.

Keys: the private seed only in `$WAKEFUL_SECRETS/relay/log-signing.json`; the public halves of every
log key ever made in `$WAKEFUL_SECRETS/admin/log-verifying.json` (`key id -> base64`, retired keys
kept, so what they signed still verifies), which `wakeful keys export` publishes. `ensure_log_key`
(run by `wakeful dev up` and the compose init service, through provenance.ensure_keys) makes both,
once; `rotate_log_key` makes a new one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from wakeful.core import secrets
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings

KID_HEADER = "wakeful-log-kid"
SIG_HEADER = "wakeful-log-sig"
INDEX_HEADER = "wakeful-log-index"
_ENTRY = 4 + 32  # a record's length and sha256 in the index
_DOMAIN = b"wakeful-log/1\n"
SIGNER_ROLE = "relay"
PUBLISHED_ROLE = "admin"
_SIGNING, _VERIFYING = "log-signing", "log-verifying"


def signed_bytes(topic: str, index: bytes) -> bytes:
    return b"".join((_DOMAIN, topic.encode(), b"\n", index))


def index_of(records: Sequence[bytes]) -> bytes:
    return b"".join(len(r).to_bytes(4, "big") + hashlib.sha256(r).digest() for r in records)


@dataclass(frozen=True)
class LogSigner:
    """The relay's log key: what it publishes on wakeful.log carries its signature."""

    key_id: str
    private: Ed25519PrivateKey = field(repr=False)

    def headers(self, topic: str, records: Sequence[bytes]) -> list[tuple[str, str | bytes | None]]:
        """The headers for a batch of `records` (its value: LOG_BATCH_HEAD, them, LOG_BATCH_TAIL)."""
        index = index_of(records)
        return [
            (KID_HEADER, self.key_id.encode()),
            (INDEX_HEADER, index),
            (SIG_HEADER, self.private.sign(signed_bytes(topic, index))),
        ]

    def public(self) -> bytes:
        return self.private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)


def header_values(headers: Any) -> dict[str, list[bytes]]:
    """Kafka headers (a list of (name, value)) as name -> every value it carries."""
    found: dict[str, list[bytes]] = {}
    for name, raw in headers or ():
        found.setdefault(name, []).append(raw if isinstance(raw, bytes) else b"")
    return found


@dataclass(frozen=True)
class Checked:
    """A log message's signature checked: why it fails (None: it verifies) and, when the signature
    holds but the value does not match it, which records (by position in the batch) were changed.
    `vouched`: the exact bytes of each record the signature vouches for, by position (every record
    when it verifies); `unvouched`: the value's bytes no signed record accounts for (what a reader
    must not take a record from)."""

    reason: str | None
    changed: tuple[int, ...] = ()
    vouched: tuple[tuple[int, bytes], ...] = ()
    unvouched: bytes = b""


def check(
    public_keys: Mapping[str, bytes], topic: str, value: bytes, headers: Any, frame: tuple[bytes, bytes]
) -> Checked:
    """This message's log signature checked against `public_keys`, and its value against the index:
    `frame` is the batch's head and tail (schemas/logs.py, a layer above this one)."""
    found = header_values(headers)
    kids, sigs, indexes = found.get(KID_HEADER, []), found.get(SIG_HEADER, []), found.get(INDEX_HEADER, [])
    if not kids or not sigs or not indexes:
        return Checked("no log signature (headers wakeful-log-kid, -index and -sig)")
    if len(kids) > 1 or len(sigs) > 1 or len(indexes) > 1:
        return Checked("more than one log signature header")
    kid, index = kids[0].decode(errors="replace"), indexes[0]
    public = public_keys.get(kid)
    if public is None:
        return Checked(f"signed by log key {kid[:64]!r}, which the exported keys do not hold")
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(sigs[0], signed_bytes(topic, index))
    except (InvalidSignature, ValueError):
        return Checked(f"log signature by key {kid} does not verify: its index is not as the relay signed it")
    if len(index) % _ENTRY:
        return Checked(f"log index of {len(index)} bytes is not whole entries")
    aligned = _aligned(value, index, frame)
    if aligned.changed:
        reason = "the message's bytes are not those the relay signed"
        return Checked(reason, aligned.changed, aligned.vouched, aligned.unvouched)
    return Checked(None, (), aligned.vouched)


@dataclass(frozen=True)
class _Aligned:
    changed: tuple[int, ...]
    vouched: tuple[tuple[int, bytes], ...]
    unvouched: bytes


def _aligned(value: bytes, index: bytes, frame: tuple[bytes, bytes]) -> _Aligned:
    """The value laid against the signed index: aligned from the head forwards and from the tail
    backwards, so one edited record is named alone even when the edit changed its length. The
    records that match are vouched for with their exact bytes; whatever lies between the matched
    head and tail (an edited record, or records added or taken away) is not."""
    entries = [
        (int.from_bytes(index[i : i + 4], "big"), index[i + 4 : i + _ENTRY])
        for i in range(0, len(index), _ENTRY)
    ]
    n, (head, tail) = len(entries), frame
    if not value.startswith(head) or not value.endswith(tail) or len(value) < len(head) + len(tail):
        return _Aligned(tuple(range(n)) or (0,), (), value)
    body = value[len(head) : len(value) - len(tail)]
    vouched: list[tuple[int, bytes]] = []
    front, at = 0, 0
    while front < n:
        size, digest = entries[front]
        part = body[at : at + size]
        sep = body[at + size : at + size + 1]
        if hashlib.sha256(part).digest() != digest or sep != (b"," if front < n - 1 else b""):
            break
        vouched.append((front, part))
        front, at = front + 1, at + size + 1
    if (front == n and at - 1 == len(body)) or (n == 0 and body == b""):
        return _Aligned((), tuple(vouched), b"")
    back, end = n, len(body)
    while back > front:
        size, digest = entries[back - 1]
        part = body[end - size : end]
        if end - size < at or hashlib.sha256(part).digest() != digest:
            break
        if back - 1 > 0 and body[end - size - 1 : end - size] != b",":
            break
        vouched.append((back - 1, part))
        back, end = back - 1, end - size - 1
    return _Aligned(tuple(range(front, max(back, front + 1))), tuple(sorted(vouched)), body[at:end])


def load_log_signer(settings: Settings) -> LogSigner:
    """The relay's log key (read only by the relay's own process)."""
    doc = secrets.load(settings, SIGNER_ROLE, _SIGNING)
    try:
        seed = base64.b64decode(doc["seed"], validate=True)
        return LogSigner(doc["key_id"], Ed25519PrivateKey.from_private_bytes(seed))
    except (KeyError, ValueError, binascii.Error):
        raise ConfigError(
            str(secrets.path(settings, SIGNER_ROLE, _SIGNING)),
            "not a log signing key: delete it and run `wakeful dev up` to make a new one",
        ) from None


def public_log_keys(settings: Settings) -> dict[str, bytes]:
    """Every log key's public half, retired ones included: key id -> 32 raw bytes."""
    doc = secrets.load(settings, PUBLISHED_ROLE, _VERIFYING)
    try:
        return {kid: base64.b64decode(b64, validate=True) for kid, b64 in doc.items()}
    except (ValueError, binascii.Error):
        raise ConfigError(
            str(secrets.path(settings, PUBLISHED_ROLE, _VERIFYING)),
            "not a file of log public keys: run `wakeful dev up` to rebuild it",
        ) from None


def ensure_log_key(settings: Settings) -> bool:
    """Make the relay's log key the first time, and publish its public half. True if it made one."""
    made = not secrets.exists(settings, SIGNER_ROLE, _SIGNING)
    secrets.ensure(settings, SIGNER_ROLE, _SIGNING, _new_key)
    _publish(settings, load_log_signer(settings))
    return made


def rotate_log_key(settings: Settings) -> str:
    """A new log key for the relay (it signs with it from its next start); the old public half stays
    published. Returns the new key id."""
    doc = _new_key()
    seed = base64.b64decode(doc["seed"], validate=True)
    signer = LogSigner(doc["key_id"], Ed25519PrivateKey.from_private_bytes(seed))
    _publish(settings, signer)  # first: a relay that restarts in between never signs with an unpublished key
    secrets.replace(settings, SIGNER_ROLE, _SIGNING, doc)
    return signer.key_id


def _publish(settings: Settings, signer: LogSigner) -> None:
    known = (
        secrets.load(settings, PUBLISHED_ROLE, _VERIFYING)
        if secrets.exists(settings, PUBLISHED_ROLE, _VERIFYING)
        else {}
    )
    if known.get(signer.key_id) != base64.b64encode(signer.public()).decode():
        known[signer.key_id] = base64.b64encode(signer.public()).decode()
        secrets.replace(settings, PUBLISHED_ROLE, _VERIFYING, known)


def _new_key() -> dict[str, str]:
    return {"key_id": f"log-{os.urandom(6).hex()}", "seed": base64.b64encode(os.urandom(32)).decode()}
