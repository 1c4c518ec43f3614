"""A signed read: how an upstream system proves who asks when it reads from `wakeful ingress`.

A read is signed like an event, with the same key: a SignedEvent of kind READ whose payload names
the request (its method and its path with the query), issued now. It rides base64url-encoded in the
HEADER of the HTTP request. The door verifies it with the key the signer registered, checks that it
names this very request and that it is fresh, and answers as that principal, of that tenant. No new
secret: a key that may sign events may read what its tenant's tasks are doing, and a revoked key
(removed from the signers) reads nothing more.

A read signed for one path cannot be sent to another, and one seen in flight is good for MAX_AGE
at most, for the same request: serve the door behind TLS (docs/agents.md).

A sender with an HMAC secret may sign a read as it signs a webhook instead (schemas/webhook.py):
the Wakeful-Key and Wakeful-Signature headers, the tag over "<t>.<METHOD> <target>".
"""

from __future__ import annotations

import base64
import hmac
from datetime import UTC, datetime, timedelta

from wakeful.core.errors import DecodeError
from wakeful.producers.signing import Signer, VerifyKey, sign_event
from wakeful.schemas import webhook
from wakeful.schemas.events import FUTURE_SKEW, SignedEvent

READ = "wakeful.read"
HEADER = "X-Wakeful-Read"
MAX_AGE = timedelta(seconds=60)
MAX_HEADER = 4096  # bytes of the header the door reads at most


def sign(signer: Signer, method: str, target: str) -> str:
    """The header value that signs `method target` (the path with its query) as `signer`."""
    return encoded(sign_event(signer, READ, {"method": method.upper(), "target": target}))


def encoded(event: SignedEvent) -> str:
    """A signed read as the header carries it."""
    return base64.urlsafe_b64encode(event.encode()).decode()


def claimed(header: str | None) -> SignedEvent | str:
    """The signed read a header carries, or why it carries none."""
    if not header:
        return f"sign the request: no {HEADER} header"
    if len(header) > MAX_HEADER:
        return f"the {HEADER} header is over {MAX_HEADER} bytes"
    try:
        raw = base64.urlsafe_b64decode(header.encode())
        event = SignedEvent.decode(raw)
    except (ValueError, DecodeError) as exc:
        return f"the {HEADER} header is not a signed read: {str(exc)[:120]}"
    return event


def verified(
    event: SignedEvent, key: VerifyKey | None, method: str, target: str, now: datetime
) -> str | None:
    """Why the signed read `event` does not let its signer make this request now, or None."""
    if key is None:
        return f"unknown key id {event.key_id!r}"
    if event.kind != READ:
        return f"a read is signed as kind {READ}, not {event.kind[:64]!r}"
    if not key.verify(event):
        return f"bad signature for key id {event.key_id!r}"
    if event.payload != {"method": method.upper(), "target": target}:
        return "the signed read names another request"
    issued = event.issued_at if event.issued_at.tzinfo else event.issued_at.replace(tzinfo=UTC)
    if issued < now - MAX_AGE or issued > now + FUTURE_SKEW:
        return f"the signed read was issued {issued.isoformat()}: sign each request when it is sent"
    return None


def webhook_text(method: str, target: str) -> bytes:
    """What a webhook-style signed read's tag covers after its timestamp: the request line."""
    return f"{method.upper()} {target}".encode()


def webhook_header(secret: bytes, method: str, target: str, t: int) -> str:
    """The Wakeful-Signature header that signs `method target` at `t` with an HMAC secret."""
    return webhook.header(secret, t, webhook_text(method, target))


def verified_webhook(
    key: VerifyKey | None,
    *,
    key_id: str,
    signed: tuple[int, list[str]],
    method: str,
    target: str,
    now: datetime,
) -> str | None:
    """Why a webhook-style signed read (t, its v1 tags) does not let its key make this request now,
    or None."""
    if key is None:
        return f"unknown key id {key_id[:128]!r}"
    if key.alg != "hmac-sha256":
        return f"key id {key_id!r} is an Ed25519 key: sign the read in the {HEADER} header"
    if not key.secret_held:
        return f"bad signature for key id {key_id!r}"
    t, tags = signed
    expected = webhook.tag(key.material, t, webhook_text(method, target))
    if not any(hmac.compare_digest(sent, expected) for sent in tags):
        return f"bad signature for key id {key_id!r}"
    issued = datetime.fromtimestamp(t, UTC)
    if issued < now - MAX_AGE or issued > now + FUTURE_SKEW:
        return f"the signed read was issued {issued.isoformat()}: sign each request when it is sent"
    return None
