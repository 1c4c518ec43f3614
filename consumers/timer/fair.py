"""A timer's look at the held creates: each tenant's queues let in, each in its order, while the
tenant is under its in-flight limit (D108) and each workflow with a queue of its own under its
workflow's (D112).

About twice a second every timer reads the tenants marked queued (wk:fair:queued) and, if any, the
limits; while some tenant has held creates it looks every BUSY_S, so that a freed slot is taken
again at once rather than left empty for most of a look. For each of a tenant's queues, the queued
creates that fit now (its limit less its tasks in flight, and the queue's workflow's limit less its
tasks of it, at most MOST a look) are woken first, as a thaw wakes held work (a deadline due now,
which this timer's tick publishes at once: the look nudges it), then moved into the flight sets by
fair_release, which lets in only those still queued while there is room. At its wake the gate
replays the held create, finds its task in flight and creates it. A timer that dies between the two
leaves the woken creates queued: the gate's fair_take lets a queued create in itself when it fits,
and one that does not fit is held again and woken at a later look. A tenant whose queues are all
empty is unmarked, and a workflow's empty queue dropped from the tenant's set (state/fair.py says
why neither can lose a create queued meanwhile); a name in that set that names no queue is logged
and dropped. A limit raised takes effect at the next look; a limit lifted lets the whole queue in,
MOST a look. Several timers may look at once: fair_release moves each create once, and a create
woken twice is replayed once (its held list is drained).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from wakeful.consumers.kafka.failures import forever, outliving_refusals
from wakeful.core.errors import WakefulError
from wakeful.core.log import Log
from wakeful.state import fair, keys, orphans
from wakeful.workflow import limits

POLL_S = 0.5  # with no creates held anywhere: a tenant's first held create is looked at this late
BUSY_S = 0.05  # while creates are held: a freed slot is given to one at most about this late
MOST = 200  # creates let in per tenant per look: a lifted limit's queue does not flood the wakes
MEND_EVERY_S = 300.0  # how often a timer gives back the slots of tasks that are not stored
MEND_AFTER_S = 3600.0  # a slot so old with no task stored is leaked: a create is stored in ms


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
        self._shuffle = random.Random().shuffle  # the order of a tenant's queues at each look
        self.mended_at = clock()  # not at start: a fleet that starts after an outage looks first

    def look(self, tenants: Sequence[str] | None = None) -> int:
        """One look at every tenant with held creates (or at `tenants` only, marked or not: an
        operator's or a test's look at one tenant); how many were let in."""
        self.busy = False  # until the read says otherwise: a look that fails waits as if idle
        if tenants is None and self.clock() - self.mended_at >= MEND_EVERY_S:
            self.mend()
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

    def mend(self) -> int:
        """Give back the slots taken MEND_AFTER_S ago or more whose tasks are not stored (a task
        removed by hand, or a create let in and refused at its replay): a leak would hold its
        tenant to fewer tasks for good. How many went."""
        self.mended_at = self.clock()
        mended = fair.mend(self.client, int((self.clock() - MEND_AFTER_S) * 1000))
        # A held floor's task that holds no wake (its held list purged) would keep its partition's
        # floor down, and a recovery re-driving from it, for good (D115).
        unpinned = orphans.drop_missing(self.client, keys.PATTERN_HELD_FLOOR, keys.held)
        if mended or unpinned:
            self.log("timer.fair_mended", slots=mended, pins=unpinned)
        return mended

    def _let_in(self, tenant: str, said: dict[str, str]) -> int:
        """The tenant's queues, each let in as far as it fits, in an order drawn afresh each look:
        no queue of the tenant is always first to a freed slot."""
        slots = limits.slots(limits.applying(said, tenant))
        lines, bad = fair.lines(self.client, tenant)
        if bad:
            self.log(
                "timer.fair_queue_unread",
                tenant=tenant,
                names=[n[:80].decode("utf-8", "replace") for n in bad],
            )
            fair.forget(self.client, tenant, bad)
        self._shuffle(lines)
        count, empty = 0, 0
        for line in lines:
            let_in, found_empty = self._let_in_line(line, slots, said)
            count, empty = count + let_in, empty + found_empty
        if empty == len(lines):
            fair.unmark(self.client, tenant)
        return count

    def _let_in_line(self, line: fair.Line, slots: int, said: dict[str, str]) -> tuple[int, bool]:
        """One queue's creates that fit now, woken then moved: how many, and whether it was empty."""
        at_most = limits.slots(limits.of_workflow(said, *line.workflow) if line.workflow else None)
        heads, empty = fair.heads(self.client, line, slots, MOST, workflow_limit=at_most)
        if empty:
            if line.own_queue:
                fair.drop_if_empty(self.client, line)
            return 0, True
        if not heads:
            return 0, False  # full: its tasks in flight end first
        now_ms = int(self.clock() * 1000)
        # Woken before they are moved: a crash in between leaves them queued, never in flight unwoken.
        self.client.zadd(keys.DEADLINES, {f"{task}|{now_ms}": now_ms for task in heads})
        self.nudge.set()
        left = fair.release(self.client, line, slots, now_ms, heads, workflow_limit=at_most)
        self.log("timer.fair_released", tenant=line.tenant, queue=line.name, tasks=len(heads), queued=left)
        return len(heads), left == 0


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
