"""The relay's key for the task index (D93): each summary it applies carries a MAC the read door
checks, so that a summary put into Redis by any other means (the relay's Redis login sending HSET
by hand, which Redis 7.0 cannot refuse it: D31) is never served.

    b"wakeful-index/1\\n" + tenant + b"\\n" + the summary's JSON, every field but "mac", sorted keys

The MAC rides in the summary as "mac": "<key id>:<base64>". Keys: the relay's own in
`$WAKEFUL_SECRETS/relay/index-signing.json` (`{"key_id", "key"}`), which is not its Redis password;
a copy of every key made, retired ones kept, in `$WAKEFUL_SECRETS/<reader>/index-verifying.json`
(`key id -> base64`) for each reader that checks summaries (the ingress, the admin's ops page and
recover). `ensure` (run by `wakeful dev up` and the compose init service, through
provenance.ensure_keys) makes the key once and gives the readers their copies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass, field
from typing import Any

import orjson

from wakeful.core import secrets
from wakeful.core.errors import ConfigError
from wakeful.core.settings import Settings

OWNER = "relay"
READERS = ("ingress", "admin")
FIELD = "mac"
_SIGNING, _VERIFYING = "index-signing", "index-verifying"
_DOMAIN = b"wakeful-index/1\n"
_KEY_BYTES = 32


def _tag(key: bytes, tenant: str, summary: dict[str, Any]) -> bytes:
    body = orjson.dumps({k: v for k, v in summary.items() if k != FIELD}, option=orjson.OPT_SORT_KEYS)
    return hmac.digest(key, b"".join((_DOMAIN, tenant.encode(), b"\n", body)), hashlib.sha256)


@dataclass(frozen=True)
class IndexKeys:
    """Index keys by id; `active` (the relay's own, or None for a reader) signs."""

    keys: dict[str, bytes] = field(repr=False)
    active: str | None = None

    def sign(self, tenant: str, summary: dict[str, Any]) -> str:
        if self.active is None:
            raise ConfigError(_SIGNING, "a reader's copy of the index keys signs nothing")
        tag = _tag(self.keys[self.active], tenant, summary)
        return f"{self.active}:{base64.b64encode(tag).decode()}"

    def problem(self, tenant: str, summary: dict[str, Any]) -> str | None:
        """Why the summary as stored is not one the relay signed for `tenant` (None: it is)."""
        said = summary.get(FIELD)
        if not isinstance(said, str):
            return "unsigned: not applied by the relay's index function with its key"
        kid, _, b64 = said.rpartition(":")
        key = self.keys.get(kid)
        if key is None:
            return f"signed by index key {kid[:64]!r}, which this reader does not hold"
        try:
            tag = base64.b64decode(b64, validate=True)
        except (ValueError, binascii.Error):
            return "its mac is not base64"
        if not hmac.compare_digest(tag, _tag(key, tenant, summary)):
            return "its mac does not verify: written or changed outside the relay's index function"
        return None


def load_signer(settings: Settings) -> IndexKeys:
    """The relay's own key (read only by the relay's process, and by recover on the operator's host)."""
    doc = secrets.load(settings, OWNER, _SIGNING)
    try:
        key = base64.b64decode(doc["key"], validate=True)
        if len(key) != _KEY_BYTES:
            raise ValueError(key)
    except (KeyError, ValueError, binascii.Error):
        raise ConfigError(
            str(secrets.path(settings, OWNER, _SIGNING)),
            "not an index key: delete it and run `wakeful dev up` to make a new one",
        ) from None
    return IndexKeys({doc["key_id"]: key}, doc["key_id"])


def has_signer(settings: Settings) -> bool:
    return secrets.exists(settings, OWNER, _SIGNING)


def load_keys(settings: Settings, reader: str) -> IndexKeys:
    """A reader's copies of every index key, to check summaries with."""
    doc = secrets.load(settings, reader, _VERIFYING)
    try:
        found = {kid: base64.b64decode(b64, validate=True) for kid, b64 in doc.items()}
    except (ValueError, binascii.Error):
        raise ConfigError(
            str(secrets.path(settings, reader, _VERIFYING)),
            "not a file of index keys: run `wakeful dev up` to rebuild it",
        ) from None
    return IndexKeys(found)


def ensure(settings: Settings) -> bool:
    """Make the relay's index key the first time and give each reader a copy. True if it made one."""
    made = not secrets.exists(settings, OWNER, _SIGNING)
    secrets.ensure(settings, OWNER, _SIGNING, _new_key)
    signer = load_signer(settings)
    assert signer.active is not None
    b64 = base64.b64encode(signer.keys[signer.active]).decode()
    for reader in READERS:
        known = (
            secrets.load(settings, reader, _VERIFYING) if secrets.exists(settings, reader, _VERIFYING) else {}
        )
        if known.get(signer.active) != b64:
            secrets.replace(settings, reader, _VERIFYING, known | {signer.active: b64})
    return made


def _new_key() -> dict[str, str]:
    return {
        "key_id": f"index-{os.urandom(6).hex()}",
        "key": base64.b64encode(os.urandom(_KEY_BYTES)).decode(),
    }
