"""A task sealed under a key a worker's keyring lacks holds up nothing (D88): the gate holds its
wake and the executor drops its proposal, each marking the task, and the tasks behind it on the same
partition go on. Once the key is back and the worker restarted, the task is woken and finishes once."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from helpers import BankClient, new_checkpoint, wait_logged
from kafka.partitioner.default import murmur2

from wakeful.consumers.kafka import wiring
from wakeful.core import ids
from wakeful.core.process import wait_until
from wakeful.devstack.fleet import Fleet
from wakeful.examples.refund import Stage
from wakeful.examples.refund import app as refund_app
from wakeful.operate.client import REQUESTER
from wakeful.state import keys
from wakeful.state.seal import Keyring, Sealer
from wakeful.state.store import Store

SETTLE_S = 90.0

pytestmark = pytest.mark.timeout(420)


def partition_of(task_id: str, partitions: int) -> int:
    """The wakeful.wake partition a task's wakes go to (the producers' murmur2 partitioner)."""
    return int(murmur2(task_id.encode()) & 0x7FFFFFFF) % partitions


@pytest.fixture(scope="module")
def short_keyring(client: BankClient, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the stack's keyring, for this module's fleet: the tests add a key to it."""
    path = tmp_path_factory.mktemp("keyring") / "keyring.json"
    shutil.copy(client.settings.keyring, path)
    return path


@pytest.fixture(scope="module")
def fleet(client: BankClient, short_keyring: Path) -> Iterator[Fleet]:
    running = Fleet({**os.environ, "WAKEFUL_KEYRING": str(short_keyring)}).start()
    try:
        # Each gate and executor wakes (and unmarks) the tasks marked unreadable as it starts: one
        # still starting when the test marks its task would unmark it under the test's feet.
        assert not running.wait_started(SETTLE_S), f"roles not started: logs in {running.dir}"
        yield running
    finally:
        running.stop()


def test_a_task_no_worker_can_read_holds_up_nothing_and_runs_once_the_key_is_back(
    client: BankClient, fleet: Fleet, short_keyring: Path
) -> None:
    # A task sealed under a key only a newer keyring holds, at a stage that offers a tool.
    ring = Keyring.load(short_keyring)
    newer = ring.rotated()
    gate_store = wiring.store_for(client.settings, "gate", refund_app)
    store = Store(gate_store.client, Sealer(newer), moves=gate_store.moves)
    sealed = new_checkpoint(f"t-sealed-{uuid.uuid4().hex[:10]}", amount=100, stage=Stage.READY)
    store.create(sealed, f"plant:{sealed.task_id}")
    partitions = client.settings.partitions
    # A task of the same tenant whose wakes share the sealed task's partition.
    tenant = client.tenant_of(REQUESTER)
    behind = next(
        named
        for named in (f"t-behind-{uuid.uuid4().hex[:10]}" for _ in range(10_000))
        if partition_of(ids.task_in(tenant, named), partitions) == partition_of(sealed.task_id, partitions)
    )

    client.admin.zadd(keys.DEADLINES, {f"{sealed.task_id}|0": 0})  # wake it now
    held = wait_logged(fleet.dir / "gate.log", "gate.unreadable", sealed.task_id, timeout=SETTLE_S)
    assert held is not None, "the gate never said it could not read the task"
    assert newer.active in held["error"] and "restart" in held["fix"], held
    task_id, receipt = client.create({"amount": 40, "currency": "EUR"}, task_id=behind)
    assert receipt["status"] == "accepted", receipt
    assert client.wait_settled(task_id, SETTLE_S)["stage"] == "closed", "a task behind it was held up"
    assert client.admin.sismember(keys.UNREADABLE_TASKS, sealed.task_id)
    assert client.admin.sismember(keys.HELD_TASKS, sealed.task_id)

    # The key is back for the gate alone: the restarted gate wakes the task and asks for its step,
    # and the executor, still without it, drops the proposal and marks the task again.
    doc = orjson.loads(newer.to_json())
    full = short_keyring.with_name(
        "full.json"
    )  # the stack's keys and the newer one; the active key as it was
    Keyring.from_json(orjson.dumps({**doc, "active": ring.active}), "full").save(full)
    fleet.env["WAKEFUL_KEYRING"] = str(full)
    since = (fleet.dir / "executor.log").stat().st_size
    fleet.restart("gate")
    dropped = wait_logged(
        fleet.dir / "executor.log", "executor.unreadable", sealed.task_id, since=since, timeout=SETTLE_S
    )
    assert dropped is not None, "the executor never said it could not read the task"
    assert client.bank.entries(sealed.task_id) == []

    fleet.restart("executor")  # with the key: it wakes the task, which finishes once
    # (read with the newer keyring: the stack's own lacks the key the task was sealed under)
    assert wait_until(lambda: store.load(sealed.task_id).business.stage == "closed", SETTLE_S)
    assert len(client.bank.entries(sealed.task_id)) == 1
    assert not client.admin.sismember(keys.UNREADABLE_TASKS, sealed.task_id)
