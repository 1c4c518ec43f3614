"""A role's authority Snapshot, kept from wake to wake while authority stands still (D79).

Every write to authority ends by setting `wk:authority:{freeze}:version` to a fresh random token
(`moved()`): in the write's own MULTI where the write is in that slot (freezes, revocations), else
once the write has returned. A role reads the token, with the switch counter every freeze and
thaw bumps, in the batch that reads its task, instead of the ten keys a Snapshot is made of. The
pair is the mark a Snapshot is kept under: a freeze by an older build's CLI bumps the counter
alone, and a role that acknowledges it must not act on what it kept from before.

- A Snapshot made from reads sent after a round trip that saw mark m holds every write whose token
  came before m. While the keys still read m, no write has ended since: that Snapshot is as good as
  one read now, and the role uses it (one command a wake, not ten).
- When the mark has moved, the wake reads the ten keys again, in one more round trip.
- A Snapshot is kept at most KEEP_S. That bounds how long a write made around wakeful's writers
  (redis-cli, or an older build's CLI during a rolling upgrade) can go unseen, since it sets no
  token. With no token at all (a store no current writer has touched), or one that is not a
  string (MGET reads a key of another type as none), nothing is kept.

Tokens are random, never counted: a token deleted and written again (by `wakeful recover`, or a
copy put back) is never one a role has seen. A Redis restored from its own files brings back a
token a role may have seen with other authority behind it; KEEP_S bounds that too.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from wakeful.authority.documents import Policy
from wakeful.authority.snapshot import Snapshot, policy_reads, snapshot_from, snapshot_reads, with_policies
from wakeful.state import keys

KEEP_S = 1.0
VERSION_READ = ("MGET", keys.AUTH_VERSION, keys.AUTH_SWITCHED)  # one slot: {freeze}

Command = tuple[str, ...]
Reread = Callable[[list[Command]], list[Any]]  # one more round trip, on the wake's own connection
Mark = tuple[bytes, bytes | None]  # (the token, the switch counter) a Snapshot is kept under


def token() -> str:
    return secrets.token_hex(16)


def moved(client: redis.Redis) -> None:
    """Say that authority changed: call it once the write has returned (or put
    ("SET", keys.AUTH_VERSION, token()) in the write's own MULTI, when the write is in that slot)."""
    client.set(keys.AUTH_VERSION, token())


def mark(reply: Any) -> Mark | None:
    """The mark in an answer to VERSION_READ; None when there is no token, or the answer is not
    what MGET of two strings gives (a key planted with another type reads as none)."""
    if not isinstance(reply, list) or len(reply) != 2:
        return None
    token, switched = reply
    if not isinstance(token, bytes) or not (switched is None or isinstance(switched, bytes)):
        return None
    return token, switched


@dataclass(frozen=True)
class _Entry:
    token: Mark
    snap: Snapshot
    at: float  # when the reads it was made from were sent (the clock's time)


@dataclass(frozen=True)
class Ask:
    """What one wake asked for: `commands` to put in its batch (the token first)."""

    commands: tuple[Command, ...]
    kept: _Entry | None  # the Snapshot kept when asked; None: the ten reads follow the token
    seen: Mark | None  # the mark a round trip before this one saw
    at: float


class Kept:
    """The Snapshot of one app, kept by one process. Safe to share between threads: each wake's
    Ask carries what was kept when it asked."""

    def __init__(
        self, app: str, shipped: Policy | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.app, self.shipped, self.clock = app, shipped, clock
        self._entry: _Entry | None = None
        self._seen: Mark | None = None
        self.reads = 0  # wakes that read the ten keys (in their batch or a round trip more)
        self.reused = 0  # wakes that used the kept Snapshot

    def ask(self) -> Ask:
        now = self.clock()
        entry = self._entry if self._entry is not None and now - self._entry.at < KEEP_S else None
        commands = (VERSION_READ,) if entry is not None else (VERSION_READ, *snapshot_reads(self.app))
        return Ask(commands, entry, self._seen, now)

    def snapshot(self, ask: Ask, replies: Sequence[Any], reread: Reread) -> Snapshot:
        """The Snapshot for the wake that sent `ask.commands` and got `replies` (in that order)."""
        seen = mark(replies[0])
        if ask.kept is not None and seen == ask.kept.token:
            self.reused += 1
            return ask.kept.snap
        self.reads += 1
        if ask.kept is not None:  # the token moved: read afresh, after the round trip that saw it
            at = self.clock()
            snap = self._made(reread(list(snapshot_reads(self.app))), reread)
            keep = seen
        else:  # read beside the token: good for a token seen a round trip before, if it held
            at, snap = ask.at, self._made(replies[1:], reread)
            keep = seen if seen is not None and seen == ask.seen else None
        if keep is not None:
            self._entry = _Entry(keep, snap, at)
        elif seen is None:
            self._entry = None  # no token to keep by: the next wakes read beside it, one trip
        self._seen = seen
        return snap

    def _made(self, replies: Sequence[Any], reread: Reread) -> Snapshot:
        snap = snapshot_from(list(replies), self.app, self.shipped)
        more = policy_reads(snap)
        return with_policies(snap, reread(more)) if more else snap
