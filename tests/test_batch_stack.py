"""Read-only calls sharing a turn, on the real stack (D68): worker processes run the bench's `reads`
app with the rules model, which calls its three read-only tools in one proposal, then the effect
that closes the task. Each read is recorded on the op key it would have had alone, the effect once;
an executor killed around the turn (SIGKILL) still leaves one effect and every read recorded."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import killed_at

from wakeful.bench import steps as bench_steps
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client

SETTLE_S = 60.0
FIRST_RECEIPT_S = 120.0
LEASE_TTL_MS = 1500

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def fleet(client: Client) -> Iterator[Fleet]:
    env = {
        **os.environ,
        "WAKEFUL_APP": "wakeful.bench.steps:reads",
        "WAKEFUL_MODEL": "rules",
        "WAKEFUL_LEASE_TTL_MS": str(LEASE_TTL_MS),
    }
    running = Fleet(env).start()
    try:
        yield running
    finally:
        running.stop()


def finished(settings: Settings, task_id: str) -> list[str]:
    path = settings.home / bench_steps.LOG
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.split(" ")[1] for line in lines if line.split(" ")[0] == task_id]


def run(client: Client) -> str:
    task_id, receipt = client.create({})
    assert receipt["status"] == "accepted", receipt
    return task_id


def closed_once(client: Client, settings: Settings, task_id: str) -> dict[str, Any]:
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed", shown
    keys = [
        f"read_1:{task_id}:v1",
        f"read_2:{task_id}:v1:s1",
        f"read_3:{task_id}:v1:s2",
        f"finish:{task_id}:v1:s3",
    ]
    assert {op: a["status"] for op, a in shown["actions"].items()} == dict.fromkeys(keys, "succeeded")
    assert finished(settings, task_id) == [keys[3]]
    return shown


def test_three_read_only_calls_share_one_turn_and_each_is_recorded_on_its_own_key(
    client: Client, settings: Settings, fleet: Fleet
) -> None:
    task_id = run(client)
    shown = closed_once(client, settings, task_id)
    # Two turns of the loop, not four: the three reads' close, then the effect's.
    assert shown["actions"][f"read_3:{task_id}:v1:s2"]["args"] == {"ref": task_id}
    assert shown["state_version"] <= 4, shown["state_version"]


@pytest.mark.parametrize(
    "point", ["executor.after_intent", "executor.after_downstream_call", "executor.after_advance"]
)
def test_a_shared_turn_killed_in_the_middle_still_records_every_read_and_one_effect(
    point: str, client: Client, settings: Settings, fleet: Fleet
) -> None:
    task_id = killed_at(fleet, "executor", f"{point}@1", lambda: run(client), SETTLE_S)
    closed_once(client, settings, task_id)
