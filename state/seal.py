"""Sealing: checkpoints are stored as AES-256-GCM blobs bound to their task, version and schema.

Blob layout (all integers big-endian):

    b"WKS1" | len(kid):u8 | kid | len(task_id):u8 | task_id | state_version:u64 | schema:u16
    | nonce:12 | ciphertext+tag

Everything before the nonce is the associated data, so the header is authenticated but readable:
a loader learns which key, task and version a blob claims before it trusts any of it.
Integrity is not secrecy, but GCM gives both for the price of one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from wakeful.core.errors import KeyringError, MisplacedState, TamperedState

MAGIC = b"WKS1"
_NONCE = 12
_TAIL = struct.Struct(">QH")


@dataclass(frozen=True)
class Header:
    kid: str
    task_id: str
    state_version: int
    schema: int
    size: int  # header bytes, i.e. where the nonce starts


class Keyring:
    """Key ids to 32-byte keys; `active` seals, every listed key unseals (rotation without downtime)."""

    def __init__(self, keys: dict[str, bytes], active: str) -> None:
        if active not in keys:
            raise KeyringError(f"active key id {active!r} is not in the keyring")
        for kid, key in keys.items():
            if len(key) != 32 or not kid or len(kid.encode()) > 255:
                raise KeyringError(f"key {kid!r} must be 32 bytes with a short id")
        self._keys = dict(keys)
        self.active = active
        self._aead: dict[str, AESGCM] = {}
        self._subkeys: dict[tuple[str, bytes], bytes] = {}

    def aead(self, kid: str) -> AESGCM:
        cached = self._aead.get(kid)
        if cached is None:
            key = self._keys.get(kid)
            if key is None:
                raise KeyringError(
                    f"no key {kid!r} in the keyring: add the retired key back (rotation keeps old ids)"
                )
            cached = self._aead[kid] = AESGCM(key)
        return cached

    def subkey(self, kid: str, purpose: bytes) -> bytes:
        """A key of its own for another use of the keyring key `kid` (HMAC-SHA256 of `purpose`), so
        that no two uses ever share key bytes; KeyringError for a key id the keyring lacks."""
        found = self._subkeys.get((kid, purpose))
        if found is None:
            key = self._keys.get(kid)
            if key is None:
                raise KeyringError(
                    f"no key {kid!r} in the keyring: add the retired key back (rotation keeps old ids)"
                )
            found = self._subkeys[kid, purpose] = hmac.digest(key, purpose, hashlib.sha256)
        return found

    @property
    def kids(self) -> list[str]:
        return sorted(self._keys)

    def rotated(self, new_kid: str | None = None) -> Keyring:
        kid = new_kid or f"k{len(self._keys) + 1}-{secrets.token_hex(2)}"
        if kid in self._keys:
            raise KeyringError(f"key id {kid!r} is in the keyring already; a rotation needs a new id")
        return Keyring({**self._keys, kid: AESGCM.generate_key(bit_length=256)}, kid)

    def to_json(self) -> bytes:
        keys = {k: base64.b64encode(v).decode() for k, v in self._keys.items()}
        return orjson.dumps({"active": self.active, "keys": keys}, option=orjson.OPT_INDENT_2)

    @classmethod
    def from_json(cls, raw: bytes, source: str) -> Keyring:
        try:
            doc = orjson.loads(raw)
            keys = {k: base64.b64decode(v, validate=True) for k, v in doc["keys"].items()}
            return cls(keys, doc["active"])
        except KeyringError as exc:
            raise KeyringError(f"{source}: {exc}") from None
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise KeyringError(f"{source} is not a keyring file ({exc!r})") from exc

    @classmethod
    def generate(cls) -> Keyring:
        return cls({"k1": AESGCM.generate_key(bit_length=256)}, "k1")

    @classmethod
    def load(cls, path: Path) -> Keyring:
        try:
            return cls.from_json(path.read_bytes(), str(path))
        except FileNotFoundError:
            raise KeyringError(
                f"no keyring at {path}: `wakeful dev up` creates one for the local stack, "
                "or set WAKEFUL_KEYRING to your keyring file"
            ) from None

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a stale temp file keeps its old mode through O_CREAT
        with os.fdopen(fd, "wb") as f:
            f.write(self.to_json())
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)


@dataclass(frozen=True)
class Sealer:
    keyring: Keyring

    def seal(self, task_id: str, state_version: int, schema: int, plaintext: bytes) -> bytes:
        header = _header(self.keyring.active, task_id, state_version, schema)
        nonce = os.urandom(_NONCE)
        return header + nonce + self.keyring.aead(self.keyring.active).encrypt(nonce, plaintext, header)

    def unseal(self, task_id: str, blob: bytes) -> tuple[Header, bytes]:
        """Verify and open a blob stored under task_id; raises a named IntegrityError if it is not sound."""
        head = read_header(task_id, blob)
        nonce = blob[head.size : head.size + _NONCE]
        try:
            plain = self.keyring.aead(head.kid).decrypt(nonce, blob[head.size + _NONCE :], blob[: head.size])
        except InvalidTag:
            raise TamperedState(task_id, "the sealed blob does not verify (edited or forged)") from None
        # Only a blob that verifies can be "misplaced": a forged header is tampering.
        if head.task_id != task_id:
            raise MisplacedState(task_id, f"the stored blob was sealed for task {head.task_id!r}")
        return head, plain


def _header(kid: str, task_id: str, state_version: int, schema: int) -> bytes:
    k, t = kid.encode(), task_id.encode()
    return MAGIC + bytes([len(k)]) + k + bytes([len(t)]) + t + _TAIL.pack(state_version, schema)


def read_header(task_id: str, blob: bytes) -> Header:
    try:
        if blob[:4] != MAGIC:
            raise ValueError("bad magic")
        pos = 4
        klen = blob[pos]
        kid = blob[pos + 1 : pos + 1 + klen].decode()
        pos += 1 + klen
        tlen = blob[pos]
        tid = blob[pos + 1 : pos + 1 + tlen].decode()
        pos += 1 + tlen
        version, schema = _TAIL.unpack_from(blob, pos)
        pos += _TAIL.size
        if len(blob) < pos + _NONCE + 16:
            raise ValueError("truncated")
    except (IndexError, ValueError, struct.error, UnicodeDecodeError) as exc:
        raise TamperedState(task_id, f"the stored blob is not a sealed checkpoint ({exc})") from None
    return Header(kid, tid, version, schema, pos)
