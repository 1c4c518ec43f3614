"""A task's keys restored from its log records on a real Redis (state/restore.py, D70): what a
change and the action log put on the outbox gives the task back byte for byte, forward only, and a
record that does not verify is refused with nothing written."""

from __future__ import annotations

import base64
from datetime import UTC, datetime

import pytest
import redis
from helpers import bump_attempts, new_checkpoint

from wakeful.authority import backup
from wakeful.core.errors import TaskQuarantined
from wakeful.core.settings import Settings
from wakeful.schemas.changelog import ActionRecord, LogItem, QuarantineRecord
from wakeful.schemas.logs import ActionStatus, OutboxRecord
from wakeful.state import acl, keys
from wakeful.state.actions import ActionLog
from wakeful.state.lease import Leases
from wakeful.state.outbox import Outbox
from wakeful.state.rebuild import Fold, fence_floor
from wakeful.state.restore import Restorer
from wakeful.state.store import Store

pytestmark = pytest.mark.timeout(60)
KINDS: dict[bytes, type[LogItem]] = {b"a": ActionRecord, b"q": QuarantineRecord}


def outbox_items(admin: redis.Redis, task_id: str) -> list[LogItem]:
    """The task's records on its outbox, as the relay would publish them, in commit order."""
    entries: list[tuple[bytes, dict[bytes, bytes]]] = admin.xrange(keys.outbox(task_id))  # type: ignore[assignment]
    return [KINDS.get(f.get(b"k", b""), OutboxRecord).decode(f[b"r"]) for _, f in entries]


def task_keys(admin: redis.Redis, task_id: str) -> dict[str, object]:
    return {
        "state": admin.get(keys.state(task_id)),
        "ctr": admin.xrevrange(keys.ctr(task_id), count=1)[0][0],  # type: ignore[index]
        "inbox": admin.smembers(keys.inbox(task_id)),
        "ops": admin.hgetall(keys.ops(task_id)),
    }


# Every key these tests' tasks may have (a SCAN of a long-used Redis would take seconds).
KINDS_OF_KEY = (
    keys.state,
    keys.ctr,
    keys.lease,
    keys.fence,
    keys.inbox,
    keys.outbox,
    keys.ops,
    keys.quarantine,
)


def forget(admin: redis.Redis, task_id: str) -> None:
    admin.delete(*(name(task_id) for name in KINDS_OF_KEY))


def held(admin: redis.Redis, task_id: str) -> int:
    return int(admin.exists(*(name(task_id) for name in KINDS_OF_KEY)))


@pytest.fixture()
def admin(settings: Settings, redis_url: str) -> redis.Redis:
    return acl.connect(settings, "admin")


def lived(gate_store: Store, executor_store: Store, leases: Leases, settings: Settings) -> str:
    """A task created, moved twice under a lease, with an intent and then its outcome recorded."""
    task_id = gate_store.create(new_checkpoint(), "create").checkpoint.task_id
    lease = leases.acquire(task_id)
    executor_store.transition(task_id, None, "step-1", bump_attempts, lease=lease)
    actions = ActionLog(acl.connect(settings, "executor"))
    begun = actions.begin(task_id, f"REFUND:{task_id}:v1", lease.fence, lease.token, tool="refund", args={})
    actions.complete(task_id, f"REFUND:{task_id}:v1", lease.fence, {"ledger_entry": "L-1"}, begun.entry)
    executor_store.transition(task_id, None, "step-2", bump_attempts, lease=lease)
    leases.release(lease)
    return task_id


def test_a_lost_task_comes_back_from_its_records_byte_for_byte(
    admin: redis.Redis, gate_store: Store, executor_store: Store, leases: Leases, settings: Settings
) -> None:
    task_id = lived(gate_store, executor_store, leases, settings)
    before, items = task_keys(admin, task_id), outbox_items(admin, task_id)
    kinds = [type(i).__name__ for i in items]
    assert kinds == ["OutboxRecord", "OutboxRecord", "ActionRecord", "ActionRecord", "OutboxRecord"]
    fence = int(admin.get(keys.fence(task_id)) or 0)
    forget(admin, task_id)
    fold = Fold()
    fold.add(items)
    now = datetime.now(UTC)
    done = Restorer(admin, gate_store.sealer, lambda _cp: False, now).restore(list(fold.tasks.values()))
    assert done.restored == [task_id] and not done.failed
    assert task_keys(admin, task_id) == before
    assert int(admin.get(keys.fence(task_id)) or 0) >= max(fence + 1, fence_floor(now))
    # a lease after the restore outranks every earlier one, and its token (written by Lua) is its own
    lease = leases.acquire(task_id)
    assert lease.fence > fence_floor(now) and leases.extend(lease) and leases.release(lease)
    assert gate_store.load(task_id).state_version == 3
    again = Restorer(admin, gate_store.sealer, lambda _cp: False, datetime.now(UTC)).restore(
        list(fold.tasks.values())
    )
    assert again.restored == [] and task_id in again.left  # safe to run twice


def test_restoring_never_moves_a_task_back(
    admin: redis.Redis, gate_store: Store, executor_store: Store, leases: Leases, settings: Settings
) -> None:
    task_id = lived(gate_store, executor_store, leases, settings)
    fold = Fold()
    fold.add(
        [
            i
            for i in outbox_items(admin, task_id)
            if not (isinstance(i, OutboxRecord) and i.state_version == 3)
        ]
    )
    done = Restorer(admin, gate_store.sealer, lambda _cp: False, datetime.now(UTC)).restore(
        list(fold.tasks.values())
    )
    assert done.restored == [] and "version 3" in done.left[task_id]
    assert gate_store.load(task_id).state_version == 3


def test_a_record_whose_checkpoint_does_not_verify_is_refused_and_nothing_written(
    admin: redis.Redis, gate_store: Store, executor_store: Store, leases: Leases, settings: Settings
) -> None:
    task_id = lived(gate_store, executor_store, leases, settings)
    other = lived(gate_store, executor_store, leases, settings)
    items = outbox_items(admin, task_id)
    blob = bytearray(base64.b64decode(items[-1].sealed))  # type: ignore[union-attr]
    blob[-1] ^= 1
    edited = items[-1].model_copy(update={"sealed": base64.b64encode(bytes(blob)).decode()})
    moved = outbox_items(admin, other)[-1]  # another task's valid checkpoint, under this task's record
    misplaced = items[-1].model_copy(update={"sealed": moved.sealed})  # type: ignore[union-attr]
    for forged in (edited, misplaced):
        forget(admin, task_id)
        fold = Fold()
        fold.add([*items[:-1], forged])
        done = Restorer(admin, gate_store.sealer, lambda _cp: False, datetime.now(UTC)).restore(
            list(fold.tasks.values())
        )
        assert done.restored == [] and "does not verify" in done.failed[task_id]
        assert held(admin, task_id) == 0


def test_a_quarantined_task_stays_quarantined(
    admin: redis.Redis, gate_store: Store, executor_store: Store, leases: Leases, settings: Settings
) -> None:
    task_id = lived(gate_store, executor_store, leases, settings)
    gate_store.quarantine(task_id, "incompatible", "a test")
    items = outbox_items(admin, task_id)
    assert isinstance(items[-1], QuarantineRecord)
    (pending,), _ = Outbox(admin).read([task_id])
    assert len(pending.records) == 6 and len(pending.changes) == 3  # the relay indexes changes only
    forget(admin, task_id)
    fold = Fold()
    fold.add(items)
    done = Restorer(admin, gate_store.sealer, lambda _cp: True, datetime.now(UTC)).restore(
        list(fold.tasks.values())
    )
    assert done.restored == [task_id] and done.woken == []  # an open task is woken, unless quarantined
    with pytest.raises(TaskQuarantined):
        gate_store.load(task_id)


def test_an_intent_in_flight_comes_back_in_flight(
    admin: redis.Redis, gate_store: Store, leases: Leases, settings: Settings
) -> None:
    task_id = gate_store.create(new_checkpoint(), "create").checkpoint.task_id
    lease = leases.acquire(task_id)
    actions = ActionLog(acl.connect(settings, "executor"))
    admin.srem(keys.OUTBOX_DIRTY, task_id)
    begun = actions.begin(task_id, f"REFUND:{task_id}:v1", lease.fence, lease.token)
    assert admin.sismember(keys.OUTBOX_DIRTY, task_id)  # the relay publishes it without a change
    admin.srem(keys.OUTBOX_DIRTY, task_id)
    actions.attempted(begun.entry, lease.fence, attempts=1, reason="away")
    assert admin.sismember(keys.OUTBOX_DIRTY, task_id)
    items = outbox_items(admin, task_id)
    forget(admin, task_id)
    fold = Fold()
    fold.add(items)
    Restorer(admin, gate_store.sealer, lambda _cp: False, datetime.now(UTC)).restore(
        list(fold.tasks.values())
    )
    entry = ActionLog(admin).lookup(task_id, f"REFUND:{task_id}:v1")
    assert entry is not None and entry.status is ActionStatus.IN_FLIGHT and entry.attempts == 1


def test_an_authority_copy_gives_back_every_kind_of_key_and_only_authority_keys(
    admin: redis.Redis, unique: str
) -> None:
    base = f"wk:authority:test-{unique}"
    names = [f"{base}:{kind}" for kind in ("s", "h", "set", "z", "l", "x")]
    admin.set(f"{base}:s", b"\x00raw")
    admin.hset(f"{base}:h", mapping={"a": "1", "b": "2"})
    admin.sadd(f"{base}:set", "x", "y")
    admin.zadd(f"{base}:z", {"m": 1.5})
    admin.rpush(f"{base}:l", "1", "2")
    admin.xadd(f"{base}:x", {"f": "v"}, id="5-1")
    mine = {k: v for k, v in backup.copy(admin).items() if k.startswith(base)}
    assert len(mine) == 6
    admin.delete(*names)
    planted = {**mine, f"wk:{{t-{unique}}}:state": mine[f"{base}:s"]}  # a copy may name authority only
    written, left = backup.put_back(admin, planted)
    try:
        assert sorted(written) == sorted(mine) and left == [f"wk:{{t-{unique}}}:state"]
        assert not admin.exists(f"wk:{{t-{unique}}}:state")
        again = backup.copy(admin)
        assert {name: again[name] for name in mine} == mine  # every kind, exactly as it was
        assert backup.put_back(admin, mine) == ([], sorted(mine))  # Redis holds them: left as they are
        admin.hdel(f"{base}:h", "b")
        admin.hset(f"{base}:h", "c", "3")  # written since the loss: it stands, the lost field comes back
        assert backup.put_back(admin, mine)[0] == [f"{base}:h"]
        assert admin.hgetall(f"{base}:h") == {b"a": b"1", b"b": b"2", b"c": b"3"}
    finally:
        admin.delete(*names)
