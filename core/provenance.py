"""Who sent a message between roles.

Each role signs what it publishes on an internal topic with its own Ed25519 key, and the role that
reads the topic verifies it against the keys of the roles that may send there (SENDERS, which
follows DESIGN §2). This is defence in depth behind the broker's ACLs: a broker misconfiguration,
or another role's stolen Kafka credential, is not enough to put a wake, a proposal request or a
proposal in front of a role.

The signature rides in two Kafka headers and covers the bytes exactly as sent, with no re-encoding:

    b"wakeful-envelope/1\\n" + topic + b"\\n" + message key + b"\\n" + value

so a signed message cannot be moved to another topic or another task's key either.

Keys: each signing role's private key is its own secret (`$WAKEFUL_SECRETS/<role>/signing.json`);
the public keys of all roles are in `$WAKEFUL_SECRETS/public/roles.json`, `key id -> "role:base64"`.
`ensure_keys` (run by `wakeful dev up` and the compose init service) makes both, once.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from wakeful.core import secrets, topics
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings

SENDERS: dict[str, frozenset[str]] = {
    topics.WAKE: frozenset({"inbound", "timer"}),
    topics.PROPOSALS_REQUEST: frozenset({"gate"}),
    topics.PROPOSALS: frozenset({"proposer"}),
    topics.LOG: frozenset({"relay"}),  # read by audit and recovery tools, not by a role
}
SIGNING_ROLES = ("inbound", "timer", "gate", "proposer", "relay")
KID_HEADER = "wakeful-kid"
SIG_HEADER = "wakeful-sig"
_DOMAIN = b"wakeful-envelope/1\n"
_SIGNING, _PUBLIC = "signing", "roles"


def signed_bytes(topic: str, key: bytes, value: bytes) -> bytes:
    return b"".join((_DOMAIN, topic.encode(), b"\n", key, b"\n", value))


@dataclass(frozen=True)
class RoleSigner:
    """A role's own key: what it publishes on an internal topic carries its signature."""

    role: str
    key_id: str
    private_key: Ed25519PrivateKey

    def headers(self, topic: str, key: bytes, value: bytes) -> list[tuple[str, str | bytes | None]]:
        signature = self.private_key.sign(signed_bytes(topic, key, value))
        return [(KID_HEADER, self.key_id.encode()), (SIG_HEADER, signature)]


@dataclass(frozen=True)
class Forged:
    """Why a message on an internal topic is not from a role that may send there."""

    reason: str


class RoleKeys:
    """The public keys of the roles, and which of them may send on each internal topic."""

    def __init__(self, keys: dict[str, tuple[str, Ed25519PublicKey]]) -> None:
        self._keys = keys  # key id -> (role, public key)

    def sender(self, topic: str, key: bytes, value: bytes, headers: Any) -> str | Forged:
        """The role that signed this message, if it may send on `topic`; else why not."""
        allowed = SENDERS.get(topic)
        if allowed is None:
            return Forged(f"{topic} carries no messages between roles")
        found: dict[str, list[bytes]] = {}
        for name, raw in headers or ():
            found.setdefault(name, []).append(raw if isinstance(raw, bytes) else b"")
        kids, sigs = found.get(KID_HEADER, []), found.get(SIG_HEADER, [])
        if not kids or not sigs:
            return Forged(f"unsigned message on {topic}: only {_names(allowed)} may send there")
        if len(kids) > 1 or len(sigs) > 1:
            return Forged(f"message on {topic} carries more than one signature header")
        kid = kids[0].decode(errors="replace")
        role, public = self._keys.get(kid, ("", None))
        if public is None:
            return Forged(f"message on {topic} is signed by unknown role key {kid[:64]!r}")
        if role not in allowed:
            return Forged(f"role {role} may not send on {topic} (only {_names(allowed)})")
        try:
            public.verify(sigs[0], signed_bytes(topic, key, value))
        except InvalidSignature:
            return Forged(f"bad signature on {topic} for role key {kid}")
        return role


def _names(roles: frozenset[str]) -> str:
    return " and ".join(sorted(roles))


def load_signer(settings: Settings, role: str) -> RoleSigner:
    """The role's own signing key (the only signing secret its process reads)."""
    doc = secrets.load(settings, role, _SIGNING)
    try:
        seed = base64.b64decode(doc["seed"], validate=True)
        return RoleSigner(role, doc["key_id"], Ed25519PrivateKey.from_private_bytes(seed))
    except (KeyError, ValueError, binascii.Error):
        raise ConfigError(
            str(secrets.path(settings, role, _SIGNING)),
            "not a role signing key: rotate it with `wakeful dev up`",
        ) from None


def load_keys(settings: Settings) -> RoleKeys:
    """Every role's public key, from the public roles file."""
    doc = secrets.load(settings, secrets.PUBLIC, _PUBLIC)
    keys: dict[str, tuple[str, Ed25519PublicKey]] = {}
    for kid, entry in doc.items():
        role, _, b64 = entry.partition(":")
        try:
            keys[kid] = (role, Ed25519PublicKey.from_public_bytes(base64.b64decode(b64, validate=True)))
        except (ValueError, binascii.Error):
            raise ConfigError(
                str(secrets.path(settings, secrets.PUBLIC, _PUBLIC)),
                f"key {kid!r} is not an Ed25519 public key: run `wakeful dev up` to rebuild the file",
            ) from None
    return RoleKeys(keys)


def ensure_keys(settings: Settings) -> list[str]:
    """Make each signing role's key once, and publish every role's public key. Returns the roles
    whose key it made."""
    made = [role for role in SIGNING_ROLES if not secrets.exists(settings, role, _SIGNING)]
    for role in SIGNING_ROLES:
        ensure_key(settings, role)
    publish_keys(settings)
    return made


def ensure_key(settings: Settings, role: str) -> RoleSigner:
    """The role's own signing key, made the first time."""
    secrets.ensure(settings, role, _SIGNING, functools.partial(_new_key, role))
    return load_signer(settings, role)


def publish_keys(settings: Settings) -> None:
    """The public file: every signing role's current key, and every key published before (so what
    a retired key signed still verifies)."""
    public: dict[str, str] = {}
    if secrets.exists(settings, secrets.PUBLIC, _PUBLIC):
        public = secrets.load(settings, secrets.PUBLIC, _PUBLIC)
    for role in SIGNING_ROLES:
        if secrets.exists(settings, role, _SIGNING):
            signer = load_signer(settings, role)
            raw = signer.private_key.public_key().public_bytes_raw()
            public[signer.key_id] = f"{role}:{base64.b64encode(raw).decode()}"
    secrets.replace(settings, secrets.PUBLIC, _PUBLIC, public)


def _new_key(role: str) -> dict[str, str]:
    private = Ed25519PrivateKey.generate()
    digest = hashlib.sha256(private.public_key().public_bytes_raw()).hexdigest()[:12]
    return {"key_id": f"{role}-{digest}", "seed": base64.b64encode(private.private_bytes_raw()).decode()}
