"""`wakeful schedule run-purges`: the schedules whose ticks purge what the app's retention lets go
(D114), run by an operator's process beside the fleet, never by a role.

A purge deletes tasks' keys, which no role's Redis user may: it runs as the admin, as `wakeful
task purge` does, in a process of its own (one replica or several). About every POLL_S it reads
the schedules, and for each purge schedule with ticks due (workflow/schedules.py, its catch-up
policy as for any schedule) one process claims the newest due tick (SET NX, CLAIM_MS) and purges
once for it, with the tick as `--before`: one purge does what each missed tick would have. Then it
moves the schedule's newest run tick forward (never back) and records the run, with what went and
what stayed, in the schedules' history. A process that dies mid-purge leaves the tick to another
once the claim lapses; a purge run twice deletes nothing twice (each task is taken by one function
call that checks it again). A schedule that does not decode is logged and skipped.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime

import redis

from wakeful.authority.schedule_store import ScheduleStore, claim, mark_fired
from wakeful.core.errors import DecodeError
from wakeful.core.settings import Settings
from wakeful.operate import purge
from wakeful.schemas.schedule import ScheduleRecord
from wakeful.sdk.app import App
from wakeful.workflow import schedules

POLL_S = 30.0  # a purge's tick runs at most about this late
CLAIM_MS = 15 * 60_000  # a claim's ttl: a purge that outlives it may be run again beside it, harmlessly
Say = Callable[[str], None]


class PurgeSchedules:
    def __init__(
        self,
        client: redis.Redis,
        app: App,
        settings: Settings,
        say: Say,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        wait_s: float = 30.0,
    ) -> None:
        self.client, self.app, self.settings, self.say, self.clock = client, app, settings, say, clock
        self.wait_s = wait_s  # for the relay to put each purge's tombstones on the log (`task purge --wait`)
        self.store = ScheduleStore(client, clock)
        self.who = f"{socket.gethostname()}:{os.getpid()}"

    def look(self) -> list[tuple[str, purge.Report]]:
        """One look at every purge schedule: the purges run, by schedule."""
        now = self.clock()
        fired = self.store.fired()
        ran = []
        for name, found in self.store.all().items():
            if isinstance(found, str):
                self.say(f"schedule {name}: {found}; skipped")
                continue
            if found.job != "purge":
                continue
            try:
                ticks = schedules.due(found, fired.get(name), now)
            except (DecodeError, ValueError) as exc:
                self.say(f"schedule {name}: {exc}; skipped")
                continue
            if ticks and self._claimed(name, ticks[-1]):
                ran.append((name, self._purge(found, ticks[-1], now)))
        return ran

    def serve(self, stop: threading.Event, poll_s: float = POLL_S) -> None:
        """Look until `stop` is set; a look that fails on Redis is said and tried again."""
        while not stop.is_set():
            try:
                self.look()
            except redis.RedisError as exc:
                self.say(f"the purge schedules' look failed ({type(exc).__name__}: {exc}); looking again")
            stop.wait(poll_s)

    def _claimed(self, name: str, tick: datetime) -> bool:
        return claim(self.client, name, tick, self.who, CLAIM_MS)

    def _purge(self, schedule: ScheduleRecord, tick: datetime, now: datetime) -> purge.Report:
        by = f"schedule:{schedule.name}"
        report = purge.run(
            self.client,
            self.app,
            tick,
            now,
            dry_run=False,
            by=by,
            wait_s=self.wait_s,
            floor=purge.replay_window(self.settings),
        )
        mark_fired(self.client, schedule.name, tick)
        kept = ", ".join(f"{why} {n}" for why, n in sorted(report.kept.items())) or "none"
        said = f"tick {tick.isoformat()}: purged {report.purged} tasks ({report.keys} keys); kept: {kept}"
        self.store.ran(schedule.name, schedule.by, said)
        self.say(f"schedule {schedule.name}: {said}")
        return report
