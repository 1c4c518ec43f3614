"""Two owners sign every release (D121), the rules: what a sign-off is, what bytes it signs, and
whether the sign-offs a release holds let it deploy.

A release is the app as it is about to run, named by its digest (workflow/release_digest.py). An app
that declares owner roles (`App.owners`: role -> the principals who hold it) deploys only a digest
that holds a sign-off for each role, each from a different principal who holds that role, each
signed by an Ed25519 key the signer registry holds for that principal, registered for
`release.signoff` (events.SIGNOFF: a key that signs approvals signs no release), not revoked. A
sign-off names the app, the digest, the role and the principal, and is bound to all four by its
signature: it signs nothing else, and no other release.

Pure: the store that keeps releases is state/releases.py; the gate and the executor ask
`problems` at start (consumers/kafka/releases.py), `wakeful release sign` makes one.
"""

from __future__ import annotations

import base64
from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

import orjson
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from wakeful.authority.snapshot import Snapshot
from wakeful.schemas import events

DOMAIN = b"wakeful.release.signoff.v1\n"  # no event's signed bytes begin so: a sign-off is no event


@dataclass(frozen=True)
class SignOff:
    """One owner's signature over one release of one app, in one role."""

    app: str
    digest: str
    role: str
    principal: str
    key_id: str
    signed_at: str  # ISO 8601, UTC
    signature: str  # base64 of the Ed25519 signature over signed_bytes()
    note: str = ""  # why, in the owner's words: kept, shown, not signed

    def signed_bytes(self) -> bytes:
        return signed_bytes(self.app, self.digest, self.role, self.principal, self.signed_at)

    def encode(self) -> bytes:
        return orjson.dumps(asdict(self))


def signed_bytes(app: str, digest: str, role: str, principal: str, signed_at: str) -> bytes:
    return DOMAIN + orjson.dumps([app, digest, role, principal, signed_at])


def decode(raw: bytes) -> SignOff | str:
    """A stored sign-off, or why it is none (a key in Redis is not trusted because it is there)."""
    try:
        doc = orjson.loads(raw)
        if not isinstance(doc, dict):
            return "a sign-off is a JSON object"
        return SignOff(**{k: str(v) for k, v in doc.items()})
    except (orjson.JSONDecodeError, TypeError) as exc:
        return f"unreadable sign-off: {exc}"


def sign(
    signer: Any, app: str, digest: str, *, role: str, principal: str, now: datetime, note: str = ""
) -> SignOff:
    """`principal`'s sign-off of `digest` in `role`, with `signer` (an Ed25519 signer of theirs)."""
    at = now.isoformat()
    tag = signer.sign(signed_bytes(app, digest, role, principal, at))
    return SignOff(app, digest, role, principal, signer.key_id, at, base64.b64encode(tag).decode(), note)


def invalid(signoff: SignOff, owners: Mapping[str, Collection[str]], auth: Snapshot) -> str | None:
    """Why `signoff` counts for nothing, by the signer registry and revocations `auth` read with
    its signers (None: it counts for its role)."""
    who = f"{signoff.principal}'s sign-off as {signoff.role}"
    if signoff.principal not in owners.get(signoff.role, ()):
        holders = ", ".join(sorted(owners.get(signoff.role, ()))) or "nobody"
        return f"{who}: {signoff.principal} holds no role {signoff.role!r} in this app (it is {holders}'s)"
    key = auth.signers.get(signoff.key_id)
    signs_releases = events.SIGNOFF in auth.signer_kinds.get(signoff.key_id, ())
    if key is None or not signs_releases or key.principal != signoff.principal or key.alg != "ed25519":
        return (
            f"{who}: key {signoff.key_id} is no Ed25519 key of {signoff.principal} registered for "
            f"{events.SIGNOFF} (`wakeful authority signers add {signoff.principal} --kinds {events.SIGNOFF}`)"
        )
    if any(r.key == signoff.key_id for r in auth.revoked.values()):
        return f"{who}: key {signoff.key_id} is revoked"
    try:
        Ed25519PublicKey.from_public_bytes(key.material).verify(
            base64.b64decode(signoff.signature, validate=True), signoff.signed_bytes()
        )
    except (InvalidSignature, ValueError):
        return f"{who}: the signature does not verify with key {signoff.key_id}"
    return None


def problems(
    app: str,
    digest: str,
    owners: Mapping[str, Collection[str]],
    held: Collection[SignOff],
    auth: Snapshot,
) -> list[str]:
    """Why the release `digest` of `app` may not deploy ([]: it may): each owner role it lacks a
    valid sign-off for, from a principal who signed for no other role. Every problem at once."""
    found: list[str] = []
    valid: dict[str, set[str]] = {}  # role -> the principals whose sign-off counts
    for signoff in held:
        if signoff.app != app or signoff.digest != digest:
            continue  # another release's: it says nothing of this one
        if why := invalid(signoff, owners, auth):
            found.append(why)
        else:
            valid.setdefault(signoff.role, set()).add(signoff.principal)
    matched = _matched({role: valid.get(role, set()) for role in owners})
    for role in sorted(owners):
        if role in matched:
            continue
        if valid.get(role):
            who = ", ".join(sorted(valid[role]))
            found.append(f"role {role!r} is signed only by {who}, who signed for another role too")
        else:
            found.append(f"role {role!r} has not signed release {digest[:12]}")
    return found if len(matched) < len(owners) else []


def _matched(candidates: Mapping[str, set[str]]) -> dict[str, str]:
    """Each role a principal of its own, as many roles as can be (augmenting paths: roles are few)."""
    holder: dict[str, str] = {}  # principal -> the role it signs for

    def place(role: str, seen: set[str]) -> bool:
        for principal in sorted(candidates[role] - seen):
            seen.add(principal)
            if principal not in holder or place(holder[principal], seen):
                holder[principal] = role
                return True
        return False

    for role in sorted(candidates):
        place(role, set())
    return {role: principal for principal, role in holder.items()}
