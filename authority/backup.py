"""The authority keyspace as one sealed copy, for wakeful.authority, and back (D70).

Authority (signers, approvers, limits, policies, tool catalogs and switches, freezes, revocations)
is written by the admin only, outside any task, so no task's log record carries it. `copy()` reads
every `wk:authority:*` key, whatever its type, exactly; the admin seals the copy with the keyring
(AES-GCM bound to the name "authority" and the copy's time, state/seal.py), since it holds upstream
HMAC secrets, and publishes it keyed "authority" on a compacted topic: the newest copy is what a
lost Redis gets back. `put_back()` writes a copy's keys that Redis lacks, and leaves any it has.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson
import redis

from wakeful.core.errors import DecodeError
from wakeful.state import keys
from wakeful.state.seal import Sealer

SEALED_AS = "authority"  # the name a copy is sealed under (a task id can hold no such plain name)
SCHEMA = 1
_TYPES = ("string", "hash", "set", "zset", "list", "stream")


def _b(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _u(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def copy(client: redis.Redis) -> dict[str, Any]:
    """Every authority key, by name: its type and contents (bytes as base64), in a stable order."""
    names = sorted(client.scan_iter(match=keys.PATTERN_AUTHORITY, count=10_000))
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
    """Write the copy's keys that Redis lacks; (written, left because Redis holds them)."""
    names = sorted(found)
    pipe = client.pipeline(transaction=False)
    for name in names:
        pipe.exists(name)
    there = pipe.execute()
    written, left = [], []
    pipe = client.pipeline(transaction=False)
    for name, exists in zip(names, there, strict=True):
        if not name.startswith(f"{keys.PREFIX}:authority:"):
            left.append(name)  # a copy names only authority keys; anything else is not written
            continue
        if exists:
            left.append(name)
            continue
        _write(pipe, name, found[name])
        written.append(name)
    if written:
        pipe.execute()
    return written, left


def _write(pipe: Any, name: str, entry: dict[str, Any]) -> None:
    kind, value = entry["type"], entry["value"]
    if kind == "string":
        pipe.set(name, _u(value))
    elif kind == "hash" and value:
        pipe.hset(name, mapping={_u(k): _u(v) for k, v in value})
    elif kind == "set" and value:
        pipe.sadd(name, *(_u(m) for m in value))
    elif kind == "zset" and value:
        pipe.zadd(name, {_u(m): float(score) for m, score in value})
    elif kind == "list" and value:
        pipe.rpush(name, *(_u(item) for item in value))
    elif kind == "stream":
        for entry_id, fields in value:
            pipe.xadd(name, {_u(k): _u(v) for k, v in fields}, id=entry_id)
