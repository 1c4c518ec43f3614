"""A timer's schedules: each due tick published as a signed task.create on wakeful.events (D104),
signed by its tenant's scheduler (D113).

Every timer looks about once a second. For a schedule with ticks due (workflow/schedules.py, from
the newest tick published, wk:schedule:fired), one timer claims the batch by its first tick (SET NX
with a ttl), signs and publishes each tick under the scheduler's key, oldest first, and once Kafka
has them all moves the schedule's newest published tick forward (ZADD GT: never back). A timer
that dies with the claim held leaves the ticks to whichever looks after the claim lapses: they are
published again under the same event ids and task ids, so the door and the gate's create let one
task start per tick. Nothing here is trusted because it is in Redis: a schedule that does not decode
or whose rule is wrong is logged and skipped, never a crash.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime

import redis
from confluent_kafka import Producer

from wakeful.authority.schedule_store import ScheduleStore, claim, mark_fired
from wakeful.consumers.kafka.failures import forever, outliving_refusals
from wakeful.consumers.kafka.producing import DeliveryFailures
from wakeful.core import topics
from wakeful.core.errors import DecodeError, WakefulError
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.producers.signing import Signer, sign_event
from wakeful.schemas import events
from wakeful.schemas.schedule import ScheduleRecord
from wakeful.sdk.workflow import WORKFLOW_FIELD
from wakeful.state import keys
from wakeful.workflow import schedules

POLL_S = 1.0  # a tick is published at most about this late
CLAIM_MS = 15_000  # a claim's ttl: how long a dead timer's batch waits for another


class Scheduler:
    def __init__(
        self,
        client: redis.Redis,
        producer: Producer,
        signer: Callable[[str], Signer],
        log: Log,
    ) -> None:
        self.client = client
        self.producer = producer
        self.failures = DeliveryFailures()  # its own: the deadlines' thread shares the producer
        self.signer = signer  # a principal's, loaded when its first tick is due: no schedules, no key
        self.log = log
        self.who = f"{socket.gethostname()}:{os.getpid()}"
        self.published = 0
        self._said: set[tuple[str, str]] = set()  # problems logged once, not every second

    def look(self, now: datetime | None = None) -> int:
        """One look at every schedule; the ticks published."""
        now = now or datetime.now(UTC)
        found: dict[bytes, bytes] = self.client.hgetall(keys.AUTH_SCHEDULES)  # type: ignore[assignment]
        if not found:
            return 0
        fired = ScheduleStore(self.client).fired()
        count = 0
        for name, raw in found.items():
            try:
                schedule = ScheduleRecord.decode(raw)
                if schedule.job != "create":
                    continue  # a purge's: `wakeful schedule run-purges` runs it (D114), never a timer
                ticks = schedules.due(schedule, fired.get(schedule.name), now)
            except (DecodeError, ValueError) as exc:
                self._say("timer.schedule_unreadable", name.decode(errors="replace"), error=str(exc))
                continue
            if ticks and self._claimed(schedule, ticks[0]):
                count += self._publish(schedule, ticks)
        return count

    def _claimed(self, schedule: ScheduleRecord, first: datetime) -> bool:
        return claim(self.client, schedule.name, first, self.who, CLAIM_MS)

    def _publish(self, schedule: ScheduleRecord, ticks: list[datetime]) -> int:
        try:
            signer = self.signer(schedules.signer_of(schedule.tenant))
        except WakefulError as exc:  # another tenant's scheduler is added with `--tenant <it>`
            self._say("timer.schedule_unsigned", schedule.name, error=str(exc), tenant=schedule.tenant)
            return 0
        payload = {**schedule.payload, WORKFLOW_FIELD: schedule.workflow}
        for tick in ticks:
            event = sign_event(
                signer,
                events.CREATE,
                payload,
                task_id=schedules.task_id(schedule.name, tick),
                event_id=schedules.event_id(schedule.name, tick),
            )
            self.producer.produce(
                topics.EVENTS,
                key=event.routing_key.encode(),
                value=event.encode(),
                on_delivery=self.failures.record,
            )
        if self.producer.flush(30) > 0 or self.failures.take():
            return 0  # not all on Kafka: the claim lapses and the batch goes again, same ids
        fault("timer.after_publish")
        mark_fired(self.client, schedule.name, ticks[-1])
        self.published += len(ticks)
        self.log("timer.ticked", schedule=schedule.name, ticks=len(ticks), newest=ticks[-1].isoformat())
        return len(ticks)

    def _say(self, event: str, name: str, **more: str) -> None:
        if (event, name) not in self._said:
            self._said.add((event, name))
            self.log(event, schedule=name, **more)


def start(scheduler: Scheduler, stop: threading.Event) -> threading.Thread:
    """The schedules' own thread: a slow look never holds a deadline back, nor a deadline a tick.
    A look that published a full batch looks again at once (an outage's catch-up)."""

    step = outliving_refusals(
        lambda: scheduler.look() >= schedules.BATCH, scheduler.log, "timer.schedules_failed"
    )

    thread = threading.Thread(
        target=forever, args=(step, stop, scheduler.log, POLL_S), name="schedules", daemon=True
    )
    thread.start()
    return thread
