"""The kill path as an operator drives it: throw a switch, and know when the fleet has taken it in.

`freeze()` records the switch (authority/store.py) and then waits until every live gate and
executor has taken in the new switch counter (consumers/kafka/switch_acks.py): from that moment no
step judged before the freeze is still running, and no new intent is written for a frozen task.
`thaw()` lifts it and wakes every task with held work. Both are recorded with who and why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from wakeful.authority.store import AuthorityStore
from wakeful.consumers.kafka.switch_acks import waiting_for
from wakeful.state import keys


@dataclass(frozen=True)
class Taken:
    """Which live role processes took a switch in, which had not by the deadline, how long it took."""

    switched: int
    done: list[str]
    pending: list[str]
    waited_ms: float
    at: str  # when the last of them was seen to have taken it in (or the wait ended), ISO 8601


def freeze(authority: AuthorityStore, scope: str, by: str, reason: str, wait_s: float) -> Taken:
    """Freeze `scope`, then wait (up to wait_s) for every live gate and executor to take it in."""
    switched = authority.freeze(scope, by, reason)
    return taken_in(authority, switched, wait_s)


def thaw(
    authority: AuthorityStore, scope: str, by: str, reason: str, wait_s: float
) -> tuple[bool, list[str], Taken]:
    """Lift the freeze of `scope`; once the live roles have taken that in (up to wait_s), wake every
    task with held work. Returns whether it was frozen, the tasks woken, and who took it in."""
    switched, was = authority.thaw(scope, by, reason)
    taken = taken_in(authority, switched, wait_s)
    return was, authority.wake_held(), taken


def taken_in(authority: AuthorityStore, switched: int, wait_s: float) -> Taken:
    """Wait (up to wait_s) until every live gate and executor has taken in counter `switched`."""
    started = time.monotonic()
    deadline = started + wait_s
    while True:
        raw = authority.client.hgetall(keys.LIVE)
        live = {k.decode(): v.decode() for k, v in raw.items()}  # type: ignore[union-attr]
        secs, micros = authority.client.time()  # the server's clock, as the roles record it
        done, pending = waiting_for(live, switched, secs * 1000 + micros // 1000)
        if not pending or time.monotonic() >= deadline:
            at = datetime.now(UTC).isoformat()
            return Taken(switched, done, pending, (time.monotonic() - started) * 1000, at)
        time.sleep(0.02)
