"""A tool's Redis client for one step, logged in as the user its minter made for that step (D120).

    with as_minted(settings) as client:       # inside a tool's call, lookup or undo
        client.get(...)

A new connection per step costs a connect and a login on every call, so each thread keeps one
connection per tool and changes who it is at each step: `AUTH` as the step's user, sent in one
write with the step's first command, and `RESET` when it ends (it speaks RESP2, which RESET puts a
connection back to; a step that sent nothing sends neither). After RESET the connection is
nobody's (the default user needs a password no role is given): it can do nothing until the next
step logs in, and the removal of the step's user, which closes every connection still logged in
as it, leaves it open. A connection that broke meanwhile is opened again, logged in as the current
step's user. A tool reuses only a connection it opened itself, in its own egress
(consumers/executor/guarding.py), and a cluster client is made per step.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import hiredis
import redis
from redis.credentials import CredentialProvider

from wakeful.core import minting
from wakeful.core.settings import Settings
from wakeful.state import acl

_RESET = hiredis.pack_command(("RESET",))  # packed once: every step that sent anything ends with it
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
    conn = pool.get_connection()  # an ended step's RESET reply is read first (_Pool)
    if conn.login != made.user:  # not opened just now as this step's user
        conn.due, conn.login = (made.user, made.password), made.user  # sent with the step's first command
    pool.release(conn)
    try:
        yield client
    finally:
        conn = pool.get_connection()
        try:
            if conn.due:  # the step sent nothing: its login was never sent either
                conn.due, conn.login = None, None
            elif conn.login:
                conn.send_packed_command([_RESET], check_health=False)  # its reply: read when next taken
                conn.unread.append("RESET")
                conn.login = None
        except (redis.RedisError, OSError):  # broken: the next step opens it again, as that step
            conn.disconnect()
        finally:
            pool.release(conn)


class _StepConnection(acl.CountingConnection):
    """A connection that knows whom it is logged in as, and which replies it has not read yet. A
    step's AUTH goes in one write with its first command, and is read with that command's reply:
    logging in costs no round trip and no write of its own."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.unread: list[str] = []  # the commands sent whose replies come before the next one's
        self.login: str | None = None  # whom it is logged in as once what is due is sent
        self.due: tuple[str, str] | None = None  # the AUTH (user, password) to send with the next command

    def on_connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        self.unread, self.login, self.due = [], None, None
        super().on_connect_check_health(*args, **kwargs)  # logs in as the step's user
        self.login = minting.credential().user

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self.unread, self.login, self.due = [], None, None
        super().disconnect(*args, **kwargs)  # type: ignore[no-untyped-call]

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if self.due is not None:
            user, password = self.due
            self.due = None
            chunks = command if isinstance(command, list) else [command]
            auth = hiredis.pack_command(("AUTH", user, password))  # type: ignore[arg-type]  # a 1-tuple in its stub
            command = [auth, *chunks]
            self.unread.append("AUTH")
        super().send_packed_command(command, check_health)

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


class _Pool(redis.ConnectionPool):
    """A pool of one connection: every command, a pinned batch (state/functions.call) included,
    goes by the one connection that AUTH and RESET change, so no other stays logged in after a
    step. A step's RESET is sent and not waited for: its reply is read when the connection is next
    taken, before anything else (a connection that broke meanwhile is opened again, logged in as
    the current step). The connection's replies are all accounted for (_StepConnection), so it is
    polled (for a close while it idled) once as a step begins, not before each command.

    Taking and giving back the one connection is a lock's acquire and release: a step takes it three
    times or more, and redis-py's pools (a queue, counts of idle and used connections kept for
    metrics) cost several times that each time. A second user of it waits, as in a blocking pool, up
    to `timeout` seconds."""

    def __init__(self, *args: Any, timeout: float = 10.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._one: _StepConnection | None = None
        self._taken, self._wait_s = threading.Lock(), timeout

    def get_connection(self, *args: Any, **kwargs: Any) -> _StepConnection:
        if not self._taken.acquire(timeout=self._wait_s):
            raise redis.ConnectionError("No connection available.")
        try:
            if self._one is None:
                made = self.make_connection()
                assert isinstance(made, _StepConnection)
                self._one = made
            self.ensure_connection(self._one)
        except BaseException:
            self._taken.release()
            raise
        return self._one

    def release(self, connection: Any) -> None:
        if self._taken.locked():
            self._taken.release()

    def disconnect(self, inuse_connections: bool = True) -> None:
        if self._one is not None:
            self._one.disconnect()

    def ensure_connection(self, connection: redis.connection.AbstractConnection) -> None:
        conn = connection
        assert isinstance(conn, _StepConnection)
        if conn.unread and conn.unread[-1] == "RESET":  # an ended step's: long arrived
            try:
                conn.drain(ours=False)
            except (redis.RedisError, OSError):
                conn.disconnect()
        if conn.unread or conn.due is not None or conn.login is not None:  # inside a step: all known
            conn.connect()  # type: ignore[no-untyped-call]
            return
        # A step begins: once, see that the server did not close it while it idled (a restart
        # leaves the last reply readable and the socket dead); a closed one opens, as this step.
        super().ensure_connection(connection)  # type: ignore[arg-type]


def _own(settings: Settings, timeout: float) -> tuple[_Pool, redis.Redis]:
    key = (settings.redis_url, minting.credential().tool)
    held: dict[tuple[str, str], tuple[_Pool, redis.Redis]] = _held.__dict__.setdefault("pools", {})
    if key not in held:
        pool = _Pool.from_url(
            settings.redis_url, timeout=timeout, credential_provider=_StepLogin(),
            protocol=2, socket_timeout=timeout, socket_connect_timeout=timeout,
            connection_class=_StepConnection,
        )  # fmt: skip
        held[key] = pool, redis.Redis(connection_pool=pool)
    return held[key]
