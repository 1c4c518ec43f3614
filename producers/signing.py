"""Signing upstream events: Ed25519 by key id, or HMAC-SHA256 for shared secrets. Checking them is
schemas/signatures.py's (`VerifyKey`), re-exported here for senders that verify their own."""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

# A signer registered without a tenant (and every record from before tenants) signs for this one.
from wakeful.schemas.events import SignedEvent
from wakeful.schemas.signatures import Alg, VerifyKey, signing_bytes

__all__ = ["Alg", "Ed25519Signer", "HmacSigner", "Signer", "VerifyKey", "sign_event", "signing_bytes"]


class Signer(Protocol):
    @property
    def key_id(self) -> str: ...

    @property
    def alg(self) -> Alg: ...

    def sign(self, data: bytes) -> bytes: ...


@dataclass(frozen=True)
class Ed25519Signer:
    key_id: str
    private_key: Ed25519PrivateKey
    alg: Alg = "ed25519"

    def sign(self, data: bytes) -> bytes:
        return self.private_key.sign(data)

    @classmethod
    def from_seed(cls, key_id: str, seed: bytes) -> Ed25519Signer:
        return cls(key_id, Ed25519PrivateKey.from_private_bytes(seed))


@dataclass(frozen=True)
class HmacSigner:
    key_id: str
    secret: bytes
    alg: Alg = "hmac-sha256"

    def sign(self, data: bytes) -> bytes:
        return hmac.new(self.secret, data, hashlib.sha256).digest()


def sign_event(
    signer: Signer,
    kind: str,
    payload: dict[str, Any] | None = None,
    *,
    task_id: str | None = None,
    correlation_id: str | None = None,
    event_id: str | None = None,
    issued_at: datetime | None = None,
) -> SignedEvent:
    unsigned = SignedEvent(
        event_id=event_id or f"ev-{uuid.uuid4().hex}",
        kind=kind,
        task_id=task_id,
        correlation_id=correlation_id,
        key_id=signer.key_id,
        issued_at=issued_at or datetime.now(UTC),
        payload=payload or {},
        signature="",
    )
    signature = base64.b64encode(signer.sign(signing_bytes(unsigned))).decode()
    return unsigned.model_copy(update={"signature": signature})
