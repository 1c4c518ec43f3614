"""The task gauges (core/metrics.py): tasks by stage, tasks waiting, deadlines coming due and stuck
tasks, read from Redis in one place, the relay, which keeps the task index (state/index.py), every
REFRESH_S seconds, and only in a relay that serves metrics.

One pass is one pipelined round trip, plus one for the summaries of the tasks that might be stuck:
ZCARD of each stage and wait set of every tenant's index, ZCOUNT of the timer's deadlines up to
each window, and, at each stage where a task can still move on, the tasks unchanged for
STUCK_AFTER_S (at most STUCK_SAMPLE of a set), whose summaries say whether they wait for something.
Which index keys exist is found by a SCAN every KEYS_EVERY_S (the relay sweeps its outboxes as
often), and so are the quarantined tasks (each marked by a key of its own). Stuck here is
workflow/stuck.py's rule read from the index: a task at a stage that is neither a runtime stage
nor the end of its workflow, waiting for nothing, unchanged for STUCK_AFTER_S; a frozen task is
not told apart (`wakeful task list --stuck` does that).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
import redis

from wakeful.core import metrics
from wakeful.core.settings import Settings
from wakeful.sdk.app import App, load_app
from wakeful.sdk.workflow import RUNTIME_STAGES
from wakeful.state import acl, keys
from wakeful.workflow.stuck import STUCK_AFTER_S

REFRESH_S = 10.0
KEYS_EVERY_S = 60.0
STUCK_SAMPLE = 500
WINDOWS = {"overdue": 0, "1m": 60_000, "1h": 3_600_000}  # label -> ms past now


def live_stages(app: App) -> frozenset[str]:
    """The stages a task can still move on from in some workflow of the app (stuck is judged there)."""
    return frozenset(s for wf in app.workflows for s, to in wf.stages.items() if to) - set(RUNTIME_STAGES)


def index_keys(names: Iterable[bytes | str]) -> tuple[dict[str, str], dict[str, str]]:
    """The index's stage sets (key -> stage) and wait sets (key -> what for) among key names."""
    stages, waits = {}, {}
    for raw in names:
        name = raw.decode() if isinstance(raw, bytes) else raw
        head, sep, stage = name.rpartition(":stage:")
        if sep and head.endswith("}"):
            stages[name] = stage
            continue
        head, sep, kind = name.rpartition(":wait:")
        if sep and head.endswith("}"):
            waits[name] = kind
    return stages, waits


def tasks_key(stage_key: str) -> str:
    """The tenant's summaries hash beside one of its stage sets."""
    return stage_key.rpartition(":stage:")[0] + ":tasks"


def stuck_among(summaries: Iterable[Any], stage: str) -> int:
    """How many of these summaries (raw JSON, or None) are still at `stage` and wait for nothing."""
    count = 0
    for raw in summaries:
        try:
            doc = orjson.loads(raw) if raw is not None else None
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict) and doc.get("stage") == stage and not doc.get("waits"):
            count += 1
    return count


def put(gauge: Any, now: Mapping[str, float], before: Iterable[str]) -> None:
    """Set gauge{label} for each label now, and 0 for one it had before and has no longer."""
    for label in set(before) - now.keys():
        gauge.labels(label).set(0)
    for label, value in now.items():
        gauge.labels(label).set(value)


class TaskGauges:
    def __init__(
        self, client: redis.Redis, live: frozenset[str], clock: Callable[[], float] = time.time
    ) -> None:
        self.client = client
        self.live = live
        self.clock = clock
        self.stages: dict[str, str] = {}
        self.waits: dict[str, str] = {}
        self.keys_at = float("-inf")
        self.seen: dict[str, set[str]] = {"tasks": set(), "waiting": set(), "stuck": set()}

    def refresh(self) -> None:
        now = self.clock()
        # An index with no sets yet is a Redis with few keys: look again at each pass until it has some.
        if now - self.keys_at >= KEYS_EVERY_S or not self.stages:
            found = self.client.scan_iter(match=keys.PATTERN_INDEX, count=1000)
            self.stages, self.waits = index_keys(found)
            # A quarantined task is parked for good; its marker is a key of its own, not in the index.
            marked = self.client.scan_iter(match=keys.PATTERN_QUARANTINE, count=1000)
            metrics.QUARANTINED.set(sum(1 for _ in marked))
            self.keys_at = now
        now_ms = int(now * 1000)
        stale = [k for k, s in self.stages.items() if s in self.live]
        pipe = self.client.pipeline(transaction=False)
        for name in [*self.stages, *self.waits]:
            pipe.zcard(name)
        for window in WINDOWS.values():
            pipe.zcount(keys.DEADLINES, "-inf", now_ms + window)
        for name in stale:
            pipe.zrangebyscore(name, "-inf", now_ms - STUCK_AFTER_S * 1000, start=0, num=STUCK_SAMPLE)
        replies = pipe.execute()
        sizes, rest = (
            replies[: len(self.stages) + len(self.waits)],
            replies[len(self.stages) + len(self.waits) :],
        )
        tasks: Counter[str] = Counter()
        waiting: Counter[str] = Counter()
        for name, size in zip([*self.stages, *self.waits], sizes, strict=True):
            if name in self.stages:
                tasks[self.stages[name]] += int(size)
            else:
                waiting[self.waits[name]] += int(size)
        due = dict(zip(WINDOWS, (int(n) for n in rest[: len(WINDOWS)]), strict=True))
        stuck: Counter[str] = Counter({self.stages[k]: 0 for k in stale})
        pipe = self.client.pipeline(transaction=False)
        asked = [(k, ids) for k, ids in zip(stale, rest[len(WINDOWS) :], strict=True) if ids]
        for name, ids in asked:
            pipe.hmget(tasks_key(name), ids)
        for (name, _), summaries in zip(asked, pipe.execute() if asked else [], strict=True):
            stuck[self.stages[name]] += stuck_among(summaries, self.stages[name])
        self._set(tasks, waiting, due, stuck)

    def _set(
        self, tasks: Counter[str], waiting: Counter[str], due: dict[str, int], stuck: Counter[str]
    ) -> None:
        for gauge, now, name in ((metrics.TASKS, tasks, "tasks"), (metrics.WAITING, waiting, "waiting")):
            put(gauge, now, self.seen[name])
            self.seen[name] = set(now)
        put(metrics.STUCK, stuck, self.seen["stuck"])
        self.seen["stuck"] = set(stuck)
        put(metrics.WAITS_DUE, due, ())
        metrics.GAUGES_AGE.set(self.clock())


def start(settings: Settings, stop: threading.Event, log: Callable[..., None]) -> None:
    """Keep the task gauges fresh from a daemon thread (its own connection, as the relay's user), in
    a relay that serves metrics; nothing otherwise."""
    if not metrics.enabled():
        return
    gauges = TaskGauges(acl.connect(settings, "relay"), live_stages(load_app(settings.app)))

    def loop() -> None:
        failures = 0
        while not stop.is_set():
            try:
                gauges.refresh()
                failures = 0
            except (redis.RedisError, OSError, ValueError) as exc:
                failures += 1
                if failures in (1, 10) or failures % 100 == 0:
                    log("task_gauges.failed", attempt=failures, error=repr(exc))
            stop.wait(REFRESH_S)

    threading.Thread(target=loop, name="task-gauges", daemon=True).start()
