"""`wakeful ingress --port N`: the HTTP door for upstream systems that do not speak Kafka.

    GET  /v1/health                      200 when Redis answers, else 503
    POST /v1/events                      a signed event: 202 {event_id} once Kafka acknowledged it
    POST /v1/webhooks                    a webhook (Wakeful-Key, Wakeful-Signature): the same
    GET  /v1/receipts/{event_id}         the sender's own receipt for its event (a signed read)
    GET  /v1/tasks/{task_id}, /v1/tasks  the sender's tenant's tasks, from the task index
    GET  /v1/tasks/{task_id}/views/{view}, /v1/search  a task's view; the tenant's tasks that match

Nothing else: /metrics is 404 here, since whoever reaches the door (behind its proxy, anyone) would
read it. Its metrics (its answers by route and status, timed) are served on a listener of their
own, `--metrics-port` (WAKEFUL_METRICS_PORT) on `--metrics-host` (127.0.0.1 by default), as a
role's are (core/metrics.py, docs/metrics.md, D90).

Writes are consumers/ingress/events.py, reads consumers/ingress/reads.py. The door's Redis user
reads the signers, the receipts and the index and writes nothing (state/acl.py); its Kafka user
writes wakeful.events and nothing else (core/kafka_rights.py). Serve it behind a TLS proxy
(docs/ingress.md).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from wakeful.authority import signer_seal
from wakeful.consumers.ingress.events import EventDoor
from wakeful.consumers.ingress.limits import Limit
from wakeful.consumers.ingress.publish import EventPublisher
from wakeful.consumers.ingress.reads import ReadDoor
from wakeful.core import index_signing, metrics, tracing
from wakeful.core.index_signing import IndexKeys
from wakeful.core.log import Log
from wakeful.core.settings import Settings
from wakeful.sdk.app import load_app
from wakeful.state import acl

# A key's default allowance: well above one upstream system's steady flow, well below what lets one
# key starve the rest. Refused requests from one address: enough for a misconfigured sender to see
# its errors, not enough to make the door verify forgeries all day.
PER_KEY = Limit(rate=200.0, burst=400)
PER_CLIENT_REFUSED = Limit(rate=20.0, burst=100)


def build(
    client: redis.Redis,
    log: Log,
    writes: EventDoor,
    publisher: EventPublisher | None = None,
    index_keys: IndexKeys | None = None,
) -> Starlette:
    reads = ReadDoor(client, log, writes.authority.seal, index_keys)

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        if publisher is not None:
            publisher.close()

    app = Starlette(
        routes=[
            Route("/v1/health", reads.health),
            Route("/v1/events", writes.event, methods=["POST"]),
            Route("/v1/webhooks", writes.webhook, methods=["POST"]),
            Route("/v1/receipts/{event_id}", reads.signed(reads.receipt)),
            Route("/v1/tasks/{task_id}", reads.signed(reads.task)),
            Route("/v1/tasks/{task_id}/views/{view}", reads.signed(reads.view)),
            Route("/v1/search", reads.signed(reads.search)),
            Route("/v1/tasks", reads.signed(reads.tasks)),
        ],
        lifespan=lifespan,
    )
    app.add_middleware(Counted)
    return app


class Counted:
    """Counts and times every answer by its route's template (never the path as sent: a path of
    the sender's choosing would be a label of the sender's choosing) and status."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = metrics.clock(), [500]

        async def sent(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            metrics.ingress_answered(_route(scope), status[0], started)


def _route(scope: Scope) -> str:
    app: Any = scope.get("app")
    for route in getattr(app, "routes", ()):
        if route.matches(scope)[0] == Match.FULL:
            return str(route.path)
    return "other"


def main(
    settings: Settings,
    host: str,
    port: int,
    per_key: Limit = PER_KEY,
    metrics_at: tuple[str, int] | None = None,
    *,
    per_tenant: Limit | None = None,
) -> None:
    """Serve the door until interrupted; with metrics_at (host, port), its metrics there, apart."""
    if metrics_at is not None:  # bound first: a taken port stops the start at once, named
        metrics.serve(metrics_at[1], metrics_at[0], "ingress")
    log = Log(role="ingress")
    client = acl.connect(settings, "ingress", timeout=5.0)
    seal = signer_seal.load(settings, "ingress")  # the HMAC secrets' seal: webhooks verify with them
    index_keys = index_signing.load_keys(settings, "ingress")  # serves only summaries the relay signed
    kinds = load_app(settings.app).kinds
    publisher = EventPublisher(settings, log)
    writes = EventDoor(
        client,
        publisher,
        log,
        kinds=kinds,
        max_age=settings.event_max_age,
        per_key=per_key,
        per_client=PER_CLIENT_REFUSED,
        per_tenant=per_tenant,
        seal=seal,
    )
    tenant_rate = per_tenant.rate if per_tenant is not None else None
    log(
        "ingress.start", host=host, port=port, rate=per_key.rate, burst=per_key.burst, tenant_rate=tenant_rate
    )
    app = build(client, log, writes, publisher, index_keys)
    with tracing.started("ingress"):  # on only when an OTLP endpoint is set (docs/tracing.md)
        uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
