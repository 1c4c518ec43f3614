"""A tool's Redis client for one step, logged in as the user its minter made for that step (D120).

    with as_minted(settings) as client:       # inside a tool's call, lookup or undo
        client.get(...)

A new connection per step costs a connect and a login on every call, so each thread keeps one
connection per tool and changes who it is at each step: `AUTH` as the step's user when the run
begins, `RESET` when it ends. After RESET the connection is nobody's (the default user needs a
password no role is given): it can do nothing until the next step logs in, and the removal of the
step's user, which closes every connection still logged in as it, leaves it open. A connection
that broke meanwhile is opened again, logged in as the current step's user. A tool reuses only a
connection it opened itself, in its own egress (consumers/executor/guarding.py), and a cluster
client is made per step.
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

_held = threading.local()  # per thread: (redis url, tool name) -> its client


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
    own = _own(settings, timeout)
    own.execute_command("AUTH", made.user, made.password)  # type: ignore[no-untyped-call]
    try:
        yield own
    finally:
        try:
            own.execute_command("RESET")  # type: ignore[no-untyped-call]
        except redis.RedisError:  # broken: the next step opens it again
            own.connection_pool.disconnect()


def _own(settings: Settings, timeout: float) -> redis.Redis:
    key = (settings.redis_url, minting.credential().tool)
    clients: dict[tuple[str, str], redis.Redis] = _held.__dict__.setdefault("clients", {})
    if key not in clients:
        clients[key] = redis.Redis.from_url(
            settings.redis_url, credential_provider=_StepLogin(), single_connection_client=True,
            socket_timeout=timeout, socket_connect_timeout=timeout, connection_class=acl.CountingConnection,
        )  # fmt: skip
    return clients[key]
