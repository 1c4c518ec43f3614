"""The rules that leave no open task with nothing to wake it (D85): which index summaries the
timer's sweep wakes, a proposal its task moved on from is superseded (dropped, not dead-lettered),
and a sweep that fails never keeps the timer from its deadlines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
import redis
from refund_rules import AUTH, refund

from wakeful.consumers import executor_steps, timer_sweep
from wakeful.consumers.timer import Timer
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


class Deadlines:
    """A stand-in for the timer's Redis: no deadline ever due, each look counted."""

    def __init__(self) -> None:
        self.looks = 0

    def zrangebyscore(self, *_args: Any, **_kw: Any) -> list[bytes]:
        self.looks += 1
        return []


class FailingSweep:
    def __init__(self) -> None:
        self.passes = 0

    def due(self) -> bool:
        return True

    def run(self) -> list[str]:
        self.passes += 1
        raise redis.exceptions.NoPermissionError("this user has no permissions to run the 'scan' command")


def test_a_failing_sweep_never_keeps_the_timer_from_its_deadlines() -> None:
    client, sweep = Deadlines(), FailingSweep()
    timer = Timer(client, producer=None, log=Log(), sweep=sweep)  # type: ignore[arg-type]
    for _ in range(3):
        timer.step()
    assert sweep.passes == 3 and client.looks == 3
