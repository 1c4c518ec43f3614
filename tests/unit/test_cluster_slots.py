"""Every transaction and script wakeful sends names keys of one Redis Cluster slot only, the task's
(docs/decisions.md D40): checked on the commands themselves, with no server at all. On a real
cluster: tests/test_redis_cluster.py."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import new_checkpoint

from wakeful.examples import bank, suppliers_keys
from wakeful.state import keys, last_step
from wakeful.state.lease import Held, Lease, Leases
from wakeful.state.pinned import command_keys, slot
from wakeful.state.seal import Keyring, Sealer
from wakeful.state.store import Store

TASKS = ("t-1", "t-0a1b2c3d4e5f", "task_with-dashes", "Z" * 64)


def _transaction(commands: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    start = next(i for i, c in enumerate(commands) if c[0] == "MULTI")
    end = next(i for i, c in enumerate(commands) if c[0] == "EXEC")
    return commands[start + 1 : end]


@pytest.mark.parametrize("task_id", TASKS)
def test_a_transition_writes_only_keys_of_its_tasks_slot_inside_multi(task_id: str) -> None:
    store = Store(object(), Sealer(Keyring.generate()), moves=lambda *_: True)  # type: ignore[arg-type]
    receipt = ("SET", keys.receipt("ev-00000001", task_id, key_id="upstream"), b"{}")
    evidence = ("HSET", keys.evidence(task_id), "note", "text")
    wake = ("ZADD", keys.DEADLINES, 1, f"{task_id}|1")
    cp = new_checkpoint(task_id)
    commands = last_step.commands(
        store.sealer, cp, "m1", None, also=[receipt, evidence], before=lambda _: [wake]
    )
    inside = _transaction(commands)
    assert receipt in inside and evidence in inside and wake not in inside
    named = {k for c in inside for k in command_keys(c)}
    assert {slot(k) for k in named} == {slot(keys.state(task_id))}
    # ...and the store's WATCHed keys too
    watched = [keys.state(task_id), keys.ctr(task_id), keys.lease(task_id), keys.quarantine(task_id)]
    assert {slot(k) for k in [*watched, keys.inbox(task_id), keys.ops(task_id)]} == {
        slot(keys.state(task_id))
    }


@pytest.mark.parametrize("task_id", TASKS)
def test_a_lease_in_a_batch_names_only_its_tasks_slot(task_id: str) -> None:
    """The lease rides in the task's batches and inside its transaction (D38): a pinned batch must
    read its keys, not the function's name, or it would send it to another node."""
    leases = Leases(object(), owner="w-1")  # type: ignore[arg-type]  # builds commands only
    held = Held(Lease(task_id, "w-1", 1, 1_000))
    for batched in (leases.acquire_command(task_id), leases.release_inside(held)):
        assert command_keys(batched) and {slot(k) for k in command_keys(batched)} == {
            slot(keys.state(task_id))
        }


@pytest.mark.parametrize("task_id", TASKS)
def test_every_script_and_downstream_transaction_names_keys_of_one_slot(task_id: str) -> None:
    op = f"REFUND:{task_id}:v1"
    groups = {
        "lease functions": [keys.lease(task_id), keys.fence(task_id)],
        "action log begin": [keys.ops(task_id), keys.lease(task_id)],
        "bank refund": [
            bank.entry_key(op),
            bank.fence_key(task_id),
            bank.faults_key(task_id),
            bank.LEDGER,
        ],
        "supplier register": [
            suppliers_keys.call_key(op),
            suppliers_keys.undo_key(op),
            suppliers_keys.master_key("S-0123456789abcdef"),
            suppliers_keys.fence_key(task_id),
            suppliers_keys.faults_key(task_id),
            suppliers_keys.LOG,
        ],
    }
    for name, named in groups.items():
        assert len({slot(k) for k in named}) == 1, name
