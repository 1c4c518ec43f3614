"""The authority keyspace as one sealed copy, for wakeful.authority, and back (D70).

Authority (signers, approvers, limits, policies, tool catalogs and switches, freezes, revocations)
is written by the admin only, outside any task, so no task's log record carries it. `copy()` reads
every `wk:authority:*` key, whatever its type, exactly; the admin seals the copy with the keyring
(AES-GCM bound to the name "authority" and the copy's time, state/seal.py), since it holds upstream
HMAC secrets, and publishes it keyed "authority" on a compacted topic: the newest copy is what a
lost Redis gets back. `put_back()` merges a copy into Redis: what Redis lacks is written (a key, a
hash's field, a set's member, a stream's later entries), what it has is left as it is.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson
import redis

from wakeful.authority.kept import moved
from wakeful.core.errors import DecodeError
from wakeful.state import keys
from wakeful.state.seal import Sealer

SEALED_AS = "@authority"  # the name a copy is sealed under: no task id holds an `@`
SCHEMA = 1
_TYPES = ("string", "hash", "set", "zset", "list", "stream")


def _b(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _u(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def copy(client: redis.Redis) -> dict[str, Any]:
    """Every authority key, by name: its type and contents (bytes as base64), in a stable order."""
    # Not the token roles keep their Snapshot by (kept.py): one put back could match what a role
    # kept from before the loss. A restore sets a fresh one.
    skip = keys.AUTH_VERSION.encode()
    names = sorted(n for n in client.scan_iter(match=keys.PATTERN_AUTHORITY, count=10_000) if n != skip)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.type(name)
    kinds = [k.decode() if isinstance(k, bytes) else str(k) for k in pipe.execute()]
    pipe = client.pipeline(transaction=False)
    for name, kind in zip(names, kinds, strict=True):
        _read(pipe, name, kind)
    found: dict[str, Any] = {}
    for name, kind, value in zip(names, kinds, pipe.execute(), strict=True):
        if kind not in _TYPES or value is None:
            continue  # gone since the scan, or a type no authority key has
        found[name.decode()] = {"type": kind, "value": _encoded(kind, value)}
    return found


def _read(pipe: Any, name: bytes, kind: str) -> None:
    if kind == "string":
        pipe.get(name)
    elif kind == "hash":
        pipe.hgetall(name)
    elif kind == "set":
        pipe.smembers(name)
    elif kind == "zset":
        pipe.zrange(name, 0, -1, withscores=True)
    elif kind == "list":
        pipe.lrange(name, 0, -1)
    elif kind == "stream":
        pipe.xrange(name)
    else:
        pipe.exists(name)  # a placeholder reply: the key is passed over


def _encoded(kind: str, value: Any) -> Any:
    if kind == "string":
        return _b(value)
    if kind == "hash":
        return sorted([_b(k), _b(v)] for k, v in value.items())
    if kind == "set":
        return sorted(_b(m) for m in value)
    if kind == "zset":
        return [[_b(m), score] for m, score in value]
    if kind == "list":
        return [_b(item) for item in value]
    return [[eid.decode(), sorted([_b(k), _b(v)] for k, v in fields.items())] for eid, fields in value]


def digest(found: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(found, option=orjson.OPT_SORT_KEYS)).hexdigest()


def seal(sealer: Sealer, found: dict[str, Any], at_ms: int) -> bytes:
    plain = orjson.dumps({"schema_version": SCHEMA, "at_ms": at_ms, "digest": digest(found), "keys": found})
    return sealer.seal(SEALED_AS, at_ms, SCHEMA, plain)


def unseal(sealer: Sealer, blob: bytes) -> tuple[int, dict[str, Any]]:
    """(the copy's time in ms, its keys); raises TamperedState (the seal), DecodeError (the rest)."""
    head, plain = sealer.unseal(SEALED_AS, blob)
    try:
        doc = orjson.loads(plain)
        found = doc["keys"]
        if doc["schema_version"] != SCHEMA or not isinstance(found, dict) or digest(found) != doc["digest"]:
            raise ValueError("not a copy of this schema, or its digest disagrees")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise DecodeError("authority_copy", plain[:200], str(exc)) from exc
    return head.state_version, found


def put_back(client: redis.Redis, found: dict[str, Any]) -> tuple[list[str], list[str]]:
    """Merge the copy into Redis: each key, field, member or entry Redis lacks is written, what it
    holds is left (a signer added, a tool switched or a catalog published since the loss stands).
    Returns (the keys something was written to, the keys left whole)."""
    written, left = [], []
    for name in sorted(found):
        if not name.startswith(f"{keys.PREFIX}:authority:") or name == keys.AUTH_VERSION:
            left.append(name)  # a copy names only authority keys; anything else is not written
            continue
        pipe = client.pipeline(transaction=False)
        if _merge(client, pipe, name, found[name]) and any(pipe.execute(raise_on_error=False)):
            written.append(name)
        else:
            left.append(name)
    if written:
        moved(client)  # what a role kept may lack what was put back (kept.py)
    return written, left


def _merge(client: redis.Redis, pipe: Any, name: str, entry: dict[str, Any]) -> bool:
    """Queue on `pipe` the writes that add what Redis lacks of `name`; False when there are none."""
    kind, value = entry["type"], entry["value"]
    if kind == "string":
        pipe.set(name, _u(value), nx=True)
    elif kind == "hash":
        for k, v in value:
            pipe.hsetnx(name, _u(k), _u(v))
    elif kind == "set" and value:
        pipe.sadd(name, *(_u(m) for m in value))
    elif kind == "zset" and value:
        pipe.zadd(name, {_u(m): float(score) for m, score in value}, nx=True)
    elif kind == "list" and value and not client.exists(name):  # a list has no members to merge by
        pipe.rpush(name, *(_u(item) for item in value))
    elif kind == "stream":
        top: list[Any] = client.xrevrange(name, count=1)  # type: ignore[assignment]
        last = _stream_id(top[0][0].decode()) if top else (0, 0)
        for entry_id, fields in value:
            if _stream_id(entry_id) > last:
                pipe.xadd(name, {_u(k): _u(v) for k, v in fields}, id=entry_id)
    return len(pipe) > 0


def _stream_id(text: str) -> tuple[int, int]:
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)
