"""Signing and verifying upstream events: Ed25519 by key id, or HMAC-SHA256 for shared secrets."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

# A signer registered without a tenant (and every record from before tenants) signs for this one.
from wakeful.core.ids import DEFAULT_TENANT
from wakeful.schemas import webhook
from wakeful.schemas.base import dumps_any_int
from wakeful.schemas.events import SignedEvent

Alg = Literal["ed25519", "hmac-sha256"]


def signing_bytes(event: SignedEvent) -> bytes:
    """The canonical bytes a signature covers: every field but the signature, as compact JSON with
    sorted keys and no escaping beyond what JSON requires.

    orjson writes it; an integer past 64 bits, which orjson cannot hold, is written by the standard
    library's encoder in the same form instead, so such an event still verifies and its sender
    gets an answer (its payload is then refused by the workflow, with a receipt).
    Raises ValueError only for an integer too long for Python to print (over 4300 digits)."""
    return dumps_any_int(event.model_dump(mode="json", by_alias=True, exclude={"signature"}), sort_keys=True)


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


@dataclass(frozen=True)
class VerifyKey:
    """A registered sender key: Ed25519 public key bytes or an HMAC secret, whose it is, and the
    tenant it signs for."""

    key_id: str
    alg: Alg
    material: bytes
    principal: str
    tenant: str = DEFAULT_TENANT

    @property
    def secret_held(self) -> bool:
        """Whether this key can check anything: an HMAC key read without its seal holds no secret
        (an empty one would be a key anyone could sign with)."""
        return bool(self.material)

    def verify(self, event: SignedEvent) -> bool:
        if not self.secret_held:
            return False
        if event.webhook is not None:  # an HMAC over the timestamp and the raw body (schemas/webhook.py)
            if self.alg != "hmac-sha256":
                return False
            t, body, sent = event.webhook
            expected = webhook.tag(self.material, t, body)
            return any(hmac.compare_digest(tag, expected) for tag in sent)
        try:
            tag = base64.b64decode(event.signature, validate=True)
        except ValueError:
            return False
        try:
            data = signing_bytes(event)
        except ValueError:  # no canonical form at all: nobody can have signed it
            return False
        if self.alg == "hmac-sha256":
            return hmac.compare_digest(tag, hmac.new(self.material, data, hashlib.sha256).digest())
        try:
            _public_key(self.material).verify(tag, data)
        except (InvalidSignature, ValueError):
            return False
        return True


@functools.lru_cache(maxsize=4096)
def _public_key(material: bytes) -> Ed25519PublicKey:
    """The loaded key for these bytes: loading costs about as much as the check itself, and the
    same few signers sign nearly every event. ValueError (not cached) for bytes that are no key."""
    return Ed25519PublicKey.from_public_bytes(material)
