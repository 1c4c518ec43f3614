"""A webhook: an event a system that cannot sign wakeful's canonical form sends over HTTP.

The sender signs what it sends, not a canonical form of it, in the style of Stripe's and GitHub's
webhooks: an HMAC-SHA256 over the timestamp, a dot and the raw body, with the secret wakeful made for
its key (`wakeful signers add ... --alg hmac-sha256`):

    POST /v1/webhooks
    Wakeful-Key: <key id>
    Wakeful-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>
    Content-Type: application/json

    {"kind": "task.create", "task_id": "order-1", "payload": {...}, "event_id": "optional"}

The ingress cannot re-sign it, and no role trusts the ingress: the raw body travels on
wakeful.events inside a Webhook record, byte for byte, and every role that verifies the event
(inbound, the gate, a replay) checks the same HMAC over the same bytes. `SignedEvent.decode` opens
that record into the event its body names; such an event re-encodes to the record, never to a form
its sender did not sign.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar

import orjson
from pydantic import Field, StringConstraints, ValidationError

from wakeful.core.errors import DecodeError
from wakeful.schemas.base import Record, first_errors
from wakeful.schemas.events import CorrelationId, EventId, KeyId, OutsideTaskId, SignedEvent

KEY_HEADER = "Wakeful-Key"
SIGNATURE_HEADER = "Wakeful-Signature"
SIGNATURE_PREFIX = "webhook:"  # a webhook event's `signature` field: "webhook:v1=<hex>[,v1=<hex>]"
MAX_SIGNATURE_HEADER = 512
MAX_TAGS = 4  # v1 tags one webhook may carry: an old and a new secret while one is rotated
_HEX64 = re.compile(r"[0-9a-f]{64}")
_BODY_FIELDS = frozenset({"kind", "event_id", "task_id", "correlation_id", "payload"})


Tag = Annotated[str, StringConstraints(pattern=_HEX64.pattern)]  # a hex HMAC-SHA256


class Webhook(Record):
    """A webhook as it rides on wakeful.events: who signed, when, its tag and its body, verbatim."""

    KIND: ClassVar[str] = "webhook"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    webhook: KeyId  # the key id, first after the version (events.WEBHOOK_PREFIX)
    t: int = Field(ge=0, le=10**11 - 1)  # unix seconds, a date Python can hold
    v1: list[Tag] = Field(min_length=1, max_length=MAX_TAGS)
    body: str


class _Body(Record):
    """What a webhook's body names: the event, but for its signer, time and signature."""

    KIND: ClassVar[str] = "webhook body"
    SCHEMA: ClassVar[int] = 1
    schema_version: int = SCHEMA

    kind: str = Field(max_length=64)
    event_id: EventId | None = None
    task_id: OutsideTaskId | None = None
    correlation_id: CorrelationId | None = None
    payload: dict[str, Any] = Field(default_factory=dict)


def signed_text(t: int, body: bytes) -> bytes:
    """The bytes a webhook's tag covers: the timestamp, a dot, and the raw body."""
    return str(t).encode() + b"." + body


def tag(secret: bytes, t: int, body: bytes) -> str:
    """The hex HMAC-SHA256 a webhook of `body` sent at `t` carries."""
    return hmac.new(secret, signed_text(t, body), hashlib.sha256).hexdigest()


def header(secret: bytes, t: int, body: bytes) -> str:
    """The Wakeful-Signature header value for `body` sent at `t`."""
    return f"t={t},v1={tag(secret, t, body)}"


def parse_header(value: str | None) -> tuple[int, list[str]] | str:
    """(t, the v1 tags) a Wakeful-Signature header carries, or why it carries none. Several v1
    tags may be sent (while a secret is being rotated); any one that verifies will do."""
    if not value:
        return f"sign the webhook: no {SIGNATURE_HEADER} header"
    if len(value) > MAX_SIGNATURE_HEADER:
        return f"the {SIGNATURE_HEADER} header is over {MAX_SIGNATURE_HEADER} bytes"
    t: int | None = None
    tags: list[str] = []
    parts = [part.strip().partition("=") for part in value.split(",")]
    if sum(name == "t" for name, _, _ in parts) > 1:  # which was signed? Two readers could pick two
        return f"the {SIGNATURE_HEADER} header carries more than one t="
    for name, _, item in parts:
        if name == "t" and item.isascii() and item.isdigit() and len(item) <= 11:  # a date Python can hold
            t = int(item)
        elif name == "v1" and _HEX64.fullmatch(item):
            tags.append(item)
    if t is None or not tags:
        return f"the {SIGNATURE_HEADER} header is not t=<unix seconds>,v1=<64 hex digits>"
    if len(tags) > MAX_TAGS:
        return f"the {SIGNATURE_HEADER} header carries over {MAX_TAGS} v1 tags"
    return t, tags


def derived_id(key_id: str, t: int, body: bytes) -> str:
    """The event id of a webhook whose body names none: the same delivery sent twice is one event."""
    digest = hashlib.sha256(key_id.encode() + b"\n" + signed_text(t, body)).hexdigest()
    return f"wh-{digest[:40]}"


def wrap(key_id: str, t: int, v1: list[str], body: bytes) -> bytes:
    """The record a webhook travels in; DecodeError if the body is not UTF-8 text."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError("webhook", body[:200], f"the body is not UTF-8: {exc}") from exc
    return Webhook(webhook=key_id, t=t, v1=v1, body=text).encode()


def opened(raw: bytes) -> SignedEvent:
    """The event a Webhook record carries, ready to verify; DecodeError with the reason if none."""
    hook = Webhook.decode(raw)
    body = hook.body.encode()
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("webhook", raw, f"the body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DecodeError("webhook", raw, "the body is not a JSON object")
    extra = sorted(set(data) - _BODY_FIELDS)
    if extra:
        raise DecodeError("webhook", raw, f"the body has fields no event has: {', '.join(extra)[:200]}")
    try:
        named = _Body.model_validate({"schema_version": 1, **data})
    except ValidationError as exc:
        raise DecodeError("webhook", raw, first_errors(exc)) from exc
    try:
        event = SignedEvent(
            event_id=named.event_id or derived_id(hook.webhook, hook.t, body),
            kind=named.kind,
            task_id=named.task_id,
            correlation_id=named.correlation_id,
            key_id=hook.webhook,
            issued_at=datetime.fromtimestamp(hook.t, UTC),
            payload=named.payload,
            signature=SIGNATURE_PREFIX + ",".join(f"v1={tag}" for tag in hook.v1),
        )
    except (ValidationError, OverflowError, ValueError) as exc:
        raise DecodeError("webhook", raw, str(exc)[:300]) from exc
    event._webhook = (hook.t, body, tuple(hook.v1), raw)
    return event
