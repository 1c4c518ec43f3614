"""A tool's Redis client for one step, logged in as the user its minter made for that step (D120).

    with as_minted(settings) as client:       # inside a tool's call, lookup or undo
        client.get(...)

A new connection per step costs a connect and a login on every call, so each thread keeps one
connection per tool and changes who it is at each step: `AUTH` as the step's user when the run
begins, `RESET` when it ends (it speaks RESP2, which RESET puts a connection back to). After RESET
the connection is nobody's (the default user needs a password no role is given): it can do
nothing until the next step logs in, and the removal of the step's user, which closes every
connection still logged in as it, leaves it open. A connection that broke meanwhile is opened
again, logged in as the current step's user. A tool reuses only a connection it opened itself, in
its own egress (consumers/executor/guarding.py), and a cluster client is made per step.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import redis
from redis.credentials import CredentialProvider

from wakeful.core import minting
from wakeful.core.settings import Settings
from wakeful.state import acl

_held = threading.local()  # per thread: (redis url, tool name) -> its pool of one connection


class _StepLogin(CredentialProvider):
    """Whoever the current step's credential names, read at each (re)connect."""

    def get_credentials(self) -> tuple[str, str]:
        made = minting.credential()
        return made.user, made.password


@contextlib.contextmanager
def as_minted(settings: Settings, timeout: float = 10.0) -> Iterator[redis.Redis]:
    """A client logged in as this step's minted user (minting.credential()), for this run only."""
    made = minting.credential()
    if settings.redis_cluster:
        fresh = acl.client(
            settings, username=made.user, password=made.password, socket_timeout=timeout,
            socket_connect_timeout=timeout,
        )  # fmt: skip
        with fresh:
            yield fresh
        return
    pool, client = _own(settings, timeout)
    conn = pool.get_connection()  # type: ignore[no-untyped-call]  # the reply of the last step's RESET is read first (_Pool)
    try:
        conn.send_command("AUTH", made.user, made.password)
        conn.read_response()
    finally:
        pool.release(conn)  # type: ignore[no-untyped-call]
    try:
        yield client
    finally:
        conn = pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            conn.send_command("RESET")  # its reply is read when the connection is next taken
            conn.reset_unread = True
        except (redis.RedisError, OSError):  # broken: the next step opens it again, as that step
            conn.disconnect()
        finally:
            pool.release(conn)  # type: ignore[no-untyped-call]


class _Pool(redis.BlockingConnectionPool):
    """A pool of one connection: every command, a pinned batch (state/functions.call) included,
    goes by the one connection that AUTH and RESET change, so no other stays logged in after a
    step. A step's RESET is sent and not waited for: its reply is read when the connection is next
    taken, before anything else (a connection that broke meanwhile is opened again)."""

    def ensure_connection(self, connection: redis.connection.AbstractConnection) -> None:
        if getattr(connection, "reset_unread", False):
            connection.reset_unread = False  # type: ignore[attr-defined]
            try:
                connection.read_response()
            except (redis.RedisError, OSError):
                connection.disconnect()  # type: ignore[no-untyped-call]
        super().ensure_connection(connection)  # type: ignore[arg-type]


def _own(settings: Settings, timeout: float) -> tuple[_Pool, redis.Redis]:
    key = (settings.redis_url, minting.credential().tool)
    held: dict[tuple[str, str], tuple[_Pool, redis.Redis]] = _held.__dict__.setdefault("pools", {})
    if key not in held:
        pool = _Pool.from_url(
            settings.redis_url, max_connections=1, timeout=timeout, credential_provider=_StepLogin(),
            protocol=2, socket_timeout=timeout, socket_connect_timeout=timeout,
            connection_class=acl.CountingConnection,
        )  # fmt: skip
        held[key] = pool, redis.Redis(connection_pool=pool)
    return held[key]
