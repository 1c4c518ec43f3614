"""Per-step credentials in Redis (D120): the users the minter makes, and what it keeps of them.

    wk:{minted}:all   hash  user -> JSON: the grant it was minted for and when it ends (no secret)
    wk:{minted}:due   zset  user -> when it ends, epoch ms: what the reaper removes once due

A Kafka downstream's credential is a delegation token (D123), recorded here by its id the same way.

A minted user's password is stored by Redis as its SHA-256 only (`#<hex>`), so no command, ACL
LIST or saved ACL holds it. Removing a user (ACL DELUSER) also closes every connection that
authenticated as it, so a credential revoked in the middle of a call stops working at once.
ACL commands go to every node of a Redis Cluster (the client routes them so).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any, cast

import orjson
import redis
from redis.cluster import RedisCluster

from wakeful.core.grants import NAME, PREFIX, Grant
from wakeful.state import acl, keys
from wakeful.state.acl_lines import split
from wakeful.state.downstreams import Downstream
from wakeful.state.pinned import Pinned

TOKEN = re.compile(r"[A-Za-z0-9_-]{8,64}")  # a Kafka delegation token's id (base64url)


def rules_of(downstream: Downstream) -> list[str]:
    """A minted user's rights: its downstream's own rules (the keys and commands its static user
    has), and RESET, with which a step's connection logs out at its end (state/stepped.py)."""
    return [*split(acl.downstream_rules(downstream)), "+reset"]


def setuser(user: str, password: str, rules: Sequence[str]) -> list[str]:
    """The ACL SETUSER arguments that make `user` afresh with `rules`, its password given hashed."""
    digest = hashlib.sha256(password.encode()).hexdigest()
    return ["ACL", "SETUSER", user, "reset", "on", f"#{digest}", *rules]


Made = tuple[Grant, str, str, Sequence[str], int]  # a grant, its user, password, rules, end (epoch ms)


def make(client: redis.Redis, asked: Sequence[Made]) -> list[tuple[bytes | None, bytes | None] | Exception]:
    """Record each credential and make its user, in one round trip for all with the reads that say
    whether each may be: its task's lease and its op key's intent, as they were just before (or the
    error that one of them met). The minter removes a user at once if not (its password never left
    the minter). A record comes before its user: a crash between leaves a record the reaper ends,
    never a user nothing would remove."""
    if not asked:
        return []
    cluster = isinstance(client, RedisCluster)  # there ACL SETUSER goes to every node, on its own
    making = [tuple(setuser(user, password, rules)) for _, user, password, rules, _ in asked]
    per = 4 if cluster else 5
    with Pinned(client, keys.lease(asked[0][0].task_id)) as pinned:  # one batch, without a pipeline's cost
        replies = pinned.batch(
            [
                command
                for (grant, user, _, _, expires_ms), make_it in zip(asked, making, strict=True)
                for command in (
                    ("GET", keys.lease(grant.task_id)),
                    ("HGET", keys.ops(grant.task_id), grant.op_key),
                    ("HSET", keys.MINTED, user, grant.record(user, expires_ms)),
                    ("ZADD", keys.MINTED_DUE, expires_ms, user),
                    *([] if cluster else [make_it]),
                )
            ]
        )
    found: list[tuple[bytes | None, bytes | None] | Exception] = []
    for at, make_it in zip(range(0, len(replies), per), making, strict=True):
        mine = replies[at : at + per]
        if failed := [r for r in mine if isinstance(r, Exception)]:
            found.append(failed[0])
            continue
        if cluster:
            try:
                client.execute_command(*make_it)  # type: ignore[no-untyped-call]
            except redis.RedisError as exc:
                found.append(exc)
                continue
        found.append((mine[0], mine[1]))
    return found


def reads(client: redis.Redis, asked: Sequence[Grant]) -> list[tuple[bytes | None, bytes | None]]:
    """Each grant's task lease and op key's intent, in one round trip: what says whether a token
    may be made for it (core/grants.running), read before a Kafka token is made (D123)."""
    pipe = client.pipeline(transaction=False)
    for grant in asked:
        pipe.get(keys.lease(grant.task_id))
        pipe.hget(keys.ops(grant.task_id), grant.op_key)
    replies = pipe.execute()
    return [(replies[i], replies[i + 1]) for i in range(0, len(replies), 2)]


def note(client: redis.Redis, made: Sequence[tuple[Grant, str, int]]) -> None:
    """Record Kafka tokens made (grant, token id, end): listed and revoked as the users are; the
    broker ends each at its end by itself, so a lost record leaves nothing living longer."""
    if not made:
        return
    pipe = client.pipeline(transaction=False)
    for grant, token_id, expires_ms in made:
        pipe.hset(keys.MINTED, token_id, grant.record(token_id, expires_ms))
        pipe.zadd(keys.MINTED_DUE, {token_id: expires_ms})
    pipe.execute()


def end(client: redis.Redis, users: Sequence[str], tokens: Sequence[str] = ()) -> int:
    """Remove these minted users and their records, and the records of these Kafka tokens (which
    the broker expires: producers/kafka_tokens); how many users Redis still had."""
    tokens = [t for t in dict.fromkeys(tokens) if TOKEN.fullmatch(t) and not NAME.fullmatch(t)]
    names = [u for u in dict.fromkeys(users) if NAME.fullmatch(u)]
    if tokens:
        client.hdel(keys.MINTED, *tokens)
        client.zrem(keys.MINTED_DUE, *tokens)
    if not names:
        return 0
    if isinstance(client, RedisCluster):  # there ACL DELUSER goes to every node, on its own
        removed = _removed(client.execute_command("ACL", "DELUSER", *names))
        pipe = client.pipeline(transaction=False)
        pipe.hdel(keys.MINTED, *names)
        pipe.zrem(keys.MINTED_DUE, *names)
        pipe.execute()
        return removed
    # One round trip (a pass costs the minter one wake), packed by hiredis: a pass ends a second's
    # worth of steps, and redis-py's pipeline encodes each of their names one by one.
    with Pinned(client, keys.MINTED) as pinned:
        replies = pinned.batch(
            [("ACL", "DELUSER", *names), ("HDEL", keys.MINTED, *names), ("ZREM", keys.MINTED_DUE, *names)]
        )
    if failed := [r for r in replies if isinstance(r, Exception)]:
        raise failed[0]
    return _removed(replies[0])


def tokens_among(names: Sequence[str]) -> list[str]:
    """The Kafka tokens' ids among recorded names (a minted user's name is never one)."""
    return [n for n in names if TOKEN.fullmatch(n) and not NAME.fullmatch(n)]


def due(client: redis.Redis, now_ms: int, limit: int = 500) -> list[str]:
    """The minted users (and Kafka tokens) whose lifetime is past."""
    found = client.zrangebyscore(keys.MINTED_DUE, "-inf", now_ms, start=0, num=limit)
    return [_text(u) for u in cast(list[bytes], found)]


def strays(client: redis.Redis) -> list[str]:
    """Minted users Redis has that no record names (a crash between a record's removal and its
    user's, or a record lost with a restored store): nothing else would remove them."""
    users = client.execute_command("ACL", "USERS")  # type: ignore[no-untyped-call]
    if isinstance(users, dict):  # a cluster client: each node's answer
        users = [u for each in users.values() for u in each]
    minted = {_text(u) for u in users if _text(u).startswith(PREFIX)}
    recorded = {_text(u) for u in client.hkeys(keys.MINTED)}
    return sorted(minted - recorded)


def undue(client: redis.Redis) -> list[str]:
    """Recorded users with no due time (a mint that failed half-way): no pass would reach them."""
    recorded = {_text(u) for u in client.hkeys(keys.MINTED)}
    return sorted(recorded - {_text(u) for u in client.zrange(keys.MINTED_DUE, 0, -1)})


def listing(client: redis.Redis, task_id: str | None = None) -> list[dict[str, Any]]:
    """Every credential minted and not yet removed (or those of one task's steps), soonest to end
    first."""
    found = [orjson.loads(raw) for raw in client.hgetall(keys.MINTED).values()]
    mine = (r for r in found if isinstance(r, dict) and (task_id is None or r.get("task_id") == task_id))
    return sorted(mine, key=lambda r: int(r.get("expires_ms", 0)))


def of(client: redis.Redis, task_id: str | None = None) -> list[str]:
    """The minted users of one task's steps (every minted user with no task)."""
    return [str(r["user"]) for r in listing(client, task_id)]


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _removed(reply: object) -> int:
    if isinstance(reply, dict):  # a cluster client: the most any node removed
        return max((int(n) for n in reply.values()), default=0)
    return int(cast(int, reply))
