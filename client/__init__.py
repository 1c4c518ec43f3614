"""wakeful's client for upstream systems: sign and send events with a key of your own, wait for
their receipts, and read the tasks your tenant may see.

    from wakeful.client import Upstream

    with Upstream.local("billing") as up:            # the key and login `wakeful dev up` made here
        event = up.send("task.create", {"amount": 4200, "currency": "EUR"}, task_id="inv-7")
        receipt = up.receipt(event)                    # {"status": "accepted", "stage": ..., ...}
        task = up.task("inv-7")                        # its stage, versions and waits, or None
        for t in up.tasks(waiting="approval"):         # the tenant's tasks waiting for an approval
            ...

Sending publishes the signed event to wakeful.events (the publisher SDK, wakeful.producers, with a
Kafka login that may write that topic only); a client made without a publisher posts it to `wakeful
ingress` instead (POST /v1/events), which answers once Kafka has it. Reading asks `wakeful ingress`
over HTTP, each request signed with the same key (wakeful.producers.reads): the door answers this
key's own receipts and its tenant's tasks, as the task index has them (stage, versions, waits:
never the task's own fields). The CLI sends every upstream event through this class.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any
from urllib.parse import urlencode

import httpx

from wakeful.core import kafka_auth
from wakeful.core.errors import WakefulError
from wakeful.core.kafka_rights import UPSTREAM
from wakeful.core.settings import Settings
from wakeful.producers import reads
from wakeful.producers.keys import keystore, local_signer
from wakeful.producers.publish import ConfluentPublisher, Publisher
from wakeful.producers.signing import Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.events import SignedEvent
from wakeful.schemas.search import Query, to_params

__all__ = ["NotAnswered", "Query", "ReadRefused", "Upstream", "keystore", "local_signer"]
JSON_TYPE = "application/json"
JSON = {"Content-Type": JSON_TYPE}


class ReadRefused(WakefulError):
    """The door refused a read or a post: a signature it cannot verify (an unknown or revoked key, a
    clock far off), or a request it cannot answer (a bad id or filter). The message says which."""


class NotAnswered(WakefulError):
    """No receipt came within the time given: the event may still be on its way (are the workers
    and the ingress running?)."""


class Upstream:
    """One principal's client: `signer` signs what it sends and every read; `publisher` sends
    (None: events are posted to the door); `url` is where `wakeful ingress` listens."""

    def __init__(
        self, signer: Signer, *, publisher: Publisher | None = None, url: str, timeout: float = 10.0
    ) -> None:
        self.signer = signer
        self.publisher = publisher
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=timeout)
        self._own_publisher = False

    @classmethod
    def local(cls, principal: str, settings: Settings | None = None) -> Upstream:
        """A client for `principal` with the key `wakeful authority signers add` made in this
        machine's keystore ($WAKEFUL_HOME/signers), the upstream Kafka login, and WAKEFUL_INGRESS_URL."""
        settings = settings or Settings.from_env()
        signer = local_signer(settings, principal)
        security = kafka_auth.client_config(settings, UPSTREAM)
        publisher = ConfluentPublisher(settings.kafka_bootstrap, security=security)
        client = cls(signer, publisher=publisher, url=settings.ingress_url)
        client._own_publisher = True
        return client

    # ---- sending ------------------------------------------------------------------------------

    def send(
        self,
        kind: str,
        payload: dict[str, Any] | None = None,
        *,
        task_id: str | None = None,
        correlation_id: str | None = None,
    ) -> SignedEvent:
        """Sign one event and publish it, or post it to the door when this client has no publisher;
        returns once the broker has it (acks=all). `task_id` is the task as your tenant names it.
        ReadRefused (with the door's reason) if the door refuses it."""
        event = sign_event(self.signer, kind, payload or {}, task_id=task_id, correlation_id=correlation_id)
        if self.publisher is not None:
            self.publisher.publish(event)
        else:
            self._post(event)
        return event

    def _post(self, event: SignedEvent) -> None:
        try:
            answer = self.http.post("/v1/events", content=event.encode(), headers=JSON)
        except httpx.TransportError as exc:
            raise WakefulError(
                f"cannot reach wakeful ingress at {self.url}: {exc}; is `wakeful ingress` running?"
            ) from exc
        if answer.status_code != 202:
            body = answer.json() if answer.headers.get("content-type", "").startswith(JSON_TYPE) else {}
            raise ReadRefused(f"{answer.status_code}: {body.get('error', answer.text[:200])}")

    # ---- reading ------------------------------------------------------------------------------

    def cancel(self, task_id: str, reason: str) -> SignedEvent:
        """Ask that a task of your tenant be cancelled (task.cancel): its workflow's undos run, and it
        ends `cancelled`; a finished task's cancel is refused, with the reason on its receipt."""
        return self.send(events.CANCEL, {"reason": reason}, task_id=task_id)

    def receipt(
        self, event: SignedEvent | str, *, task_id: str | None = None, timeout: float = 30.0
    ) -> dict[str, Any]:
        """The outcome of this key's event (the event, or its id and the task it names), polled
        until it is there or `timeout` seconds have passed (NotAnswered)."""
        event_id, named = (
            (event.event_id, event.task_id) if isinstance(event, SignedEvent) else (event, task_id)
        )
        query = {"task_id": named} if named else {}
        deadline = time.monotonic() + timeout
        pause = 0.02
        while True:
            found = self._get(f"/v1/receipts/{event_id}", query)
            if found is not None:
                return found
            if time.monotonic() >= deadline:
                raise NotAnswered(f"no receipt for event {event_id} after {timeout:.0f}s")
            time.sleep(pause)
            pause = min(pause * 2, 0.5)

    def task(self, task_id: str) -> dict[str, Any] | None:
        """Your tenant's task `task_id` as the index has it, or None (no such task of your tenant)."""
        return self._get(f"/v1/tasks/{task_id}", {})

    def tasks(
        self, *, stage: str | None = None, waiting: str | None = None, page: int = 100
    ) -> Iterator[dict[str, Any]]:
        """Your tenant's tasks at `stage` (latest change first) or waiting for `waiting` (an event
        kind, or "approval"; soonest deadline first), page by page."""
        query: dict[str, Any] = {k: v for k, v in (("stage", stage), ("waiting", waiting)) if v is not None}
        after: int | None = 0
        while after is not None:
            found = self._get("/v1/tasks", {**query, "limit": page, "after": after})
            assert found is not None  # a list is never a 404
            yield from found["tasks"]
            after = found["next"]

    def query(self, task_id: str, view: str) -> dict[str, Any] | None:
        """Your tenant's task's view `view` (one its workflow declares), as the task's last change
        computed it: {"value": {...}, "state_version", "updated_at", ...}; None if there is no such
        task of your tenant's. ReadRefused names the views it has when it has no `view`."""
        try:
            return self._get(f"/v1/tasks/{task_id}/views/{view}", {}, missing_ok=False)
        except ReadRefused as exc:
            if str(exc).startswith(f"404: no task {task_id}"):
                return None
            raise

    def search(self, query: Query | None = None, *, page: int = 100) -> Iterator[dict[str, Any]]:
        """Your tenant's tasks that match `query` (wakeful.state.search.Query: workflow, stage,
        attributes, creation and change times), newest created first, page by page."""
        params = to_params(query or Query())
        cursor: str | None = None
        while True:
            found = self._get(
                "/v1/search", {**params, "limit": page, **({"cursor": cursor} if cursor else {})}
            )
            assert found is not None  # a search is never a 404
            yield from found["tasks"]
            cursor = found["next"]
            if cursor is None:
                return

    def _get(self, path: str, query: dict[str, Any], *, missing_ok: bool = True) -> dict[str, Any] | None:
        target = path + (f"?{urlencode(query)}" if query else "")
        signed = reads.sign(self.signer, "GET", target)
        try:
            answer = self.http.get(target, headers={reads.HEADER: signed})
        except httpx.TransportError as exc:
            raise WakefulError(
                f"cannot reach wakeful ingress at {self.url}: {exc}; is `wakeful ingress` running?"
            ) from exc
        if answer.status_code == 404 and missing_ok:
            return None
        body = answer.json() if answer.headers.get("content-type", "").startswith("application/json") else {}
        if answer.status_code != 200:
            raise ReadRefused(f"{answer.status_code}: {body.get('error', answer.text[:200])}")
        result: dict[str, Any] = body
        return result

    def close(self) -> None:
        self.http.close()
        if self._own_publisher and self.publisher is not None:
            self.publisher.close()

    def __enter__(self) -> Upstream:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
