"""The timer's sweep: no open task is left with nothing to wake it (D85).

An open task sleeps safely only while something will move it: a pending wake (a deadline in
wk:deadlines, a message on a topic), a wait with a deadline, a held lease, a freeze (wk:held) or
a quarantine marker. A task at a stage it can still move on from, waiting for nothing and unchanged
for STUCK_AFTER_S, has none: a proposal lost, a refusal that wrote nothing, code before a fix.

Every `WAKEFUL_SWEEP_S` (60 s) the timer reads the task index for such tasks (workflow/stuck.py's
rule, read from the index as the ops page reads it), leaves out the frozen, the quarantined and the
leased (a tool's call may run longer than that, D61), and wakes each with a deadline due now. The
gate judges that wake as any other: where the stage offers a tool it asks for a proposal; where
nothing but a person can move the task, it parks it for review with why. Each is counted
(wakeful_tasks_swept_total) and logged with its task id. A task woken is not woken again by this
process for STUCK_AFTER_S: its wake has that long to move it.

One pass is a SCAN of the index's keys (every KEYS_EVERY_S), then three pipelined round trips: the
tasks of each live stage unchanged for STUCK_AFTER_S, at most SAMPLE a set from where the last pass
stopped (so tasks left out, frozen or quarantined, never hide the ones behind them), their
summaries, then the freeze, quarantine and lease marks of those found stuck, and the wakes. It runs
on a thread of its own (`start`): a slow SCAN never holds a deadline back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import redis

from wakeful.consumers.kafka.task_gauges import KEYS_EVERY_S, index_keys, live_stages, tasks_key
from wakeful.core import metrics
from wakeful.core.log import Log
from wakeful.sdk.app import App
from wakeful.state import keys
from wakeful.workflow.stuck import STUCK_AFTER_S, stuck_summary

UPGRADE = (
    "the timer's Redis user lacks this release's rights: run `wakeful dev up` or `wakeful admin acl --apply`"
)
SAMPLE = 500  # tasks read from one stage set per pass; the rest wait for the next
# Tasks woken per pass, at most: after an outage, or a fleet moved onto a state dir of old tasks,
# thousands may be found at once, and their wakes would crowd out the live ones on wakeful.wake.
WAKE_MAX = 200


class Sweep:
    def __init__(
        self,
        client: redis.Redis,
        app: App,
        log: Log,
        every_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client, self.app, self.log, self.clock, self.every_s = client, app, log, clock, every_s
        self.live = live_stages(app)
        self.stages: dict[str, str] = {}  # the index's stage sets -> their stage
        self.keys_at = float("-inf")
        self.woken: dict[str, float] = {}  # task id -> when this process last woke it
        self.next_at = float("-inf")
        self.after: dict[str, int] = {}  # stage set -> the score the last pass stopped at

    def due(self) -> bool:
        return self.clock() >= self.next_at

    def run(self) -> list[str]:
        """One pass: the tasks woken, each with its reason logged."""
        now = self.clock()
        self.next_at = now + self.every_s
        self.woken = {t: at for t, at in self.woken.items() if now - at < STUCK_AFTER_S}
        if now - self.keys_at >= KEYS_EVERY_S or not self.stages:
            found, _ = index_keys(self.client.scan_iter(match=keys.PATTERN_INDEX, count=1000))
            self.stages = {k: s for k, s in found.items() if s in self.live}
            self.keys_at = now
        stuck = self._stuck(now)
        if not stuck:
            return []
        woken = self._wake(now, stuck)
        for task_id in woken:
            self.woken[task_id] = now
            metrics.swept(stuck[task_id][0])
            self.log("timer.swept", task_id=task_id, stage=stuck[task_id][0], why=stuck[task_id][1])
        return woken

    def _stuck(self, now: float) -> dict[str, tuple[str, str]]:
        """Task id -> (stage, why) of the tasks the index shows stuck, not woken here lately."""
        names = list(self.stages)
        if not names:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            low = f"({self.after[name]}" if name in self.after else "-inf"
            pipe.zrangebyscore(
                name, low, int((now - STUCK_AFTER_S) * 1000), start=0, num=SAMPLE, withscores=True
            )
        found = []
        for name, page in zip(names, pipe.execute(), strict=True):
            # On from the last task read; a page not full has reached the end: round again next time.
            if len(page) < SAMPLE:
                self.after.pop(name, None)
            else:
                self.after[name] = int(page[-1][1])
            found.append((name, [i.decode() for i, _ in page if i.decode() not in self.woken]))
        asked = [(n, ids) for n, ids in found if ids]
        if not asked:
            return {}
        pipe = self.client.pipeline(transaction=False)
        for name, ids in asked:
            pipe.hmget(tasks_key(name), ids)
        at = datetime.fromtimestamp(now, UTC)
        stuck: dict[str, tuple[str, str]] = {}
        for (name, ids), summaries in zip(asked, pipe.execute(), strict=True):
            for task_id, raw in zip(ids, summaries, strict=True):
                why = _judged(self.app, raw, self.stages[name], at)
                if why is not None:
                    stuck[task_id] = (self.stages[name], why)
        return stuck

    def _wake(self, now: float, stuck: dict[str, tuple[str, str]]) -> list[str]:
        """Wake each stuck task that no freeze holds, no quarantine parks and no worker holds (a
        deadline due now)."""
        candidates = sorted(stuck)
        pipe = self.client.pipeline(transaction=False)
        for task_id in candidates:
            pipe.sismember(keys.HELD_TASKS, task_id)
            pipe.exists(keys.quarantine(task_id), keys.lease(task_id))
        marks = pipe.execute()
        free = [t for i, t in enumerate(candidates) if not marks[2 * i] and not marks[2 * i + 1]]
        woken = free[:WAKE_MAX]  # the rest are found again by a later pass
        if woken:
            now_ms = int(now * 1000)
            self.client.zadd(keys.DEADLINES, {f"{task_id}|{now_ms}": now_ms for task_id in woken})
        return woken


def start(sweep: Sweep, stop: threading.Event) -> threading.Thread:
    """Sweep every `sweep.every_s` on a daemon thread until `stop`: a pass that fails (Redis away, a
    user without this release's rights) is logged, and the next comes as due."""

    def loop() -> None:
        while not stop.is_set():
            try:
                sweep.run()
            except redis.exceptions.NoPermissionError as exc:
                sweep.log("timer.sweep_failed", error=repr(exc), fix=UPGRADE)
            except redis.RedisError as exc:
                sweep.log("timer.sweep_failed", error=repr(exc))
            stop.wait(max(0.0, sweep.next_at - sweep.clock()))

    thread = threading.Thread(target=loop, name="timer-sweep", daemon=True)
    thread.start()
    return thread


def _judged(app: App, raw: Any, stage: str, at: datetime) -> str | None:
    """Why the summary `raw` shows a stuck task still at `stage`, or None (moved, gone, unreadable)."""
    try:
        doc = orjson.loads(raw) if raw is not None else None
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("stage") != stage:
        return None
    return stuck_summary(app, doc, at, STUCK_AFTER_S, held=False)
