"""The HTTP door's reads (consumers/ingress/main.py serves them).

Every read is signed (producers/reads.py): the door finds the key
it names among the registered signers, checks the signature, that it names this very request and
that it is fresh, and then answers as that key's principal, in that key's tenant, from what Redis
holds for readers: the receipts of that key's own events, and its tenant's task index
(state/index.py, kept by the relay from the log records; nothing here unseals a task).

    GET /v1/health                                    200 when Redis answers, else 503
    GET /v1/receipts/{event_id}?task_id=T             the key's receipt for its event, or 404
    GET /v1/tasks/{task_id}                           the tenant's task, as the index has it, or 404
    GET /v1/tasks?stage=S|waiting=K[&limit=N&after=P] the tenant's tasks at S, or waiting for K
    GET /v1/tasks/{task_id}/views/{view}              a view its workflow declares, as last indexed
    GET /v1/search?workflow=W&stage=S&attr.A=V&created_after=T&...&limit=N&cursor=C
                                                      the tenant's tasks that match, newest first

A task of another tenant is answered as one that does not exist. The door's Redis user may read
only the signers, the receipts and the index (state/acl.py): it writes nothing. A key with an HMAC
secret may sign a read webhook-style instead (Wakeful-Key and Wakeful-Signature headers).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import redis
from starlette.requests import Request
from starlette.responses import JSONResponse

from wakeful.authority.signer_seal import SignerSeal
from wakeful.authority.store import AuthorityStore
from wakeful.core import ids
from wakeful.core.index_signing import IndexKeys
from wakeful.core.log import Log
from wakeful.producers import reads
from wakeful.schemas import webhook
from wakeful.schemas.search import from_params
from wakeful.schemas.signatures import VerifyKey
from wakeful.state import index, keys
from wakeful.state import search as task_search
from wakeful.state.index import Index

Handler = Callable[[Request, VerifyKey], JSONResponse]


def error(status: int, reason: str) -> JSONResponse:
    return JSONResponse({"error": reason}, status_code=status)


class ReadDoor:
    def __init__(
        self,
        client: redis.Redis,
        log: Log,
        seal: SignerSeal | None = None,
        index_keys: IndexKeys | None = None,
    ) -> None:
        self.client = client
        self.index = Index(client, index_keys)  # with the keys: only summaries the relay signed (D93)
        self.authority = AuthorityStore(client, seal)  # the seal opens HMAC secrets (D91)
        self.log = log

    def signed(self, handler: Handler) -> Callable[[Request], JSONResponse]:
        """`handler`, answered only for a request whose signed read verifies."""

        def endpoint(request: Request) -> JSONResponse:
            # As it was sent (percent-encoded): what the asker signed, before any decoding.
            raw_path = request.scope.get("raw_path") or request.url.path.encode()
            query = request.url.query
            target = raw_path.decode("latin-1") + (f"?{query}" if query else "")
            headers = request.headers
            if reads.HEADER not in headers and webhook.SIGNATURE_HEADER in headers:
                key_id = headers.get(webhook.KEY_HEADER, "")
                signed = webhook.parse_header(headers.get(webhook.SIGNATURE_HEADER))
                if isinstance(signed, str):
                    return self._refused(request, signed)
                check: Callable[[VerifyKey | None], str | None] = functools.partial(
                    reads.verified_webhook,
                    key_id=key_id,
                    signed=signed,
                    method=request.method,
                    target=target,
                    now=datetime.now(UTC),
                )
            else:
                event = reads.claimed(headers.get(reads.HEADER))
                if isinstance(event, str):
                    return self._refused(request, event)
                key_id = event.key_id
                check = functools.partial(
                    reads.verified, event, method=request.method, target=target, now=datetime.now(UTC)
                )
            if not ids.KEY_ID_RE.fullmatch(key_id):
                return self._refused(request, f"no such key id: send {webhook.KEY_HEADER} with your key id")
            try:
                found = self.authority.signer(key_id)
            except redis.RedisError as exc:
                return error(503, f"the signer registry did not answer ({type(exc).__name__}): try again")
            key = found[0] if found is not None else None
            why = check(key)
            if why is not None or key is None:
                return self._refused(request, why or "unknown key")
            try:
                return handler(request, key)
            except ValueError as exc:  # an id or a filter that cannot name a key
                return error(400, str(exc))
            except redis.RedisError as exc:  # the store, not the asker: try again later
                self.log("ingress.redis_error", path=request.url.path[:200], error=str(exc)[:300])
                return error(503, f"the task store did not answer ({type(exc).__name__}): try again")

        return endpoint

    def _refused(self, request: Request, reason: str) -> JSONResponse:
        self.log("ingress.refused", path=request.url.path[:200], reason=reason[:300])
        return error(401, reason)

    def health(self, request: Request) -> JSONResponse:
        try:
            self.client.ping()
        except redis.RedisError as exc:
            return error(503, f"redis: {type(exc).__name__}")
        return JSONResponse({"status": "ok"})

    def receipt(self, request: Request, key: VerifyKey) -> JSONResponse:
        event_id = ids.checked(ids.EVENT_ID_RE, request.path_params["event_id"], "event id")
        named = request.query_params.get("task_id")
        names = [keys.receipt(event_id, ids.task_in(key.tenant, named), key_id=key.key_id)] if named else []
        names.append(keys.receipt(event_id, key_id=key.key_id))
        for name in names:  # not MGET: two slots on a cluster
            raw = self.client.get(name)
            if isinstance(raw, bytes):
                return JSONResponse({"event_id": event_id, **orjson.loads(raw)})
        return error(404, f"no receipt yet for event {event_id} of key {key.key_id}")

    def task(self, request: Request, key: VerifyKey) -> JSONResponse:
        named = request.path_params["task_id"]
        found = self.index.task(key.tenant, ids.task_in(key.tenant, named))
        if found is None:
            return error(404, f"no task {named}")
        return JSONResponse(found)

    def tasks(self, request: Request, key: VerifyKey) -> JSONResponse:
        q = request.query_params
        stage, waiting = q.get("stage"), q.get("waiting")
        if stage is None and waiting is None:
            return error(400, "list by ?stage=S or ?waiting=K (an event kind, or approval)")
        try:
            limit, after = int(q.get("limit", index.PAGE)), int(q.get("after", 0))
        except ValueError:
            return error(400, "limit and after are whole numbers")
        if not 1 <= limit <= index.PAGE or after < 0:
            return error(400, f"limit is 1 to {index.PAGE}, after 0 or more")
        found, more = self.index.listed(key.tenant, stage=stage, waiting=waiting, limit=limit, after=after)
        body: dict[str, Any] = {"tasks": found, "next": more}
        return JSONResponse(body)

    def view(self, request: Request, key: VerifyKey) -> JSONResponse:
        named, name = request.path_params["task_id"], request.path_params["view"]
        found = task_search.view(self.index, key.tenant, ids.task_in(key.tenant, named), name)
        if found is None:
            return error(404, f"no task {named}")
        if found.value is None:
            has = ", ".join(found.known) or "none"
            return error(404, f"task {named} has no view {name[:40]!r}; its views: {has}")
        return JSONResponse(found.as_dict())

    def search(self, request: Request, key: VerifyKey) -> JSONResponse:
        params = dict(request.query_params)
        query = from_params(params)  # a ValueError is a 400 saying what is wrong
        try:
            limit = int(params.get("limit", index.PAGE))
        except ValueError:
            return error(400, "limit is a whole number")
        page = task_search.search(self.index, key.tenant, query, limit=limit, cursor=params.get("cursor"))
        return JSONResponse({"tasks": page.tasks, "next": page.next})
