"""A role's kept authority Snapshot (authority/kept.py, D79): reused only while the token and the
switch counter it was read under stand, never older than KEEP_S, and never older than a write
whose token came first."""

from __future__ import annotations

from typing import Any

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from wakeful.authority import kept as kept_mod
from wakeful.authority.kept import KEEP_S, VERSION_READ, Kept
from wakeful.authority.snapshot import snapshot_reads
from wakeful.state import keys

APP = "refund"
NINE = len(snapshot_reads(APP))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Store:
    """Authority as Redis holds it: `limit` stands for its content, `token` for its version key,
    `switched` for the counter freezes bump. A write changes the content first, then the token (or
    both at once, as in a MULTI). `answer` stands in for what MGET answers, when set."""

    def __init__(self) -> None:
        self.limit = 1
        self.token: Any = b"t0"
        self.switched: bytes | None = None
        self.answer: Any = None
        self.rereads = 0

    def replies(self, commands: tuple[Any, ...] | list[Any]) -> list[Any]:
        out: list[Any] = []
        for command in commands:
            if command[0] == "MGET":
                held = {keys.AUTH_VERSION: self.token, keys.AUTH_SWITCHED: self.switched}
                out.append([held.get(k) for k in command[1:]] if self.answer is None else self.answer)
            else:
                out.append(self._read(command))
        return out

    def _read(self, command: Any) -> Any:
        op, key = command[0], command[1]
        if op == "GET" and key.endswith(":limit"):
            return str(self.limit).encode()
        return set() if op == "SMEMBERS" else {} if op == "HGETALL" else None

    def reread(self, commands: list[Any]) -> list[Any]:
        self.rereads += 1
        return self.replies(commands)


def wake(kept: Kept, store: Store) -> int:
    ask = kept.ask()
    return kept.snapshot(ask, store.replies(ask.commands), store.reread).limit


def test_a_snapshot_is_reused_only_once_a_round_trip_before_saw_its_token() -> None:
    store, kept = Store(), Kept(APP, clock=Clock())
    assert len(kept.ask().commands) == 1 + NINE  # nothing kept: the ten reads ride with the token
    assert wake(kept, store) == 1
    assert len(kept.ask().commands) == 1 + NINE  # read beside the first token seen: not kept yet
    assert wake(kept, store) == 1
    assert kept.ask().commands == (VERSION_READ,)  # the token held across: one read a wake
    assert wake(kept, store) == 1
    assert (kept.reads, kept.reused, store.rereads) == (2, 1, 0)


def test_a_moved_token_reads_authority_again_in_one_more_round_trip() -> None:
    store, kept = Store(), Kept(APP, clock=Clock())
    wake(kept, store), wake(kept, store)
    store.limit, store.token = 7, b"t1"
    assert wake(kept, store) == 7
    assert store.rereads == 1
    assert kept.ask().commands == (VERSION_READ,)  # kept again, under the token it moved to
    assert wake(kept, store) == 7


def test_a_write_that_set_no_token_is_seen_within_keep_s() -> None:
    clock = Clock()
    store, kept = Store(), Kept(APP, clock=clock)
    wake(kept, store), wake(kept, store)
    store.limit = 9  # around the store: redis-cli, or an older build's writer
    clock.now += KEEP_S / 2
    assert wake(kept, store) == 1
    clock.now += KEEP_S
    assert len(kept.ask().commands) == 1 + NINE
    assert wake(kept, store) == 9


def test_no_token_or_a_token_that_is_no_string_keeps_nothing() -> None:
    for planted in ([None, None], [None, b"3"], [b"t", 5], [b"x"], 5, b"t0", redis.ResponseError("x")):
        store, kept = Store(), Kept(APP, clock=Clock())
        store.answer = planted
        for _ in range(3):
            assert wake(kept, store) == 1
            assert len(kept.ask().commands) == 1 + NINE, planted
        store.limit = 4
        assert wake(kept, store) == 4


def test_a_freeze_that_moved_only_the_switch_counter_is_seen_at_the_next_wake() -> None:
    """An older build's CLI freezes without a token: a role that acknowledged the counter must not
    judge its next wake by what it kept from before."""
    store, kept = Store(), Kept(APP, clock=Clock())
    wake(kept, store), wake(kept, store)
    assert kept.ask().commands == (VERSION_READ,)
    store.limit, store.switched = 3, b"1"  # the freeze's content, and its counter
    assert wake(kept, store) == 3
    assert store.rereads == 1


def test_a_token_first_seen_after_a_wake_asked_does_not_vouch_for_that_wakes_reads() -> None:
    """A wake that asked while nothing was kept reads authority beside the token. On a cluster the
    token may be read after a write those reads missed, so the wake keeps nothing on a token no
    round trip before it had seen, even one another wake has seen since."""
    clock = Clock()
    store, kept = Store(), Kept(APP, clock=clock)
    wake(kept, store), wake(kept, store)
    clock.now += KEEP_S  # the entry has expired: the next wake reads beside the token
    early = kept.ask()
    old = store.replies(early.commands)[1:]  # read while the limit was 1
    store.limit, store.token = 2, b"t1"
    wake(kept, store)  # another wake sees t1
    kept.snapshot(early, [[b"t1", None], *old], store.reread)  # the token read after the write
    assert wake(kept, store) == 2


def test_a_token_seen_by_a_wake_that_asked_later_does_not_vouch_for_an_earlier_read() -> None:
    """Two wakes in flight: the one that asked first read authority before the other saw the
    token, so it keeps nothing on the other's word."""
    store, kept = Store(), Kept(APP, clock=Clock())
    early = kept.ask()
    early_replies = store.replies(early.commands)  # limit 1 read under t0
    store.limit, store.token = 2, b"t1"
    wake(kept, store)  # sees t1
    kept.snapshot(early, early_replies, store.reread)
    assert wake(kept, store) == 2


def test_a_token_is_random_never_a_count() -> None:
    assert len({kept_mod.token() for _ in range(100)}) == 100


STEPS = st.lists(
    st.sampled_from(["wake", "write", "write_atomic", "write_around", "tick", "half"]), max_size=60
)


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_a_wake_never_judges_by_authority_older_than_the_last_write_before_it(steps: list[str]) -> None:
    """Every wake's Snapshot holds at least the content of each write whose token was set before
    the wake's batch ran; a write that set no token, at least once it is KEEP_S old."""
    clock = Clock()
    store, kept = Store(), Kept(APP, clock=clock)
    written = 1  # the content of the last write whose token was set
    around: list[tuple[float, int]] = []  # writes that set no token: (when, content)
    pending: int | None = None  # a write whose content is in, its token not yet
    for step in steps:
        if step == "wake":
            got = wake(kept, store)
            assert got >= written
            old = [c for at, c in around if clock.now - at >= KEEP_S]
            assert got >= max(old, default=1)
        elif step == "write":  # content now, token at the next step of any kind
            if pending is None:
                store.limit += 1
                pending = store.limit
                continue
        elif step == "write_atomic":
            store.limit += 1
            store.token = kept_mod.token().encode()
            written = store.limit
        elif step == "write_around":
            store.limit += 1
            around.append((clock.now, store.limit))
        elif step == "tick":
            clock.now += KEEP_S
        elif step == "half":
            clock.now += KEEP_S / 3
        if pending is not None and step != "write":
            store.token = kept_mod.token().encode()
            written, pending = pending, None
