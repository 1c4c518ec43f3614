"""A timer's look at the held creates: each tenant's queue let in, oldest first, while it is under
its in-flight limit (D108).

About twice a second every timer reads the tenants marked queued (wk:fair:queued) and, if any, the
limits; while some tenant has held creates it looks every BUSY_S, so that a freed slot is taken
again at once rather than left empty for most of a look. For each tenant, the queued creates that
fit now (its limit less its tasks in flight, at most MOST a look) are woken first, as a thaw wakes
held work (a deadline due now, which this timer's tick publishes at once: the look nudges it),
then moved into the tenant's flight set by fair_release, which lets in only those
still queued while there is room. At its wake the gate replays the held create, finds its task
in flight and creates it. A timer that dies between the two leaves the woken creates queued: the
gate's fair_take lets a queued create in itself when it fits, and one that does not fit is held
again and woken at a later look. A tenant whose queue is empty is unmarked (state/fair.py says why
that cannot lose a create queued meanwhile). A limit raised takes effect at the next look; a
limit lifted lets the whole queue in, MOST a look. Several timers may look at once: fair_release
moves each create once, and a create woken twice is replayed once (its held list is drained).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from wakeful.authority.limit_store import MAX_IN_FLIGHT
from wakeful.consumers.kafka.failures import forever, outliving_refusals
from wakeful.core.errors import WakefulError
from wakeful.core.log import Log
from wakeful.state import fair, keys
from wakeful.workflow import limits

POLL_S = 0.5  # with no creates held anywhere: a tenant's first held create is looked at this late
BUSY_S = 0.05  # while creates are held: a freed slot is given to one at most about this late
MOST = 200  # creates let in per tenant per look: a lifted limit's queue does not flood the wakes


class Releaser:
    def __init__(
        self,
        client: redis.Redis,
        log: Log,
        clock: Callable[[], float] = time.time,
        nudge: threading.Event | None = None,
    ) -> None:
        self.client, self.log, self.clock = client, log, clock
        self.nudge = nudge or threading.Event()  # set once wakes are due now: the tick looks at once
        self.released = 0
        self.busy = False  # the last look found held creates

    def look(self, tenants: Sequence[str] | None = None) -> int:
        """One look at every tenant with held creates (or at `tenants` only, marked or not: an
        operator's or a test's look at one tenant); how many were let in."""
        self.busy = False  # until the read says otherwise: a look that fails waits as if idle
        tenants = fair.queued(self.client) if tenants is None else list(tenants)
        self.busy = bool(tenants)
        if not tenants:
            return 0
        stored: Any = self.client.hgetall(keys.AUTH_LIMITS)
        said = {k.decode(): v.decode("utf-8", "replace") for k, v in stored.items()}
        count = 0
        for tenant in tenants:
            try:
                count += self._let_in(tenant, said)
            except (WakefulError, ValueError) as exc:  # one tenant's trouble holds back no other's
                self.log("timer.fair_unreleased", tenant=tenant, error=str(exc))
        self.released += count
        return count

    def _let_in(self, tenant: str, said: dict[str, str]) -> int:
        limit = limits.applying(said, tenant)
        slots = limit.max_in_flight if limit is not None else MAX_IN_FLIGHT
        heads, empty = fair.heads(self.client, tenant, slots, MOST)
        if empty:
            fair.unmark(self.client, tenant)
            return 0
        if not heads:
            return 0  # full: its tasks in flight end first
        now_ms = int(self.clock() * 1000)
        # Woken before they are moved: a crash in between leaves them queued, never in flight unwoken.
        self.client.zadd(keys.DEADLINES, {f"{task}|{now_ms}": now_ms for task in heads})
        self.nudge.set()
        left = fair.release(self.client, tenant, slots, now_ms, heads)
        if left == 0:
            fair.unmark(self.client, tenant)
        self.log("timer.fair_released", tenant=tenant, tasks=len(heads), queued=left)
        return len(heads)


def start(releaser: Releaser, stop: threading.Event) -> threading.Thread:
    """The look's own thread: a slow look never holds a deadline back. A look that let MOST in
    looks again at once; one that found creates held, after BUSY_S."""

    # A refusal never ends the loop: held creates would be left with nothing to let them in.
    step = outliving_refusals(lambda: releaser.look() >= MOST, releaser.log, "timer.fair_failed")

    def idle() -> float:
        return BUSY_S if releaser.busy else POLL_S

    thread = threading.Thread(target=forever, args=(step, stop, releaser.log, idle), name="fair", daemon=True)
    thread.start()
    return thread
