"""The rules that leave no open task with nothing to wake it (D85): which index summaries the
timer's sweep wakes, a proposal its task moved on from is superseded (dropped, not dead-lettered),
and a sweep that fails never keeps the timer from its deadlines."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
import redis
from refund_rules import AUTH, refund

from wakeful.consumers.executor import steps as executor_steps
from wakeful.consumers.timer import sweep as timer_sweep
from wakeful.core.log import Log
from wakeful.examples.refund import app as refund_app
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import Envelope
from wakeful.workflow.stuck import STUCK_AFTER_S

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
OLD = NOW - timedelta(seconds=STUCK_AFTER_S + 5)


def summary(stage: str = "ready", waits: list[str] | None = None, at: datetime = OLD, **more: Any) -> bytes:
    doc = {"task_id": "t-1", "workflow": "refund", "stage": stage, "updated_at": at.isoformat()}
    return orjson.dumps(doc | {"waits": waits or []} | more)


@pytest.mark.parametrize(
    ("raw", "stuck"),
    [
        (summary(), True),
        (summary(stage="awaiting_approval"), True),  # its wait lost: the gate parks it for a person
        (summary(waits=["approval"]), False),  # a wait with a deadline will wake it
        (summary(at=NOW - timedelta(seconds=STUCK_AFTER_S - 5)), False),  # not long enough
        (summary(stage="closed"), False),  # moved on since the set was read
        (summary(workflow="gone"), False),  # a workflow the app lacks: gate 4's, not the sweep's
        (None, False),  # gone
        (b"{not json", False),
        (b"[1, 2]", False),
    ],
)
def test_the_sweep_wakes_exactly_a_task_waiting_for_nothing_unchanged_too_long(
    raw: bytes | None, stuck: bool
) -> None:
    why = timer_sweep._judged(
        refund_app, raw, "ready" if raw is None or b"ready" in raw else "awaiting_approval", NOW
    )
    assert (why is not None) == stuck, why


def envelope(task_version: int) -> Envelope:
    return Envelope(
        message_id="m-1",
        task_id="t-1",
        task_version=task_version,
        kind="proposal",
        created_at=NOW,
        trace_id="m-1",
    )


@pytest.mark.parametrize(("decided_on", "superseded"), [(2, True), (4, False), (5, False)])
def test_a_proposal_decided_on_an_older_version_is_superseded_and_a_newer_one_is_wrong(
    decided_on: int, superseded: bool
) -> None:
    made = refund.create("t-1", "svc", "default", {"amount": 10}, auth=AUTH, now=NOW)
    assert isinstance(made, Checkpoint)
    cp = made.model_copy(update={"versions": made.versions.model_copy(update={"state_version": 4})})
    assert executor_steps.superseded(cp, envelope(decided_on)) is superseded


class FailingSweep:
    """A sweep whose every pass fails as a Redis without this release's rights would."""

    every_s = 0.0

    def __init__(self, stop: threading.Event, passes: int) -> None:
        self.stop, self.passes, self.lines = stop, passes, list[dict[str, Any]]()
        self.next_at = 0.0

    def clock(self) -> float:
        return 0.0

    def log(self, event: str, **fields: Any) -> None:
        self.lines.append({"event": event, **fields})

    def run(self) -> list[str]:
        self.passes -= 1
        if self.passes <= 0:
            self.stop.set()
        raise redis.exceptions.NoPermissionError("this user has no permissions to run the 'scan' command")


def test_a_failing_sweep_is_logged_with_what_to_do_and_tried_again_on_its_own_thread() -> None:
    stop = threading.Event()
    sweep = FailingSweep(stop, passes=3)
    timer_sweep.start(sweep, stop).join(timeout=10)  # type: ignore[arg-type]
    assert stop.is_set() and len(sweep.lines) == 3
    assert all(
        line["event"] == "timer.sweep_failed" and "admin acl --apply" in line["fix"] for line in sweep.lines
    )


class Index:
    """A stand-in for the timer's Redis as the sweep reads it: one tenant's index and its marks."""

    def __init__(self, tasks: dict[str, bytes], frozen: set[str]) -> None:
        self.tasks, self.frozen = tasks, frozen
        self.scores = {t: i for i, t in enumerate(tasks)}  # the oldest first, all long unchanged
        self.woken: list[str] = []
        self.replies: list[Any] = []

    def scan_iter(self, **_kw: Any) -> list[bytes]:
        return [b"wk:index:{default}:stage:ready"]

    def pipeline(self, transaction: bool = False) -> Index:
        return self

    def zrangebyscore(self, _name: str, low: str, _high: int, start: int, num: int, withscores: bool) -> None:
        floor = float(low[1:]) if low.startswith("(") else float("-inf")
        page = sorted((s, t) for t, s in self.scores.items() if s > floor)[start : start + num]
        self.replies.append([(t.encode(), float(s)) for s, t in page])

    def hmget(self, _name: str, ids: list[str]) -> None:
        self.replies.append([self.tasks[i] for i in ids])

    def sismember(self, _name: str, task_id: str) -> None:
        self.replies.append(task_id in self.frozen)

    def exists(self, *_names: str) -> None:
        self.replies.append(0)

    def execute(self) -> list[Any]:
        replies, self.replies = self.replies, []
        return replies

    def zadd(self, _name: str, members: dict[str, int]) -> None:
        self.woken += [m.partition("|")[0] for m in members]


def test_frozen_tasks_at_the_front_of_a_stage_never_hide_the_stuck_ones_behind_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timer_sweep, "SAMPLE", 3)
    tasks = {f"t-{i}": summary() for i in range(8)}
    frozen = {f"t-{i}" for i in range(6)}  # more than a page of them, the oldest
    index = Index(tasks, frozen)
    now = NOW.timestamp()
    sweep = timer_sweep.Sweep(index, refund_app, Log(), clock=lambda: now)  # type: ignore[arg-type]
    for _ in range(3):
        sweep.run()
    assert sorted(index.woken) == ["t-6", "t-7"], index.woken


def test_a_flood_of_stuck_tasks_is_woken_a_bounded_number_per_pass_and_none_is_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(timer_sweep, "WAKE_MAX", 2)
    index = Index({f"t-{i}": summary() for i in range(5)}, frozen=set())
    now = NOW.timestamp()
    sweep = timer_sweep.Sweep(index, refund_app, Log(), clock=lambda: now)  # type: ignore[arg-type]
    passes = []
    for _ in range(4):
        passes.append(len(sweep.run()))
    assert passes == [2, 2, 1, 0]
    assert sorted(index.woken) == [f"t-{i}" for i in range(5)]
