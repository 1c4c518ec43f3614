"""The task index: each tenant's tasks by stage and by what they wait for, kept from the records on
their way to wakeful.log, so that a reader lists tasks without unsealing one.

The relay applies the latest record of each task it publishes (`Index.apply`, after the broker
acknowledged it and before the outbox is trimmed: a crash between the two applies it again, which
changes nothing). Each tenant's index lives under one hash tag, so one function call moves a task
between stages at once, on a Redis Cluster too, and never moves it back to an older state_version.

Its keys (state/keys.py's table): wk:index:{N}:tasks, a hash of tenant N's task ids to their
summaries; wk:index:{N}:stage:{S}, N's tasks at stage S by last change (ms); wk:index:{N}:wait:{K},
N's tasks waiting for K by deadline (ms).

A summary holds what the log record says, never the task's own fields: its id as its tenant names
it, workflow, stage, task version, state_version, when it last changed, and each wait (what for,
the deadline, the correlation id an answer names). Records are not trusted for being in Redis: one
whose parts cannot name a key is skipped and counted, and a summary is read back only if it parses.

Each summary carries the relay's MAC ("mac", core/index_signing.py, D93): an Index built with the
index keys serves only summaries whose MAC verifies for their tenant, so what the relay's Redis login
(or any other) puts there by hand is never served. `sign_unsigned` signs, once, the summaries a
release before wrote, never over a newer one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
import redis

from wakeful.core import ids, index_signing
from wakeful.core.index_signing import IndexKeys
from wakeful.state import functions, keys
from wakeful.state.index_lua import APPLY, SIGN, UNFORGE

PAGE = 100  # the most tasks one read returns

FUNCTIONS = (APPLY, SIGN, UNFORGE)


def tenant_of(record: dict[str, Any]) -> str:
    """The tenant a log record names; a record of schema 1 did not say: its task id's namespace."""
    tenant = record.get("tenant")
    if isinstance(tenant, str) and tenant:
        return tenant
    head, dot, _ = str(record.get("task_id", "")).rpartition(".")
    return head if dot else ids.DEFAULT_TENANT


def summary(record: dict[str, Any]) -> dict[str, Any]:
    """What the index keeps of a log record (a decoded OutboxRecord)."""
    tenant, task_id = tenant_of(record), str(record["task_id"])
    return {
        "task_id": ids.named_by(tenant, task_id),
        "workflow": record.get("workflow", ""),
        "stage": record["stage"],
        "task_version": record["task_version"],
        "state_version": record["state_version"],
        "updated_at": record["at"],
        "waits": [
            {"wait_for": w["wait_for"], "deadline": w["deadline"], "correlation_id": w["correlation_id"]}
            for w in record.get("waits", ())
        ],
        "created_at": record.get("created_at"),  # None: a task made before records said (D107)
        # what its workflow declares readable (D107), only when it declares any
        **{k: record[k] for k in ("views", "attributes") if record.get(k)},
    }


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def command(raw: bytes, signer: IndexKeys | None = None) -> tuple[Any, ...]:
    """The FCALL that applies one log record (its JSON) to its tenant's index, its summary signed
    by `signer` (the relay's index key). ValueError (or KeyError, TypeError) for a record whose
    parts cannot name a key or are not what a record holds."""
    record = orjson.loads(raw)
    task_id = ids.checked(ids.TASK_ID_RE, str(record["task_id"]), "task id")
    tenant, kept = tenant_of(record), summary(record)
    # The id as the tenant names it holds no namespace of another's: a record does not file one
    # tenant's task under another (a bare id may be any tenant's, made before the namespaces, D52).
    if not ids.OUTSIDE_TASK_ID_RE.fullmatch(kept["task_id"]):
        raise ValueError(f"record files task {task_id} under tenant {tenant}")
    waits, attributes = kept["waits"], kept.get("attributes", {})
    if not isinstance(attributes, dict) or not all(isinstance(v, str) for v in attributes.values()):
        raise TypeError("attributes are not a mapping of names to text")
    names = [
        keys.index_tasks(tenant),
        keys.index_stage(tenant, kept["stage"]),
        keys.index_created(tenant),
        keys.index_by(tenant, "workflow", str(kept["workflow"])),
        *(keys.index_by(tenant, f"attr:{name}", value) for name, value in attributes.items()),
        *(keys.index_wait(tenant, w["wait_for"]) for w in waits),
    ]
    version = record["state_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise TypeError(f"state_version {version!r} is not a whole number")
    if signer is not None:
        kept[index_signing.FIELD] = signer.sign(tenant, kept)
    created = _ms(kept["created_at"]) if kept["created_at"] else ""
    args: list[functions.Arg] = [task_id, version, orjson.dumps(kept), _ms(kept["updated_at"]), created]
    args += [len(attributes), *(_ms(w["deadline"]) for w in waits)]
    return functions.command(APPLY, names, args)


@dataclass(frozen=True)
class Applied:
    applied: int  # tasks whose summary moved forward
    skipped: list[str]  # why a record could not be applied (its task stays as the index had it)


class Index:
    def __init__(self, client: redis.Redis, keys: IndexKeys | None = None) -> None:
        """`keys`: the relay's index key (it signs what it applies), or a reader's copies (it
        serves only summaries that verify); None: neither (the timer's sweep, which only wakes)."""
        self.client = client
        self.keys = keys

    def apply(self, latest: Sequence[bytes]) -> Applied:
        """Apply each task's latest record (one per task), in one round trip."""
        skipped: list[str] = []
        signer = self.keys if self.keys is not None and self.keys.active else None
        sent: list[tuple[Any, ...]] = []
        pipe = self.client.pipeline(transaction=False)
        for raw in latest:
            try:
                sent.append(command(raw, signer))
                pipe.execute_command(*sent[-1])  # type: ignore[no-untyped-call]
            except (ValueError, KeyError, TypeError, orjson.JSONDecodeError) as exc:
                skipped.append(f"{type(exc).__name__}: {str(exc)[:200]}")
        replies = pipe.execute(raise_on_error=False) if len(pipe) else []
        for reply in replies:
            if isinstance(reply, Exception):
                functions.reply(APPLY, reply)  # the library missing is raised; any other is counted
                skipped.append(f"index function failed: {str(reply)[:200]}")
        refused = [call for call, reply in zip(sent, replies, strict=True) if reply == 0]
        # Only while every summary in Redis should carry a MAC: a recover without the key clears the
        # mark, and what it wrote unsigned is no forgery (the next sweep signs it).
        migrated = bool(refused) and signer is not None and bool(self.client.exists(keys.INDEX_SIGNED))
        mended = self._unforged(refused) if migrated else 0
        return Applied(sum(1 for r in replies if r == 1) + mended, skipped)

    def _unforged(self, calls: Sequence[tuple[Any, ...]]) -> int:
        """Apply again, once each, the calls refused by a stored summary the relay's key did not
        sign (written by hand with a version that would keep the task's real one out for good):
        one read of the stored summaries, then UNFORGE and APPLY for each forged one. Returns how
        many were applied."""
        assert self.keys is not None
        where = [(call[3], call[3 + call[2]]) for call in calls]  # (tasks hash, task id)
        pipe = self.client.pipeline(transaction=False)
        for name, task_id in where:
            pipe.hget(name, task_id)
        again = self.client.pipeline(transaction=False)
        for call, (name, task_id), raw in zip(calls, where, pipe.execute(), strict=True):
            doc = parsed(raw)
            tenant = str(name)[str(name).index("{") + 1 : str(name).index("}")]
            if doc is None or self.keys.problem(tenant, doc) is None:
                continue  # a summary the relay signed: a replay, refused as it should be
            again.execute_command(*functions.command(UNFORGE, [name], [task_id, raw]))  # type: ignore[no-untyped-call]
            again.execute_command(*call)  # type: ignore[no-untyped-call]
        replies = again.execute(raise_on_error=False) if len(again) else []
        return sum(1 for r in replies[1::2] if r == 1)

    def task(self, tenant: str, task_id: str) -> dict[str, Any] | None:
        """The summary of tenant's task `task_id` (the runtime's id), or None."""
        raw = self.client.hget(keys.index_tasks(tenant), task_id)
        return self.vouched(tenant, parsed(raw))

    def listed(
        self,
        tenant: str,
        *,
        stage: str | None = None,
        waiting: str | None = None,
        limit: int = PAGE,
        after: int = 0,
    ) -> tuple[list[dict[str, Any]], int | None]:
        """Tenant's tasks at `stage` (latest change first) or waiting for `waiting` (soonest
        deadline first; with `stage` too, those of them at that stage), `limit` of them from
        position `after`; and the position of the next page, or None."""
        if waiting is not None:
            name, newest_first = keys.index_wait(tenant, waiting), False
        elif stage is not None:
            name, newest_first = keys.index_stage(tenant, stage), True
        else:
            raise ValueError("name a stage or a wait to list by")
        limit = max(1, min(limit, PAGE))
        found: list[bytes] = self.client.zrange(name, after, after + limit - 1, desc=newest_first)  # type: ignore[assignment]
        rows = self.client.hmget(keys.index_tasks(tenant), found) if found else []
        out = []
        for raw in rows:
            doc = self.vouched(tenant, parsed(raw))
            if doc is None or (stage is not None and doc.get("stage") != stage):
                continue  # moved on since (the set is behind its summary for a moment), or stage filtered
            if waiting is not None and not any(w.get("wait_for") == waiting for w in doc.get("waits", ())):
                continue
            out.append(doc)
        return out, (after + limit if len(found) == limit else None)

    def vouched(self, tenant: str, doc: dict[str, Any] | None) -> dict[str, Any] | None:
        """The summary, if the relay signed it for `tenant` (or no keys were given), without its MAC."""
        if doc is None or self.keys is None:
            return doc
        if self.keys.problem(tenant, doc) is not None:
            return None
        return {k: v for k, v in doc.items() if k != index_signing.FIELD}

    def sign_unsigned(self) -> int:
        """Sign, once per Redis (keys.INDEX_SIGNED), every summary a release before wrote without a
        MAC, each through SIGN so that one applied meanwhile is never overwritten. Returns how many."""
        if self.keys is None or not self.keys.active:
            return 0
        if self.client.exists(keys.INDEX_SIGNED):
            return 0
        signed = 0
        for name in self.client.scan_iter(match=keys.PATTERN_INDEX_TASKS, count=1000):
            text = name.decode() if isinstance(name, bytes) else str(name)
            tenant = text[text.index("{") + 1 : text.index("}")]
            held: dict[bytes, bytes] = self.client.hgetall(text)  # type: ignore[assignment]
            pipe = self.client.pipeline(transaction=False)
            for task_id, raw in held.items():
                doc = parsed(raw)
                if doc is None or index_signing.FIELD in doc:
                    continue
                doc[index_signing.FIELD] = self.keys.sign(tenant, doc)
                pipe.execute_command(*functions.command(SIGN, [text], [task_id, raw, orjson.dumps(doc)]))  # type: ignore[no-untyped-call]
            signed += sum(1 for r in (pipe.execute() if len(pipe) else []) if r == 1)
        self.client.setnx(keys.INDEX_SIGNED, "1")
        return signed


def parsed(raw: Any) -> dict[str, Any] | None:
    """The JSON object Redis holds in `raw`, or None (absent, not JSON, not an object)."""
    if not isinstance(raw, bytes):
        return None
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None
