"""The timer: deadlines due in `wk:deadlines` become Wake(reason=deadline) messages.

A member is "<task_id>|<deadline ms>"; it is removed only after its wake is acknowledged by Kafka,
so a crash in between wakes the task twice (the gate dedupes by message id, and ignores a deadline
that is not really due). Deadlines are never a Redis TTL: a waiting task is never silently dropped.
On threads of their own: the sweep (sweep.py), the schedules' ticks (schedules.py) and the held
creates let in under their tenants' in-flight limits (fair.py).
"""

from __future__ import annotations

import functools
import random
import threading
import time
from datetime import UTC, datetime

import redis
from confluent_kafka import Producer

from wakeful.consumers.kafka.failures import forever
from wakeful.consumers.kafka.producing import DeliveryFailures, make_producer
from wakeful.consumers.timer import fair as timer_fair
from wakeful.consumers.timer import schedules as timer_schedules
from wakeful.consumers.timer import sweep as timer_sweep
from wakeful.consumers.timer.schedules import Scheduler
from wakeful.consumers.timer.sweep import Sweep
from wakeful.core import metrics, topics
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.core.settings import Settings
from wakeful.core.tracing import root as new_trace
from wakeful.producers.keys import local_signer
from wakeful.schemas.events import Envelope
from wakeful.sdk.app import load_app
from wakeful.state import acl, keys

TICK_S = 0.25  # a deadline fires at most this late; an idle timer asks Redis about five times a second
BATCH = 500
FLUSH_S = 30.0  # the most a tick waits for the broker to acknowledge its wakes
# ... in slices this long, so that a stop asked meanwhile ends the wait well inside the grace a
# stopping role has (STOP_GRACE_S): the wakes not acknowledged stay due, for the next tick or timer.
FLUSH_SLICE_S = 0.5


def pause(rng: random.Random) -> float:
    """How long an idle timer waits before it looks again: from half to all of TICK_S, at random.
    With several timers, a fixed wait kept each at the same offset from the others, so the same one
    saw every deadline first and the rest almost never fired one. Never more than TICK_S: a step
    that moves a task to a stage offering a tool wakes it through the timer (a due-now deadline),
    so this wait is on that step's path; it averages 3/4 of TICK_S."""
    return TICK_S * rng.uniform(0.5, 1.0)


def deadline_wake(task_id: str, due_ms: int) -> Envelope:
    """The wake a deadline due at `due_ms` publishes. The gate derives the same id from task and due
    time: the runtime's, never an outside one."""
    message_id = keys.runtime_id("deadline", task_id, due_ms)
    return Envelope(
        message_id=message_id,
        task_id=task_id,
        task_version=0,
        kind="wake",
        created_at=datetime.now(UTC),
        trace_id=message_id,
        payload={"reason": "deadline", "due_ms": due_ms},
    )


class Timer:
    def __init__(
        self,
        client: redis.Redis,
        producer: Producer,
        log: Log,
        failures: DeliveryFailures | None = None,
        sweep: Sweep | None = None,
    ) -> None:
        self.client = client
        self.producer = producer
        self.failures = failures or DeliveryFailures()
        self.log = log
        self.fired = 0
        self.sweep = sweep  # finds tasks with nothing to wake them (consumers/timer/sweep.py)
        self.nudge = threading.Event()  # set by a thread that made wakes due now: look at once
        self.stopping = threading.Event()  # the role's stop, once run() has it

    def tick(self, now_ms: int | None = None) -> int:
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        due: list[bytes] = self.client.zrangebyscore(keys.DEADLINES, "-inf", now_ms, start=0, num=BATCH)  # type: ignore[assignment]
        if not due:
            return 0
        for member in due:
            task_id, _, due_ms = member.decode().partition("|")
            due_at = int(due_ms or 0)
            wake = deadline_wake(task_id, due_at)
            with new_trace("wakeful.timer wake", task_id=task_id, due_ms=due_at):  # a new trace per wake
                self.producer.produce(topics.WAKE, key=task_id.encode(), value=wake.encode())
        if not self._acknowledged() or self.failures.take():
            return 0  # not all acknowledged: keep them, try again next tick
        fault("timer.after_publish")
        self.client.zrem(keys.DEADLINES, *due)
        self.fired += len(due)
        metrics.timer_fired(len(due))
        self.log("timer.fired", count=len(due))
        return len(due)

    def _acknowledged(self) -> bool:
        """Whether the broker acknowledged every wake produced, waiting at most FLUSH_S, and no
        longer once the role is asked to stop."""
        deadline = time.monotonic() + FLUSH_S
        while self.producer.flush(FLUSH_SLICE_S) > 0:
            if self.stopping.is_set() or time.monotonic() >= deadline:
                return False
        return True

    def run(self, stop: threading.Event) -> None:
        self.stopping = stop
        rng = random.Random()
        if self.sweep is not None:  # its own thread: a slow pass never holds a deadline back
            timer_sweep.start(self.sweep, stop)
        forever(lambda: self.tick() >= BATCH, stop, self.log, lambda: pause(rng), self.nudge)


def main(settings: Settings, stop: threading.Event) -> None:
    log = Log(role="timer")
    producer, failures = make_producer(settings, "timer")
    client = acl.connect(settings, "timer")
    # The sweep's own connection: its pipelines never wait behind a tick's, nor a tick behind them.
    sweep = Sweep(acl.connect(settings, "timer"), load_app(settings.app), log, settings.sweep_s)
    timer = Timer(client, producer, log, failures, sweep)
    signer = functools.cache(lambda principal: local_signer(settings, principal))  # one per tenant
    scheduler = Scheduler(acl.connect(settings, "timer"), producer, signer, log)
    # The held creates' look (D108), on a connection of its own as the schedules' is.
    releaser = timer_fair.Releaser(acl.connect(settings, "timer"), log, nudge=timer.nudge)
    log("role.start")
    timer_schedules.start(scheduler, stop)
    timer_fair.start(releaser, stop)
    timer.run(stop)
    log("role.stop", messages=timer.fired, redis_round_trips=acl.CountingConnection.round_trips)
