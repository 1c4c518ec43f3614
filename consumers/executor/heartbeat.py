"""The executor's heartbeat: a task's lease kept alive while a tool call runs (docs/decisions.md D61).

The executor takes a task's lease for WAKEFUL_LEASE_TTL_MS, and a tool may take longer than that.
While a call runs, the lease is renewed every third of its ttl: one FCALL of lease_extend, which
moves the expiry only while the token still holds the lease. When to renew and when to give up is
`next_beat`, a pure rule. One thread per executor process renews every lease in a call (started at
the first), so a step pays a lock and a set insertion for its heartbeat, not a thread of its own.

A renewal that finds another token (or none) stops the heartbeat and records the lease as lost: the
executor then treats the call's outcome as a lost lease (LeaseLost), writes nothing with its fence,
and the next holder settles the step by its op key (the downstream refused or will refuse the old
fence). A renewal that fails on Redis is tried again sooner, while the lease may still be alive; once
a whole ttl has passed since the last renewal it is lost too. The executor stops the heartbeat, and
joins its thread, as soon as the call returns or raises, before it writes anything: no heartbeat
keeps a lease alive after its handler is done.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from wakeful.core.errors import LeaseLost
from wakeful.core.log import Log
from wakeful.state.lease import Lease

RENEWALS_PER_TTL = 3  # a renewal every third of the ttl: two can fail before the lease lapses
MIN_WAIT_S = 0.02  # never renew in a tighter loop than this, even with the ttl almost spent


class Renewal(StrEnum):
    RENEWED = "renewed"  # the token held the lease; its ttl starts again
    TAKEN = "taken"  # the token no longer holds it: lapsed, or another worker's now
    FAILED = "failed"  # Redis did not answer; the lease may still be ours


@dataclass(frozen=True)
class Beat:
    """Renew again after `wait_s` seconds."""

    wait_s: float


@dataclass(frozen=True)
class Lost:
    """Stop: the lease is no longer this worker's, or may not be."""

    reason: str


def period_s(ttl_ms: int) -> float:
    """Seconds between renewals of a lease of `ttl_ms`."""
    return ttl_ms / (1000 * RENEWALS_PER_TTL)


def next_beat(outcome: Renewal, now: float, renewed_at: float, ttl_ms: int) -> Beat | Lost:
    """After a renewal attempt at `now` (seconds, monotonic) of a lease last known alive at
    `renewed_at`: when to renew next, or why to stop."""
    if outcome is Renewal.TAKEN:
        return Lost("the lease lapsed or another worker took it before it was renewed")
    left = renewed_at + ttl_ms / 1000 - now  # how long the lease lives if this attempt failed
    if outcome is Renewal.RENEWED:
        return Beat(period_s(ttl_ms))
    if left <= MIN_WAIT_S:
        return Lost(f"no renewal reached Redis within the lease's ttl ({ttl_ms} ms)")
    return Beat(max(MIN_WAIT_S, min(period_s(ttl_ms), left / 2)))


class Extends(Protocol):
    """What the heartbeat renews through: state.lease.Leases (one FCALL of lease_extend each)."""

    def extend(self, lease: Lease) -> Lease: ...


@dataclass(eq=False)
class Pulse:
    """One lease kept alive during one call. lost: why it is gone, or None while it held at every
    renewal; renewals: how many there were. Read them once the pulse is stopped."""

    lease: Lease
    due: float  # monotonic seconds of the next renewal
    renewed_at: float  # when the lease was last known to be alive
    lost: str | None = None
    renewals: int = 0
    renewing: bool = False  # a renewal of it is in flight (outside the lock)
    also: Callable[[], None] | None = None  # renewed with the lease: the call's slot of its tool (D111)

    def check(self) -> None:
        """Raise LeaseLost if a renewal found the lease gone."""
        if self.lost is not None:
            raise LeaseLost(self.lease.task_id, self.lease.token, self.lost)


class Heartbeats:
    """Renews the leases of the calls in flight in one process, from one thread."""

    def __init__(self, leases: Extends, *, log: Log, clock: Callable[[], float] = time.monotonic) -> None:
        self.leases = leases
        self.log = log
        self.clock = clock
        self._cond = threading.Condition()
        self._pulses: set[Pulse] = set()
        self._wake_at = float("inf")  # when the thread means to look again
        self._thread: threading.Thread | None = None

    @contextmanager
    def beating(self, lease: Lease, also: Callable[[], None] | None = None) -> Iterator[Pulse]:
        """Keep `lease` alive until the block ends, however it ends; `also` is called after each
        renewal that held it (what else the call keeps alive)."""
        pulse = self.start(lease, also)
        try:
            yield pulse
        finally:
            self.stop(pulse)

    def start(self, lease: Lease, also: Callable[[], None] | None = None) -> Pulse:
        now = self.clock()  # the lease was taken (or renewed) just before the call began
        pulse = Pulse(lease, due=now + period_s(lease.ttl_ms), renewed_at=now, also=also)
        with self._cond:
            self._pulses.add(pulse)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lease-heartbeat", daemon=True)
                self._thread.start()
            if pulse.due < self._wake_at:
                self._cond.notify_all()
        return pulse

    def stop(self, pulse: Pulse) -> None:
        """No renewal of the pulse's lease after this returns: one in flight is waited for."""
        with self._cond:
            self._pulses.discard(pulse)
            while pulse.renewing:
                self._cond.wait()

    def _run(self) -> None:
        while True:
            with self._cond:
                due = self._due()
                for pulse in due:
                    pulse.renewing = True
            outcomes = [(pulse, self._renew(pulse)) for pulse in due]
            with self._cond:
                for pulse, outcome in outcomes:
                    self._beaten(pulse, outcome)
                self._cond.notify_all()

    def _due(self) -> list[Pulse]:
        """The pulses due now, waiting (under the lock) until there are some."""
        while True:
            now = self.clock()
            due = [p for p in self._pulses if p.due <= now]
            if due:
                self._wake_at = now
                return due
            self._wake_at = min((p.due for p in self._pulses), default=float("inf"))
            self._cond.wait(None if self._wake_at == float("inf") else self._wake_at - now)

    def _beaten(self, pulse: Pulse, outcome: Renewal) -> None:
        now = self.clock()
        pulse.renewing = False
        if outcome is Renewal.RENEWED:
            pulse.renewed_at = now
            pulse.renewals += 1
        decided = next_beat(outcome, now, pulse.renewed_at, pulse.lease.ttl_ms)
        if isinstance(decided, Lost):
            pulse.lost = decided.reason
            self._pulses.discard(pulse)
            self.log("executor.lease_lost", task_id=pulse.lease.task_id, reason=decided.reason)
        else:
            pulse.due = now + decided.wait_s

    def _renew(self, pulse: Pulse) -> Renewal:
        lease = pulse.lease
        try:
            self.leases.extend(lease)
        except LeaseLost:
            return Renewal.TAKEN
        except Exception as exc:  # any client failure: the rule decides whether the lease may live on
            self.log("executor.lease_renewal_failed", task_id=lease.task_id, error=repr(exc))
            return Renewal.FAILED
        if pulse.also is not None:
            try:
                pulse.also()
            except Exception as exc:  # the lease held: what else is kept alive is tried at the next beat
                self.log("executor.renewal_also_failed", task_id=lease.task_id, error=repr(exc))
        return Renewal.RENEWED
