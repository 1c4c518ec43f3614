"""HMAC signer secrets sealed at rest: the signer registry in Redis never holds one whole.

An HMAC signer's secret is what its sender signs with, so whoever reads it can sign as that sender.
Four Redis logins read the registry (inbound, gate and executor by their authority pattern, the
door by its one HGET), so the registry holds it sealed (docs/decisions.md D91):

    record["sealed"] = "v1:" + seal kid + ":" + base64(nonce:12 | AES-256-GCM(secret))
    associated data  = b"wakeful-signer/1\\n" + key id + b"\\n" + alg

bound to its key id, so a sealed secret moved onto another signer's record opens nothing. The
seal key is a key of its own, never the checkpoint keyring (the executor holds that one), kept in
`$WAKEFUL_SECRETS/<role>/hmac-seal.json` (`{"active": kid, kid: base64 key, ...}`, retired kids
kept) of the roles that verify an HMAC, VERIFIERS, and of the admin, who seals what it registers.
An Ed25519 record holds a public key: nothing there is secret, and nothing is sealed.

A record from before (its secret in `material`) is still read; authority/signer_reseal.py seals it
in place (`wakeful dev up`, `wakeful authority signers seal`). Pure: no Redis client here.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from wakeful.core import secrets
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings

# The roles that check an HMAC with a signer's secret: the HTTP door (webhooks, signed reads),
# inbound (every event on wakeful.events) and the gate (the event inside a wake, again: D10).
VERIFIERS = ("ingress", "inbound", "gate")
KEEPER = "admin"  # registers signers, so seals; holds the one copy the verifiers' are made from
NAME = "hmac-seal"
HMAC = "hmac-sha256"
_VERSION = "v1"
_DOMAIN = b"wakeful-signer/1\n"
_NONCE = 12


class SignerSeal:
    """Seal key ids to 32-byte keys; `active` seals, every listed one opens (rotation)."""

    def __init__(self, keys_by_id: Mapping[str, bytes], active: str) -> None:
        if active not in keys_by_id:
            raise ConfigError(NAME, f"its active seal key {active!r} is not among its keys")
        bad = [kid for kid, key in keys_by_id.items() if len(key) != 32 or not kid or ":" in kid]
        if bad:
            raise ConfigError(NAME, f"seal keys {bad} must be 32 bytes under an id without ':'")
        self._aead = {kid: AESGCM(key) for kid, key in keys_by_id.items()}
        self._keys = dict(keys_by_id)
        self.active = active

    def seal(self, key_id: str, alg: str, secret: bytes) -> str:
        nonce = os.urandom(_NONCE)
        box = self._aead[self.active].encrypt(nonce, secret, _bound(key_id, alg))
        return f"{_VERSION}:{self.active}:{base64.b64encode(nonce + box).decode()}"

    def open(self, key_id: str, alg: str, sealed: str) -> bytes | None:
        """The secret, or None if it is not one this seal sealed for `key_id` (unknown seal key,
        edited, or moved from another record)."""
        version, _, rest = sealed.partition(":")
        kid, _, b64 = rest.partition(":")
        aead = self._aead.get(kid)
        if version != _VERSION or aead is None:
            return None
        try:
            raw = base64.b64decode(b64, validate=True)
            return aead.decrypt(raw[:_NONCE], raw[_NONCE:], _bound(key_id, alg))
        except (InvalidTag, ValueError, binascii.Error):
            return None

    def sealed_by_active(self, sealed: str) -> bool:
        return sealed.startswith(f"{_VERSION}:{self.active}:")

    def to_doc(self) -> dict[str, str]:
        return {"active": self.active, **{k: base64.b64encode(v).decode() for k, v in self._keys.items()}}

    @classmethod
    def from_doc(cls, doc: Mapping[str, str]) -> SignerSeal:
        try:
            found = {k: base64.b64decode(v, validate=True) for k, v in doc.items() if k != "active"}
        except (ValueError, binascii.Error) as exc:
            raise ConfigError(NAME, f"a seal key is not base64 ({exc}): restore the file") from None
        return cls(found, doc.get("active", ""))

    @classmethod
    def generate(cls) -> SignerSeal:
        kid = f"s-{os.urandom(4).hex()}"
        return cls({kid: AESGCM.generate_key(bit_length=256)}, kid)


def _bound(key_id: str, alg: str) -> bytes:
    return _DOMAIN + key_id.encode() + b"\n" + alg.encode()


def load(settings: Settings, role: str) -> SignerSeal:
    """`role`'s seal: a verifier that lacks it stops at start-up, saying how to make it."""
    return SignerSeal.from_doc(secrets.load(settings, role, NAME))


def held(settings: Settings, role: str) -> SignerSeal | None:
    """`role`'s seal if its folder holds one (the admin's, for commands that may not need it)."""
    return load(settings, role) if secrets.exists(settings, role, NAME) else None


def ensure(settings: Settings) -> str:
    """The admin's seal, made once, and each verifier's copy of it (every key it ever held, so a
    record sealed before a rotation still opens). Returns the active seal key id."""
    seal = SignerSeal.from_doc(secrets.ensure(settings, KEEPER, NAME, lambda: SignerSeal.generate().to_doc()))
    for role in VERIFIERS:
        mine = dict(secrets.load(settings, role, NAME)) if secrets.exists(settings, role, NAME) else {}
        if mine != {**mine, **seal.to_doc()}:
            secrets.replace(settings, role, NAME, {**mine, **seal.to_doc()})
    return seal.active


def sealed_record(doc: Mapping[str, object], key_id: str, seal: SignerSeal) -> dict[str, object]:
    """A record as the registry keeps it: an HMAC secret sealed, never whole."""
    if doc.get("alg") != HMAC or "material" not in doc:
        return dict(doc)
    secret = base64.b64decode(str(doc["material"]))
    out = {k: v for k, v in doc.items() if k != "material"}
    out["sealed"] = seal.seal(key_id, HMAC, secret)
    return out
