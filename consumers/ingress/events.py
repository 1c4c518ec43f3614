"""The HTTP door's writes: an upstream system posts an event, the door checks it as the inbound role
does (workflow/door.py: the same parse and judge, not a copy) and publishes it to wakeful.events
with acks=all before it answers 202 with the event id.

    POST /v1/events     Content-Type: application/json, the signed event (wakeful's canonical form)
    POST /v1/webhooks   Content-Type: application/json, Wakeful-Key, Wakeful-Signature: t=..,v1=..
                        (schemas/webhook.py: an HMAC over the timestamp and the raw body)

A refused post is answered with a precise 4xx and a body {"error": why, "code": one word} and writes
nothing: no message, no receipt, no dead letter (its reason is in the door's log and its metrics).
The door is not trusted for being a door: inbound judges what it publishes again, and the gate after
it, against the signer registry as it is then.

What decides the answer is pure (`status`); the class around it reads the signer's record, takes the
rate limits and publishes.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import redis
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from wakeful.authority.signer_seal import SignerSeal
from wakeful.authority.store import AuthorityStore
from wakeful.consumers.ingress.limits import Buckets, Limit, address, retry_after
from wakeful.consumers.ingress.publish import EventPublisher
from wakeful.consumers.ingress.signers import Cached
from wakeful.core import tracing
from wakeful.core.errors import DecodeError
from wakeful.core.log import Log
from wakeful.schemas import events, webhook
from wakeful.schemas.events import SignedEvent
from wakeful.schemas.signatures import VerifyKey
from wakeful.workflow.door import Accepted, Refused, judge, parse

JSON = "application/json"
# A refusal's code -> its HTTP status. Not a signature that verifies now: 401; a key that may not
# send that kind: 403; a verified event that names no task, or a kind nobody knows: 422.
STATUS = {
    "malformed": 400,
    "too_large": 413,
    "unknown_key": 401,
    "bad_signature": 401,
    "stale": 401,
    "unknown_kind": 422,
    "not_allowed": 403,
    "unaddressed": 422,
    "replay": 422,
}
PUBLISH_TIMEOUT_S = 10.0
RECENT = 200_000  # published identities one door remembers
Signer = tuple[VerifyKey, frozenset[str]]  # a key's record: its key, the kinds it may send


def status(refused: Refused) -> int:
    return STATUS.get(refused.code, 400)


def refusal(code: str, reason: str, status_code: int | None = None) -> JSONResponse:
    return JSONResponse({"error": reason, "code": code}, status_code=status_code or STATUS.get(code, 400))


def receipt_path(event: SignedEvent) -> str:
    """Where its sender reads the event's receipt: in its task's slot when it names one."""
    named = f"?task_id={event.task_id}" if event.task_id else ""
    return f"/v1/receipts/{event.event_id}{named}"


def media_type(value: str | None) -> str:
    return (value or "").split(";", 1)[0].strip().lower()


class EventDoor:
    def __init__(
        self,
        client: redis.Redis,
        publisher: EventPublisher,
        log: Log,
        *,
        kinds: frozenset[str],
        max_age: float,
        per_key: Limit,
        per_client: Limit,
        per_tenant: Limit | None = None,
        seal: SignerSeal | None = None,
    ) -> None:
        self.authority = AuthorityStore(client, seal)  # the seal opens HMAC secrets (D91)
        self.publisher = publisher
        self.log = log
        self.kinds = kinds  # every kind the loaded app knows, as inbound's
        self.max_age = timedelta(seconds=max_age)
        self.keys = Buckets(per_key, time.monotonic)
        self.clients = Buckets(per_client, time.monotonic)
        # Every key of a tenant together, when the door is given a tenant's rate: one tenant's many
        # keys cannot take the door for themselves (docs/limits.md).
        self.tenants = Buckets(per_tenant, time.monotonic) if per_tenant is not None else None
        # The identities (key id, event id) published within the max age: a delivery sent again
        # (a retry, or one captured on the way) is answered as taken, not published again, and
        # spends nothing of its key's allowance; past the max age it is refused as stale. Inbound's
        # own dedupe stands behind one this door has forgotten or never saw.
        self.recent: Cached[tuple[str, str], bool] = Cached(time.monotonic, ttl=max_age, size=RECENT)
        self.signers: Cached[str, Signer | None] = Cached(time.monotonic)

    async def event(self, request: Request) -> JSONResponse:
        return await self._take(request, self._as_event)

    async def webhook(self, request: Request) -> JSONResponse:
        return await self._take(request, self._as_webhook)

    async def _take(
        self, request: Request, wire: Callable[[Request, bytes], bytes | JSONResponse]
    ) -> JSONResponse:
        # A SERVER span, the child of the request's traceparent: what it publishes carries it on.
        with tracing.server(f"wakeful.ingress POST {request.url.path}", request.headers):
            answer = await self._answer(request, wire)
            tracing.stamp(status=answer.status_code)
            return answer

    async def _answer(
        self, request: Request, wire: Callable[[Request, bytes], bytes | JSONResponse]
    ) -> JSONResponse:
        client = address(request.client.host) if request.client else "-"
        wait = self.clients.waiting(client)
        if wait > 0:
            return self._limited(request, "too many refused requests from this address", wait)
        if media_type(request.headers.get("content-type")) != JSON:
            return self._refused(request, client, "content_type", f"send Content-Type: {JSON}", 415)
        body = await _body(request)
        if isinstance(body, JSONResponse):
            return self._counted(request, client, body)
        raw = wire(request, body)
        if isinstance(raw, JSONResponse):
            return self._counted(request, client, raw)
        parsed = parse(raw)
        if isinstance(parsed, Refused):
            return self._refused(request, client, parsed.code, parsed.reason)
        fresh, found = self.signers.get(parsed.key_id)
        if not fresh:
            try:
                found = await run_in_threadpool(self.authority.signer, parsed.key_id)
            except redis.RedisError as exc:
                why = f"the signer registry did not answer ({type(exc).__name__})"
                return self._unavailable(request, why)
            self.signers.put(parsed.key_id, found)
        verdict = self._judge(parsed, found)
        if isinstance(verdict, Refused):
            return self._refused(request, client, verdict.code, verdict.reason)
        tracing.stamp(
            event_id=parsed.event_id, key_id=parsed.key_id, kind=parsed.kind, task_id=parsed.task_id
        )
        identity = (parsed.key_id, parsed.event_id)
        if self.recent.get(identity)[0]:  # taken already: counted against its sender's address, not its key
            self.clients.take(client)
            self.log("ingress.repeat", event_id=parsed.event_id, key_id=parsed.key_id)
            return _taken(parsed, repeat=True)
        wait = self.keys.take(parsed.key_id)
        if wait > 0:
            self.clients.take(client)
            return self._limited(request, f"key {parsed.key_id} is over its rate", wait)
        tenant = found[0].tenant if found is not None else ""
        wait = self.tenants.take(tenant) if self.tenants is not None else 0.0
        if wait > 0:
            self.clients.take(client)
            return self._limited(request, f"tenant {tenant} is over its rate at this door", wait)
        failed = await self.publisher.publish(parsed.routing_key, raw, parsed.event_id, PUBLISH_TIMEOUT_S)
        if failed is not None:
            return self._unavailable(request, failed)
        self.recent.put(identity, True)
        self.log("ingress.accepted", event_id=parsed.event_id, key_id=parsed.key_id, kind=parsed.kind)
        return _taken(parsed)

    def _as_event(self, request: Request, body: bytes) -> bytes | JSONResponse:
        if body.startswith(events.WEBHOOK_PREFIX):
            return refusal("malformed", "a webhook is posted to /v1/webhooks with its signature header")
        return body

    def _as_webhook(self, request: Request, body: bytes) -> bytes | JSONResponse:
        key_id = request.headers.get(webhook.KEY_HEADER)
        if not key_id:
            return refusal("unknown_key", f"name your key in the {webhook.KEY_HEADER} header")
        signed = webhook.parse_header(request.headers.get(webhook.SIGNATURE_HEADER))
        if isinstance(signed, str):
            return refusal("bad_signature", signed)
        t, tags = signed
        try:
            raw = webhook.wrap(key_id, t, tags, body)
        except DecodeError as exc:
            return refusal("malformed", f"malformed webhook: {exc.reason}")
        except ValueError as exc:  # a key id the record refuses
            return refusal("unknown_key", f"no such key id: {str(exc)[:200]}")
        if len(raw) > events.MAX_EVENT_BYTES:
            limit = events.MAX_EVENT_BYTES
            why = f"the webhook takes {len(raw)} bytes on the wire, over the {limit}-byte limit"
            return refusal("too_large", why)
        return raw

    def _judge(self, event: SignedEvent, found: Signer | None) -> Accepted | Refused:
        """Gate 1, as inbound judges it, on the signer's record (signers.py: as Redis held
        it at most a second ago)."""
        if event.kind == events.REPLAY:
            return Refused("replays go through `wakeful dlq replay`, not the HTTP door", event, code="replay")
        key, kinds = found if found is not None else (None, frozenset[str]())
        return judge(event, key, kinds, datetime.now(UTC), self.max_age, known=self.kinds)

    def _counted(self, request: Request, client: str, answer: JSONResponse) -> JSONResponse:
        self.clients.take(client)
        self.log("ingress.refused", path=request.url.path, status=answer.status_code)
        return answer

    def _refused(
        self, request: Request, client: str, code: str, reason: str, code_status: int | None = None
    ) -> JSONResponse:
        self.clients.take(client)
        self.log("ingress.refused", path=request.url.path, code=code, reason=reason[:300])
        return refusal(code, reason, code_status)

    def _limited(self, request: Request, reason: str, wait: float) -> JSONResponse:
        self.log("ingress.limited", path=request.url.path, reason=reason)
        answer = refusal("rate_limited", f"{reason}: retry after the Retry-After header's seconds", 429)
        answer.headers["Retry-After"] = retry_after(wait)
        return answer

    def _unavailable(self, request: Request, reason: str) -> JSONResponse:
        self.log("ingress.unavailable", path=request.url.path, reason=reason[:300])
        answer = refusal("unavailable", f"{reason}: nothing was published, send it again", 503)
        answer.headers["Retry-After"] = "1"
        return answer


def _taken(event: SignedEvent, *, repeat: bool = False) -> JSONResponse:
    """202: the event is on Kafka (now, or when it was first sent: `repeat`)."""
    body = {"event_id": event.event_id, "task_id": event.task_id, "receipt": receipt_path(event)}
    return JSONResponse(body | ({"repeat": True} if repeat else {}), status_code=202)


async def _body(request: Request) -> bytes | JSONResponse:
    """The request's body, read no further than the limit: a 413 past it."""
    limit = events.MAX_EVENT_BYTES
    declared = request.headers.get("content-length")
    # ASCII digits only: str.isdigit() also passes "²", which int() refuses.
    if declared is not None and not (declared.isascii() and declared.isdigit() and int(declared) <= limit):
        return refusal("too_large", f"the body is over the {limit}-byte limit ({declared[:20]} bytes)")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                return refusal("too_large", f"the body is over the {limit}-byte limit")
            chunks.append(chunk)
    except ClientDisconnect:
        return refusal("malformed", "the client went away before the body ended")
    return b"".join(chunks)


Endpoint = Callable[[Request], Awaitable[JSONResponse]]
