"""The ops page's sessions, kept on the server (D89): a signed cookie alone is not a session.

A login writes one Redis key as the admin, `wk:ops:session:<SHA-256 of the session's nonce>`
(state/keys.py), whose TTL is the idle limit and never reaches past the session's absolute end.
Every page asks Redis to renew it (one PEXPIRE, which also says whether it is still there); logout
deletes it. So a cookie copied before its person logged out, left unused past the idle limit, or
used past the absolute limit opens nothing, whatever its signature says.

In Redis rather than in the page's process: a session survives a restart of `wakeful ops` (a
person mid-incident is not sent back to the login by a redeploy), a logout survives it too, and
two pages behind one balancer agree. The key holds who and from where, never the cookie: whoever
reads it (the admin alone) cannot make a cookie from it without the session key in ops.json.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

import orjson
import redis

from wakeful.operate.ops.auth import Session
from wakeful.state import keys


@dataclass(frozen=True)
class Limits:
    """How long a session lasts unused (idle) and at most (absolute), in seconds."""

    idle_s: int = keys.OPS_SESSION_IDLE_S
    max_s: int = keys.OPS_SESSION_MAX_S

    def __post_init__(self) -> None:
        if self.idle_s < 1 or self.max_s < 1:
            raise ValueError("a session's idle and absolute limits are whole seconds, at least 1")


def ttl_ms(now: float, ends: int, idle_s: int) -> int:
    """How long a session's key lives from `now`: its idle limit, never past its end. 0: it is over."""
    return max(0, min(idle_s * 1000, int((ends - now) * 1000)))


def key_of(session: Session) -> str:
    return keys.ops_session(hashlib.sha256(session.nonce.encode()).hexdigest())


class Sessions:
    """The live sessions, in Redis, as the admin."""

    def __init__(self, client: redis.Redis, limits: Limits) -> None:
        self.redis, self.limits = client, limits

    def start(self, session: Session, client: str, now: float | None = None) -> None:
        now = time.time() if now is None else now
        ttl = ttl_ms(now, session.expires, self.limits.idle_s)
        if ttl <= 0:
            raise ValueError("a session that is already over cannot start")
        record = {
            "operator": session.operator,
            "client": client[:64],
            "started": int(now),
            "ends": session.expires,
        }
        self.redis.set(key_of(session), orjson.dumps(record), px=ttl)

    def touch(self, session: Session, now: float | None = None) -> bool:
        """Whether the session is live; if so its idle clock starts again (one round trip)."""
        ttl = ttl_ms(time.time() if now is None else now, session.expires, self.limits.idle_s)
        return ttl > 0 and bool(self.redis.pexpire(key_of(session), ttl))

    def end(self, session: Session) -> None:
        self.redis.delete(key_of(session))
