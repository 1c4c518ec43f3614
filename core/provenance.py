"""Who sent a message between roles.

Each role that sends to another role authenticates what it publishes on an internal topic with its
own channel key, and the role that reads the topic checks it against the keys of the roles that may
send there (SENDERS, which follows DESIGN §2). This is defence in depth behind the broker's ACLs: a
broker misconfiguration, or another role's stolen Kafka credential, is not enough to put a wake, a
proposal request or a proposal in front of a role.

Every internal topic has exactly one reader (READERS), so a channel key is an HMAC-SHA256 key held
by two parties only: its sender and that reader (docs/decisions.md D34). The tag rides in two Kafka
headers and covers the bytes exactly as sent, with no re-encoding:

    b"wakeful-channel/1\\n" + topic + b"\\n" + message key + b"\\n" + value

so a tagged message cannot be moved to another topic or another task's key either.

Keys: a sender's key is in its own `$WAKEFUL_SECRETS/<role>/signing.json`; a reader's copy of the
keys of its topic's senders is in its own `$WAKEFUL_SECRETS/<reader>/verifying.json`,
`key id -> "role:base64"`, retired keys included. `ensure_keys` (run by `wakeful dev up` and the
compose init service) makes both, once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from typing import Any

from wakeful.core import index_signing, kafka_rights, log_signing, secrets, topics
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings

SENDERS: dict[str, frozenset[str]] = {
    topics.WAKE: frozenset({"inbound", "timer"}),
    topics.PROPOSALS_REQUEST: frozenset({"gate"}),
    topics.PROPOSALS: frozenset({"proposer"}),
    topics.LOG: frozenset({"relay"}),
}
# The one role that reads each internal topic, from the broker's rights table; the log has no
# reader role: whoever reads it (docs/pipeline.md) does so as the admin.
READERS: dict[str, str] = {
    topic: next((r for r, rights in kafka_rights.RIGHTS.items() if topic in rights.reads), kafka_rights.ADMIN)
    for topic in SENDERS
}
SIGNING_ROLES = ("inbound", "timer", "gate", "proposer", "relay")
KID_HEADER = "wakeful-kid"
SIG_HEADER = "wakeful-sig"
_DOMAIN = b"wakeful-channel/1\n"
_SIGNING, _VERIFYING = "signing", "verifying"
_KEY_BYTES = 32


def signed_bytes(topic: str, key: bytes, value: bytes) -> bytes:
    return b"".join((_DOMAIN, topic.encode(), b"\n", key, b"\n", value))


def _tag(secret: bytes, topic: str, key: bytes, value: bytes) -> bytes:
    return hmac.digest(secret, signed_bytes(topic, key, value), hashlib.sha256)


@dataclass(frozen=True)
class RoleSigner:
    """A role's own channel key: what it publishes on its output topic carries its tag."""

    role: str
    key_id: str
    secret: bytes = field(repr=False)

    def headers(self, topic: str, key: bytes, value: bytes) -> list[tuple[str, str | bytes | None]]:
        return [(KID_HEADER, self.key_id.encode()), (SIG_HEADER, _tag(self.secret, topic, key, value))]


@dataclass(frozen=True)
class Forged:
    """Why a message on an internal topic is not from a role that may send there."""

    reason: str


class RoleKeys:
    """A reader's copies of the channel keys of the roles that may send on its topics."""

    def __init__(self, keys: dict[str, tuple[str, bytes]]) -> None:
        self._keys = keys  # key id -> (role, channel key)

    def sender(self, topic: str, key: bytes, value: bytes, headers: Any) -> str | Forged:
        """The role that tagged this message, if it may send on `topic`; else why not."""
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
        role, secret = self._keys.get(kid, ("", b""))
        if not secret:
            return Forged(f"message on {topic} is signed by key {kid[:64]!r}, not a key of {_names(allowed)}")
        if role not in allowed:
            return Forged(f"role {role} may not send on {topic} (only {_names(allowed)})")
        if not hmac.compare_digest(sigs[0], _tag(secret, topic, key, value)):
            return Forged(f"bad signature on {topic} for role key {kid}")
        return role


def _names(roles: frozenset[str]) -> str:
    return " and ".join(sorted(roles))


def load_signer(settings: Settings, role: str) -> RoleSigner:
    """The role's own channel key (the only signing secret its process reads)."""
    doc = secrets.load(settings, role, _SIGNING)
    try:
        secret = base64.b64decode(doc["key"], validate=True)
        if len(secret) != _KEY_BYTES:
            raise ValueError(secret)
        return RoleSigner(role, doc["key_id"], secret)
    except (KeyError, ValueError, binascii.Error):
        raise ConfigError(
            str(secrets.path(settings, role, _SIGNING)),
            "not a role channel key: delete it and run `wakeful dev up` to make a new one",
        ) from None


def load_keys(settings: Settings, reader: str) -> RoleKeys:
    """The channel keys `reader` checks its input against, from its own verifying file."""
    doc = secrets.load(settings, reader, _VERIFYING)
    keys: dict[str, tuple[str, bytes]] = {}
    for kid, entry in doc.items():
        role, _, b64 = entry.partition(":")
        try:
            keys[kid] = (role, base64.b64decode(b64, validate=True))
        except (ValueError, binascii.Error):
            keys[kid] = ("", b"")
        if len(keys[kid][1]) != _KEY_BYTES:
            raise ConfigError(
                str(secrets.path(settings, reader, _VERIFYING)),
                f"key {kid!r} is not a channel key: run `wakeful dev up` to rebuild the file",
            )
    return RoleKeys(keys)


def ensure_keys(settings: Settings) -> list[str]:
    """Make each sending role's channel key once, and give each reader the keys of its topic's
    senders. Returns the roles whose key it made."""
    made = [role for role in SIGNING_ROLES if not _has_key(settings, role)]
    for role in SIGNING_ROLES:
        ensure_key(settings, role)
    publish_keys(settings)
    _drop_public_keys(settings)
    log_signing.ensure_log_key(settings)  # the relay's public-key signature on wakeful.log (D72)
    index_signing.ensure(settings)  # the relay's MAC on the task index's summaries (D93)
    return made


def _drop_public_keys(settings: Settings) -> None:
    """Older state dirs kept every role's Ed25519 public key in a `public` folder; nothing reads it now."""
    old = secrets.path(settings, "public", "roles")
    old.unlink(missing_ok=True)
    if old.parent.is_dir() and not any(old.parent.iterdir()):
        old.parent.rmdir()


def ensure_key(settings: Settings, role: str) -> RoleSigner:
    """The role's own channel key, made the first time (and in place of a signing key of the
    Ed25519 kind older state dirs hold)."""
    secrets.ensure(settings, role, _SIGNING, lambda: _new_key(role))
    if not _has_key(settings, role):
        secrets.replace(settings, role, _SIGNING, _new_key(role))
    return load_signer(settings, role)


def _has_key(settings: Settings, role: str) -> bool:
    return secrets.exists(settings, role, _SIGNING) and "key" in secrets.load(settings, role, _SIGNING)


def publish_keys(settings: Settings) -> None:
    """Each reader's verifying file: the current key of every role that sends on its topic, and
    every key given to it before (so what a retired key tagged in flight still verifies)."""
    for topic, reader in READERS.items():
        known: dict[str, str] = {}
        if secrets.exists(settings, reader, _VERIFYING):
            known = secrets.load(settings, reader, _VERIFYING)
        for role in sorted(SENDERS[topic]):
            if secrets.exists(settings, role, _SIGNING):
                signer = load_signer(settings, role)
                known[signer.key_id] = f"{role}:{base64.b64encode(signer.secret).decode()}"
        secrets.replace(settings, reader, _VERIFYING, known)


def _new_key(role: str) -> dict[str, str]:
    return {
        "key_id": f"{role}-{os.urandom(6).hex()}",
        "key": base64.b64encode(os.urandom(_KEY_BYTES)).decode(),
    }
