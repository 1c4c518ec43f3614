"""A role's authority Snapshot, kept from wake to wake while authority stands still (D79).

Every write to authority ends by setting `wk:authority:{freeze}:version` to a fresh random token
(`moved()`): in the write's own MULTI where the write is in that slot (freezes, revocations), else
once the write has returned. A role reads the token in the batch that reads its task, instead of
the nine keys a Snapshot is made of:

- A Snapshot made from reads sent after a round trip that saw token t holds every write whose token
  came before t. While the key still reads t, no write has ended since: that Snapshot is as good as
  one read now, and the role uses it (one command a wake, not nine).
- When the token has moved, the wake reads the nine keys again, in one more round trip.
- A Snapshot is kept at most KEEP_S. That bounds how long a write made around wakeful's writers
  (redis-cli, or an older build's CLI during a rolling upgrade) can go unseen, since it sets no
  token. With no token at all (a store no current writer has touched), nothing is kept.

Tokens are random, never counted: a token deleted and written again (a Redis lost and restored)
is never one a role has seen, so no Snapshot is taken for current by mistake.
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
VERSION_READ = ("GET", keys.AUTH_VERSION)

Command = tuple[str, ...]
Reread = Callable[[list[Command]], list[Any]]  # one more round trip, on the wake's own connection


def token() -> str:
    return secrets.token_hex(16)


def moved(client: redis.Redis) -> None:
    """Say that authority changed: call it once the write has returned (or put
    ("SET", keys.AUTH_VERSION, token()) in the write's own MULTI, when the write is in that slot)."""
    client.set(keys.AUTH_VERSION, token())


@dataclass(frozen=True)
class _Entry:
    token: bytes
    snap: Snapshot
    at: float  # when the reads it was made from were sent (the clock's time)


@dataclass(frozen=True)
class Ask:
    """What one wake asked for: `commands` to put in its batch (the token first)."""

    commands: tuple[Command, ...]
    kept: _Entry | None  # the Snapshot kept when asked; None: the nine reads follow the token
    seen: bytes | None  # the token a round trip before this one saw
    at: float


class Kept:
    """The Snapshot of one app, kept by one process. Safe to share between threads: each wake's
    Ask carries what was kept when it asked."""

    def __init__(
        self, app: str, shipped: Policy | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.app, self.shipped, self.clock = app, shipped, clock
        self._entry: _Entry | None = None
        self._seen: bytes | None = None
        self.reads = 0  # wakes that read the nine keys (in their batch or a round trip more)
        self.reused = 0  # wakes that used the kept Snapshot

    def ask(self) -> Ask:
        now = self.clock()
        entry = self._entry if self._entry is not None and now - self._entry.at < KEEP_S else None
        commands = (VERSION_READ,) if entry is not None else (VERSION_READ, *snapshot_reads(self.app))
        return Ask(commands, entry, self._seen, now)

    def snapshot(self, ask: Ask, replies: Sequence[Any], reread: Reread) -> Snapshot:
        """The Snapshot for the wake that sent `ask.commands` and got `replies` (in that order)."""
        seen = replies[0] if isinstance(replies[0], bytes) else None
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
        self._seen = seen
        return snap

    def _made(self, replies: Sequence[Any], reread: Reread) -> Snapshot:
        snap = snapshot_from(list(replies), self.app, self.shipped)
        more = policy_reads(snap)
        return with_policies(snap, reread(more)) if more else snap
