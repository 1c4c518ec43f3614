"""Memory records sealed by the role that judged them, and checked at the read door (D93).

The relay is memory's write door, but it only carries records: the gate (a decision's records)
and the executor (what a tool's answer taught, quarantined) seal each one with a key derived from
the sealing keyring, and the admin's commands seal the status they set. The relay holds no
keyring, so neither its process nor its Redis login can make a record the read door shows: a
record planted in a subject's hash by any login, or changed there (its status, writer,
provenance, value), fails its seal and is left out of the window with the reason logged.

The seal is an HMAC-SHA256 over the record as stored (its JSON object, every field but the seal,
written again with sorted keys: the read door checks the object it parsed, before it decodes a
record), under `Keyring.subkey(kid, PURPOSE)`; it is stored as "<key id>:<base64>" so the keyring
rotates under it.

An active record of a high-impact fact must also carry the verifier's signed event (`event`, its
text as the door received it): its signature is checked against the signer as registered now,
and it must be the event the record's provenance names, signed by the principal that verified it,
of the record's tenant. A keyring holder alone cannot make such a record active either.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Any

import orjson

from wakeful.core.errors import DecodeError, KeyringError
from wakeful.schemas.events import SignedEvent
from wakeful.schemas.memory import MemoryRecord
from wakeful.schemas.signatures import VerifyKey
from wakeful.state.seal import Keyring

PURPOSE = b"wakeful-memory-seal/1"
UNSEALED = "no seal: written before records were sealed, or not through the write door"


def _tag(key: bytes, doc: dict[str, Any]) -> bytes:
    sealed_bytes = orjson.dumps({k: v for k, v in doc.items() if k != "seal"}, option=orjson.OPT_SORT_KEYS)
    return hmac.digest(key, sealed_bytes, hashlib.sha256)


def sealed(keyring: Keyring, record: MemoryRecord) -> MemoryRecord:
    """The record with its seal under the keyring's active key (any seal it had is replaced)."""
    kid = keyring.active
    tag = _tag(keyring.subkey(kid, PURPOSE), orjson.loads(record.encode()))
    return record.model_copy(update={"seal": f"{kid}:{base64.b64encode(tag).decode()}"})


def seal_problem(keyring: Keyring, record: MemoryRecord, doc: dict[str, Any] | None = None) -> str | None:
    """Why the record's seal does not hold (None: it does). `doc`: the record's JSON object as
    stored, when the caller parsed it already (else it is written from the record)."""
    if not record.seal:
        return UNSEALED
    if doc is None or doc.get("seal") != record.seal:
        doc = orjson.loads(record.encode())
    kid, _, b64 = record.seal.rpartition(":")
    try:
        key = keyring.subkey(kid, PURPOSE)
    except KeyringError:
        return f"sealed under key {kid[:64]!r}, which this keyring lacks"
    try:
        tag = base64.b64decode(b64, validate=True)
    except (ValueError, binascii.Error):
        return "its seal is not base64"
    if not hmac.compare_digest(tag, _tag(key, doc)):
        return "its seal does not verify: the record was changed or written outside the write door"
    return None


def event_key(record: MemoryRecord) -> str | None:
    """The signer key id the record's provenance names, when it names an event."""
    kind, _, rest = record.provenance.partition(":")
    return rest.partition(":")[0] if kind == "event" else None


def event_problem(record: MemoryRecord, signer: VerifyKey | None) -> str | None:
    """Why an active high-impact record's verifier event does not vouch for it (None: it does).
    `signer`: the registered key its provenance names (None: none registered)."""
    if record.event is None:
        return "an active high-impact record that carries no verifier's signed event"
    try:
        event = SignedEvent.decode(record.event.encode())
    except DecodeError as exc:
        return f"its verifier event does not decode: {exc.reason[:120]}"
    if record.provenance != f"event:{event.key_id}:{event.event_id}":
        return f"its event {event.key_id}:{event.event_id} is not the one its provenance names"
    if signer is None or signer.key_id != event.key_id:
        return f"its event's signer key {event.key_id} is not registered (removed or revoked)"
    if not signer.verify(event):
        return f"its event's signature by {event.key_id} does not verify"
    principal = f"principal:{signer.principal}"
    if record.verified_by != principal or record.writer != principal:
        return f"its event was signed by {principal}, not by its writer and verifier {record.verified_by}"
    if signer.tenant != record.tenant:
        return f"its event's signer signs for tenant {signer.tenant}, not {record.tenant}"
    return None
