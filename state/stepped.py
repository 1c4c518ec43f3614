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
from typing import Any

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
    conn = pool.get_connection()  # type: ignore[no-untyped-call]  # the last step's RESET reply is read first (_Pool)
    try:
        if conn.login != made.user:  # not opened just now as this step's user (_StepConnection)
            conn.send_command("AUTH", made.user, made.password)
            conn.unread.append("AUTH")  # read before the reply to the step's first command
            conn.login = made.user
    except (redis.RedisError, OSError):  # broken: the step's first command opens it again, as it
        conn.disconnect()
    finally:
        pool.release(conn)  # type: ignore[no-untyped-call]
    try:
        yield client
    finally:
        conn = pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            conn.send_command("RESET")  # its reply is read when the connection is next taken
            conn.unread.append("RESET")
            conn.login = None
        except (redis.RedisError, OSError):  # broken: the next step opens it again, as that step
            conn.disconnect()
        finally:
            pool.release(conn)  # type: ignore[no-untyped-call]


class _StepConnection(acl.CountingConnection):
    """A connection that knows whom it is logged in as, and which replies it has not read yet: a
    step's AUTH is read with its first command's reply, so logging in costs no round trip of its own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.unread: list[str] = []  # the commands sent whose replies come before the next one's
        self.login: str | None = None

    def on_connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        self.unread, self.login = [], None
        super().on_connect_check_health(*args, **kwargs)  # logs in as the step's user
        self.login = minting.credential().user

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self.unread, self.login = [], None
        super().disconnect(*args, **kwargs)  # type: ignore[no-untyped-call]

    def drain(self, *, ours: bool) -> None:
        """Read the replies not read yet. `ours`: the last is this step's AUTH, whose refusal (a
        credential revoked or past its lifetime) is raised; an ended step's is not."""
        while self.unread:
            sent = self.unread.pop(0)
            try:
                super().read_response()
            except redis.ResponseError as exc:
                if ours and sent == "AUTH" and not self.unread:
                    self.disconnect()
                    raise redis.AuthenticationError(str(exc)) from None

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        self.drain(ours=True)
        return super().read_response(*args, **kwargs)


class _Pool(redis.BlockingConnectionPool):
    """A pool of one connection: every command, a pinned batch (state/functions.call) included,
    goes by the one connection that AUTH and RESET change, so no other stays logged in after a
    step. A step's RESET is sent and not waited for: its reply is read when the connection is next
    taken, before anything else (a connection that broke meanwhile is opened again); a step's AUTH
    is read with the reply to its first command."""

    def ensure_connection(self, connection: redis.connection.AbstractConnection) -> None:
        conn = connection
        assert isinstance(conn, _StepConnection)
        if conn.unread and conn.unread[-1] == "RESET":  # an ended step's: long arrived
            try:
                conn.drain(ours=False)
            except (redis.RedisError, OSError):
                conn.disconnect()
        if conn.unread:  # this step's AUTH: its reply comes with the next command's
            conn.connect()  # type: ignore[no-untyped-call]
            return
        super().ensure_connection(connection)  # type: ignore[arg-type]


def _own(settings: Settings, timeout: float) -> tuple[_Pool, redis.Redis]:
    key = (settings.redis_url, minting.credential().tool)
    held: dict[tuple[str, str], tuple[_Pool, redis.Redis]] = _held.__dict__.setdefault("pools", {})
    if key not in held:
        pool = _Pool.from_url(
            settings.redis_url, max_connections=1, timeout=timeout, credential_provider=_StepLogin(),
            protocol=2, socket_timeout=timeout, socket_connect_timeout=timeout,
            connection_class=_StepConnection,
        )  # fmt: skip
        held[key] = pool, redis.Redis(connection_pool=pool)
    return held[key]
