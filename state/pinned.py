"""One pooled Redis connection held across WATCH ... EXEC, sending each step as one batch.

redis-py runs every command after WATCH as its own round trip. wakeful needs WATCH plus several
reads in one trip, and MULTI ... EXEC plus the index update in another, so a transition costs two
round trips. (redis-py leaves the low-level Connection API untyped, hence the ignores below.)
Error replies are returned as values (ResponseError), never raised mid-batch, so the
connection is never left with unread replies.

On a Redis Cluster the pinned connection is one to the node that serves `key`'s slot (a task's
keys share it: their hash tag). A command of the batch that names a key of another node (the
authority read beside a task, the outbox index) goes to that node on a connection of its own:
ahead of the pinned batch when it stands before the batch's EXEC, after it otherwise. Inside
MULTI ... EXEC every key must be in `key`'s slot, or CrossSlot is raised before anything is sent
(docs/decisions.md D40). A slot that moved under the batch (MOVED, ASK, CLUSTERDOWN) is raised as
SlotMoved once every reply is read, with the slot map updated: the caller's retry runs the whole
step again on the slot's new node.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

import hiredis
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import Connection, ConnectionPool
from redis.crc import key_slot

from wakeful.core.retry import SlotMoved

Command = Sequence[str | bytes | int]
# Commands that name no key; WATCH names all its arguments; FCALL names the `numkeys` arguments
# after the function's name and numkeys; every other command wakeful pins names one key, its first
# argument.
_KEYLESS = frozenset({"MULTI", "EXEC", "DISCARD", "UNWATCH", "PING"})


class CrossSlot(ValueError):
    """A transaction named a key outside its task's Redis Cluster slot: a bug in the caller."""


def command_keys(command: Command) -> list[str]:
    """The keys a command names (see _KEYLESS)."""
    name = str(command[0]).upper()
    if name in _KEYLESS:
        return []
    if name in ("FCALL", "FCALL_RO"):
        named = command[3 : 3 + int(command[2])]
    else:
        named = command[1:] if name in ("WATCH", "MGET") else command[1:2]
    return [k.decode() if isinstance(k, bytes) else str(k) for k in named]


def slot(key: str) -> int:
    return int(key_slot(key.encode()))


def node_of(cluster: RedisCluster, key: str) -> ClusterNode:
    """The primary that serves `key`'s slot, from the client's slot map."""
    node: ClusterNode = cluster.get_node_from_key(key)  # type: ignore[no-untyped-call]  # untyped upstream
    return node


def pack(commands: Sequence[Command]) -> bytes:
    """The batch in RESP, as redis-py's own packer writes it with hiredis, without its per-command
    work for what wakeful never sends (a command name of several words, memoryviews, buffers cut
    for very large values): a fifth of the time."""
    try:
        return b"".join([hiredis.pack_command(tuple(c)) for c in commands])  # type: ignore[arg-type]  # a 1-tuple in its stub
    except TypeError as exc:  # an argument that is not str, bytes, int or float: as redis-py says it
        raise redis.DataError(str(exc)) from exc


def _pool_of(cluster: RedisCluster, node: ClusterNode) -> ConnectionPool:
    """The node's connection pool. A node first heard of in a MOVED reply (a master added and
    resharded onto) has no client yet: the cluster client makes it, with its own settings."""
    pool: ConnectionPool = cluster.get_redis_connection(node).connection_pool
    return pool


class Pinned:
    def __init__(self, client: redis.Redis, key: str) -> None:
        """Pin a connection that serves `key` (on one Redis: any of its pool)."""
        self._cluster: RedisCluster | None = client if isinstance(client, RedisCluster) else None
        if self._cluster is not None:
            self._slot: int = slot(key)
            self._home: ClusterNode = node_of(self._cluster, key)
            pool = _pool_of(self._cluster, self._home)
        else:
            pool = client.connection_pool
        self._pool = pool
        self._conn: Connection = self._pool.get_connection()
        self.round_trips = 0
        self._broken = False
        self._watching = False

    def batch(self, commands: Sequence[Command]) -> list[Any]:
        for command in commands:  # EXEC (or DISCARD, UNWATCH) ends every WATCH of the connection
            name = str(command[0]).upper()
            if name == "WATCH":
                self._watching = True
            elif name in ("EXEC", "DISCARD", "UNWATCH"):
                self._watching = False
        if self._cluster is None:
            return self._send(self._conn, commands)
        return self._routed(self._cluster, commands)

    def _routed(self, cluster: RedisCluster, commands: Sequence[Command]) -> list[Any]:
        """Send each command to its node: the others' before the pinned batch when they stand
        before its EXEC, after it otherwise; replies in the order of `commands`."""
        names = [str(c[0]).upper() for c in commands]
        last_exec = max((i for i, n in enumerate(names) if n == "EXEC"), default=len(commands))
        home: list[int] = []
        ahead: dict[str, tuple[ClusterNode, list[int]]] = {}
        after: dict[str, tuple[ClusterNode, list[int]]] = {}
        in_multi = False
        for i, (name, command) in enumerate(zip(names, commands, strict=True)):
            in_multi = name == "MULTI" or (in_multi and name not in ("EXEC", "DISCARD"))
            named = command_keys(command)
            if in_multi and any(slot(k) != self._slot for k in named):
                raise CrossSlot(f"{name} {' '.join(named)} in a transaction pinned to slot {self._slot}")
            nodes = {node_of(cluster, k).name for k in named}
            if not named or nodes == {self._home.name}:
                home.append(i)
                continue
            if len(nodes) > 1:
                raise CrossSlot(f"{name} names keys on several nodes: {' '.join(named)}")
            node = node_of(cluster, named[0])
            (ahead if i < last_exec else after).setdefault(node.name, (node, []))[1].append(i)
        replies: list[Any] = [None] * len(commands)
        for group in (ahead, {self._home.name: (self._home, home)}, after):
            for node, picked in group.values():
                if not picked:
                    continue
                if node is self._home:
                    got = self._send(self._conn, [commands[i] for i in picked])
                else:
                    got = self._elsewhere(node, [commands[i] for i in picked])
                for i, reply in zip(picked, got, strict=True):
                    replies[i] = reply
        return replies

    def _elsewhere(self, node: ClusterNode, commands: list[Command]) -> list[Any]:
        """One round trip to another node, on a connection of its own pool."""
        assert self._cluster is not None  # only a cluster has other nodes
        pool = _pool_of(self._cluster, node)
        conn: Connection = pool.get_connection()
        try:
            return self._send(conn, commands, broken_is_ours=False)
        except BaseException:
            conn.disconnect()  # type: ignore[no-untyped-call]
            raise
        finally:
            pool.release(conn)

    def _send(
        self, conn: Connection, commands: Sequence[Command], *, broken_is_ours: bool = True
    ) -> list[Any]:
        self.round_trips += 1
        try:
            conn.send_packed_command([pack(commands)])  # type: ignore[no-untyped-call]
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
        except BaseException:
            self._broken = self._broken or broken_is_ours
            raise
        if self._cluster is not None:
            self._moved(self._cluster, replies)
        return replies

    @staticmethod
    def _moved(cluster: RedisCluster, replies: list[Any]) -> None:
        """Raise SlotMoved for a reply that says the slot is served elsewhere, after pointing the
        client's slot map at its new node (a MOVED reply names it; an ASK only says it is moving)."""
        for reply in replies:
            if isinstance(reply, redis.exceptions.MovedError):
                cluster.nodes_manager.move_slot(reply)
        for reply in replies:
            if isinstance(reply, redis.exceptions.AskError | redis.exceptions.ClusterDownError):
                raise SlotMoved(reply)

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
