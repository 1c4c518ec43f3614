"""No open task is left with nothing to wake it (D85): a task planted with nothing that would move
it (no wait, no proposal in flight, no freeze, no quarantine), unchanged for longer than a task may
be, is found by the timer's sweep and woken. At a stage that offers a tool it is asked again and
finishes, once; at one where nothing but a person can move it, it is parked for review with why."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from helpers import BankClient, new_checkpoint, wait_logged

from wakeful.consumers.kafka import wiring
from wakeful.core.process import wait_until
from wakeful.devstack.fleet import Fleet
from wakeful.examples.refund import Stage
from wakeful.examples.refund import app as refund_app
from wakeful.state import acl
from wakeful.state.lease import Leases
from wakeful.workflow.stuck import STUCK_AFTER_S

SWEEP_S = 1
SETTLE_S = 90.0

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def fleet(client: BankClient) -> Iterator[Fleet]:
    running = Fleet({**os.environ, "WAKEFUL_SWEEP_S": str(SWEEP_S)}).start()
    try:
        # The sweep finds the index's stage sets by a SCAN every KEYS_EVERY_S (a minute), so on a
        # stack where this tenant never had a task at these stages its first SCAN finds no set to
        # read, and a task planted then waits a minute. One task planted at each, indexed by the
        # relay, and the timer started again: its first SCAN finds the sets, as on any stack that
        # has served tasks. Those tasks are stranded too, and the sweep settles them.
        warm = {planted(client, stage): stage for stage in (Stage.READY, Stage.AWAITING_APPROVAL)}
        assert wait_until(lambda: all(indexed(client, t, s) for t, s in warm.items()), SETTLE_S), warm
        running.restart("timer")
        yield running
    finally:
        running.stop()


def planted(client: BankClient, stage: str) -> str:
    """A task stored at `stage` with nothing to wake it, last changed longer ago than a task may sit."""
    store = wiring.store_for(client.settings, "gate", refund_app)
    long_ago = datetime.now(UTC) - timedelta(seconds=2 * STUCK_AFTER_S)
    store.clock = lambda: long_ago
    cp = new_checkpoint(f"t-stranded-{uuid.uuid4().hex[:10]}", amount=100, stage=stage)
    store.create(cp, f"plant:{cp.task_id}")
    return cp.task_id


def test_a_stranded_task_at_a_tool_stage_is_found_by_the_sweep_and_finishes_once(
    client: BankClient, fleet: Fleet
) -> None:
    task_id = planted(client, Stage.READY)
    swept = wait_logged(fleet.dir / "timer.log", "timer.swept", task_id, timeout=SETTLE_S)
    assert swept is not None, "the sweep never found the stranded task"
    assert "offers a tool, waits for nothing" in swept["why"], swept
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed" and len(client.bank.entries(task_id)) == 1, shown


def test_a_stranded_task_nothing_but_a_person_can_move_is_parked_for_review(
    client: BankClient, fleet: Fleet
) -> None:
    task_id = planted(client, Stage.AWAITING_APPROVAL)  # its approval's wait was lost
    assert wait_logged(fleet.dir / "timer.log", "timer.swept", task_id, timeout=SETTLE_S) is not None
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "needs_review", shown
    assert "offers no tool and waits for nothing" in shown["last_refusal"], shown
    assert client.bank.entries(task_id) == []


def indexed(client: BankClient, task_id: str, stage: str = "ready") -> bool:
    return client.admin.zscore(f"wk:index:{{acme}}:stage:{stage}", task_id) is not None


def test_the_sweep_leaves_a_quarantined_task_and_one_a_worker_holds_alone(
    client: BankClient, fleet: Fleet
) -> None:
    """A quarantine marker parks a task for a person, and a lease is a worker's call under way (it may
    run longer than a task sits, D61): each is something that will move it, so the sweep wakes neither."""
    parked, held = planted(client, Stage.READY), planted(client, Stage.READY)
    client.store.quarantine(parked, "tampered", "a person is looking at it")
    leases = Leases(
        acl.connect(client.settings, "executor"), "test-holder", ttl_ms=10 * 60_000
    )  # a long call
    lease = leases.acquire(held)
    try:
        assert wait_until(lambda: indexed(client, parked) and indexed(client, held), SETTLE_S)
        control = planted(client, Stage.READY)  # indexed after them: the pass that finds it saw them
        assert wait_logged(fleet.dir / "timer.log", "timer.swept", control, timeout=SETTLE_S) is not None
        log = (fleet.dir / "timer.log").read_text()
        assert parked not in log and held not in log, "the sweep woke a task something else will move"
        assert client.store.quarantine_reason(parked) is not None
        assert client.bank.entries(parked) == [] and client.bank.entries(held) == []
    finally:
        leases.release(lease)
