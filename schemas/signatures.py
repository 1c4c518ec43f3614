"""Checking a signed event: the canonical bytes a signature covers, and a registered sender's key.

Every door that takes a signed event checks it with `VerifyKey`; the upstream publisher signs the
same bytes (producers/signing.py), so both sides share this module and the runtime needs nothing of
the publisher's own code to verify what it sent.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
from dataclasses import dataclass
from typing import Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

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
