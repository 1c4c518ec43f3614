"""One pooled Redis connection held across WATCH ... EXEC, sending each step as one batch.

redis-py runs every command after WATCH as its own round trip. wakeful needs WATCH plus several
reads in one trip, and MULTI ... EXEC plus the index update in another, so a transition costs two
round trips. (redis-py leaves the low-level Connection API untyped, hence the ignores below.)
Error replies are returned as values (ResponseError), never raised mid-batch, so the
connection is never left with unread replies.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

import redis
from redis.connection import Connection

Command = Sequence[str | bytes | int]


def hash_reply(reply: object) -> dict[bytes, bytes]:
    """An HGETALL reply as a dict, whichever way it arrived: a dict (RESP3, or redis-py's own
    parsing) or a flat [field, value, ...] list (RESP2 over a raw connection)."""
    if isinstance(reply, dict):
        return reply
    if isinstance(reply, list):
        return dict(zip(reply[::2], reply[1::2], strict=True))
    raise TypeError(f"not an HGETALL reply: {type(reply).__name__}")


class Pinned:
    def __init__(self, client: redis.Redis) -> None:
        self._pool = client.connection_pool
        self._conn: Connection = self._pool.get_connection()
        self.round_trips = 0
        self._broken = False
        self._watching = False

    def batch(self, commands: Sequence[Command]) -> list[Any]:
        self.round_trips += 1
        for command in commands:  # EXEC (or DISCARD, UNWATCH) ends every WATCH of the connection
            name = str(command[0]).upper()
            if name == "WATCH":
                self._watching = True
            elif name in ("EXEC", "DISCARD", "UNWATCH"):
                self._watching = False
        conn = self._conn
        try:
            packed = conn.pack_commands([tuple(c) for c in commands])  # type: ignore[no-untyped-call]
            conn.send_packed_command(packed)  # type: ignore[no-untyped-call]
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
            return replies
        except BaseException:
            self._broken = True
            raise

    def __enter__(self) -> Pinned:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._broken:
                self._conn.disconnect()  # type: ignore[no-untyped-call]
            elif self._watching:
                # Leave no WATCH behind on a connection that goes back to the pool.
                self.batch([("UNWATCH",)])
        except redis.RedisError:
            self._conn.disconnect()  # type: ignore[no-untyped-call]
        finally:
            self._pool.release(self._conn)
