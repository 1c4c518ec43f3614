"""Progress in real Redis: no lost update, no edited, rolled-back or misplaced record accepted, no
write from a worker that lost its lease, one transition per message id."""

from __future__ import annotations

import multiprocessing
import shutil
import subprocess
import threading
import time
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
import redis
from helpers import bump_attempts, new_checkpoint, race_transitions, raw_get, redis_env, set_stage

from wakeful.consumers.kafka import wiring
from wakeful.core import secrets
from wakeful.core.errors import (
    IllegalTransition,
    KeyringError,
    LeaseBusy,
    LeaseLost,
    MisplacedState,
    RollbackDetected,
    StaleVersion,
    TamperedState,
    TaskQuarantined,
)
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.examples.refund import Stage
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.state import acl, first_step, keys
from wakeful.state.lease import Leases
from wakeful.state.seal import Keyring, Sealer
from wakeful.state.store import Keep, Store


def created(store: Store, cp: Checkpoint | None = None) -> Checkpoint:
    cp = cp or new_checkpoint()
    return store.create(cp, f"create-{cp.task_id}").checkpoint


def redis_cli(settings: Settings, *args: str, stdin: bytes | None = None) -> str:
    """Run Debian's redis-cli as the admin user, the way an operator (or an attacker) would."""
    cli = shutil.which("redis-cli")
    assert cli, "redis-cli is missing: run `bash scripts/setup`"
    password = secrets.load(settings, "admin", "redis")["password"]
    argv = [
        cli,
        "--no-auth-warning",
        "-u",
        settings.redis_url,
        *(["-c"] if settings.redis_cluster else []),  # follow a key to the node that serves its slot
        "--user",
        acl.user_name("admin"),
        "--pass",
        password,
    ]
    result = subprocess.run(
        [*argv, *(["-x"] if stdin is not None else []), *args],
        input=stdin,
        capture_output=True,
        timeout=10,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.decode()


RACE_LEASE_MS = 120_000


def test_64_concurrent_writers_lose_no_update(settings: Settings, gate_store: Store, leases: Leases) -> None:
    cp = created(gate_store)
    # 8 processes x 8 threads racing inside one lease. Its ttl outlasts spawning them on a loaded
    # machine: a lease that lapsed first would fail every writer, and test nothing of the race.
    lease = Leases(leases.client, ttl_ms=RACE_LEASE_MS).acquire(cp.task_id)
    with multiprocessing.get_context("spawn").Pool(8) as pool:
        race = (cp.task_id, lease.owner, lease.fence, 8, redis_env(settings))
        batches = pool.starmap(race_transitions, [race] * 8)
    results = [r for batch in batches for r in batch]
    applied = [lost for ok, lost in results if ok]
    final = gate_store.load(cp.task_id)
    assert len(results) == 64 and applied, "no writer succeeded"
    assert final.state_version == 1 + len(applied)
    assert final.execution.attempts == len(applied)


def test_64_workers_with_their_own_leases_serialise_and_lose_no_update(
    settings: Settings, gate_store: Store
) -> None:
    cp = created(gate_store)
    applied = []

    def worker(i: int) -> None:
        leases = wiring.leases_for(settings, "executor", owner=f"worker-{i}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                lease = leases.acquire(cp.task_id)
            except LeaseBusy:
                time.sleep(0.005)
                continue
            try:
                gate_store.transition(cp.task_id, None, f"w-{i}", bump_attempts, lease=lease)
                applied.append(i)
            finally:
                leases.release(lease)
            return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = gate_store.load(cp.task_id)
    assert len(applied) == 64
    assert final.state_version == 65 and final.execution.attempts == 64


def test_duplicate_message_id_causes_no_second_transition(gate_store: Store, leases: Leases) -> None:
    cp = created(gate_store)
    lease = leases.acquire(cp.task_id)
    first = gate_store.transition(cp.task_id, 1, "approve-1", set_stage(Stage.READY), lease=lease)
    again = gate_store.transition(cp.task_id, 2, "approve-1", bump_attempts, lease=lease)
    assert (first.status, again.status) == ("applied", "duplicate")
    final = gate_store.load(cp.task_id)
    assert final.state_version == 2 and final.execution.attempts == 0
    assert gate_store.create(cp, f"create-{cp.task_id}").status == "duplicate"


def test_a_change_that_keeps_the_task_writes_nothing_and_leaves_its_message_id_free(
    gate_store: Store, leases: Leases, redis_client: redis.Redis
) -> None:
    cp = created(gate_store)
    lease = leases.acquire(cp.task_id)
    seen: list[int] = []

    def keep_once_moved(current: Checkpoint) -> Checkpoint | Keep:
        seen.append(current.state_version)
        return Keep() if current.state_version > 1 else bump_attempts(current)

    def before(new: Checkpoint) -> list[tuple[Any, ...]]:
        return [("ZADD", keys.DEADLINES, 1, f"{new.task_id}|1")]

    def also(new: Checkpoint) -> list[tuple[Any, ...]]:
        return [("HSET", keys.evidence(new.task_id), "kept", "no")]

    with gate_store.pinned(cp.task_id) as pinned:
        first = pinned.batch(first_step.reads(cp.task_id, "judged"))  # WATCH and read, as the gate does
        gate_store.transition(cp.task_id, 1, "between", bump_attempts, lease=lease)  # another connection
        out = gate_store.transition(
            cp.task_id, None, "judged", keep_once_moved, lease=lease, pinned=pinned, first=first, also=also
        )
    assert seen == [1, 2]  # judged on the old read, whose EXEC lost, then again on the task as it is
    assert (out.status, out.lost_races, out.checkpoint.state_version) == ("kept", 1, 2)
    assert gate_store.load(cp.task_id).state_version == 2
    assert not redis_client.hexists(keys.evidence(cp.task_id), "kept")
    out = gate_store.transition(cp.task_id, None, "judged", lambda c: Keep(), lease=lease, before=before)
    assert out.status == "kept" and redis_client.zscore(keys.DEADLINES, f"{cp.task_id}|1") is None
    again = gate_store.transition(cp.task_id, 2, "judged", bump_attempts, lease=lease)
    assert (again.status, again.checkpoint.state_version) == ("applied", 3)  # the id was never spent


def test_a_write_between_the_callers_reads_and_its_transition_is_caught_and_revalidated(
    gate_store: Store, leases: Leases
) -> None:
    cp = created(gate_store)
    lease = leases.acquire(cp.task_id)
    with gate_store.pinned(cp.task_id) as pinned:
        first = pinned.batch(first_step.reads(cp.task_id, "late"))  # WATCH and read, as the gate does
        gate_store.transition(cp.task_id, 1, "between", bump_attempts, lease=lease)  # another connection
        with pytest.raises(StaleVersion):  # re-read: decided on version 1, the task is at 2
            gate_store.transition(
                cp.task_id, 1, "late", bump_attempts, lease=lease, pinned=pinned, first=first
            )
    with gate_store.pinned(cp.task_id) as pinned:
        first = pinned.batch(first_step.reads(cp.task_id, "late"))
        gate_store.transition(cp.task_id, 2, "between-2", bump_attempts, lease=lease)
        out = gate_store.transition(
            cp.task_id, None, "late", bump_attempts, lease=lease, pinned=pinned, first=first
        )
    assert (out.status, out.lost_races) == ("applied", 1)  # the EXEC on the old reads was refused
    final = gate_store.load(cp.task_id)
    assert (final.state_version, final.execution.attempts) == (4, 3)  # no update lost


def test_stale_expected_version_is_refused_and_writes_nothing(gate_store: Store, leases: Leases) -> None:
    cp = created(gate_store)
    lease = leases.acquire(cp.task_id)
    gate_store.transition(cp.task_id, 1, "m1", bump_attempts, lease=lease)
    with pytest.raises(StaleVersion) as info:
        gate_store.transition(cp.task_id, 1, "m2", bump_attempts, lease=lease)
    assert (info.value.expected, info.value.actual) == (1, 2)
    assert gate_store.load(cp.task_id).state_version == 2


def test_illegal_transition_raises_and_writes_nothing(gate_store: Store, leases: Leases) -> None:
    cp = created(gate_store)
    lease = leases.acquire(cp.task_id)
    with pytest.raises(IllegalTransition):
        gate_store.transition(cp.task_id, 1, "skip", set_stage(Stage.CLOSED), lease=lease)
    gate_store.transition(cp.task_id, 1, "ok", set_stage(Stage.READY), lease=lease)
    gate_store.transition(cp.task_id, 2, "close", set_stage(Stage.CLOSED), lease=lease)
    with pytest.raises(IllegalTransition):
        gate_store.transition(cp.task_id, 3, "reopen", set_stage(Stage.READY), lease=lease)
    final = gate_store.load(cp.task_id)
    assert final.state_version == 3 and final.stage == Stage.CLOSED


def test_worker_whose_lease_expired_cannot_write(
    settings: Settings, gate_store: Store, redis_client: redis.Redis
) -> None:
    cp = created(gate_store)
    slow = Leases(acl.connect(settings, "executor"), owner="paused-worker", ttl_ms=200)
    fast = wiring.leases_for(settings, "executor", owner="next-worker")
    stale = slow.acquire(cp.task_id)
    # Paused past its TTL (a GC pause, SIGSTOP, a slow disk): Redis has expired the lease.
    assert wait_until(lambda: redis_client.pttl(keys.lease(cp.task_id)) == -2, 30, interval=0.02), (
        "the lease never expired"
    )
    with pytest.raises(LeaseLost):
        gate_store.transition(cp.task_id, 1, "late-1", bump_attempts, lease=stale)
    fresh = fast.acquire(cp.task_id)
    assert fresh.fence > stale.fence
    gate_store.transition(cp.task_id, 1, "now", bump_attempts, lease=fresh)
    with pytest.raises(LeaseLost):
        gate_store.transition(cp.task_id, None, "late-2", bump_attempts, lease=stale)
    with pytest.raises(LeaseLost):
        slow.extend(stale)
    assert not slow.release(stale)  # releasing a lease it lost touches nothing
    final = gate_store.load(cp.task_id)
    assert final.state_version == 2 and final.execution.fence == fresh.fence


def test_flipped_byte_in_the_stored_blob_quarantines_the_task(settings: Settings, gate_store: Store) -> None:
    cp = created(gate_store)
    key = keys.state(cp.task_id)
    blob = bytearray(raw_get(acl.connect(settings, "admin"), key))
    offset = len(blob) - 20  # inside the ciphertext
    blob[offset] ^= 0x01
    redis_cli(settings, "SET", key, stdin=bytes(blob))
    with pytest.raises(TamperedState):
        gate_store.load(cp.task_id)
    with pytest.raises(TaskQuarantined):  # and it stays parked, even if the bytes were put back
        gate_store.load(cp.task_id)
    assert (gate_store.quarantine_reason(cp.task_id) or {})["reason"] == "tampered"


def test_re_encoded_copy_with_another_stage_quarantines_the_task(
    settings: Settings, gate_store: Store
) -> None:
    cp = created(gate_store)
    forged = cp.model_copy(update={"business": cp.business.model_copy(update={"stage": Stage.CLOSED})})
    # The forger knows the format and the key id, but not the key.
    kid = Keyring.load(settings.keyring).active
    forger = Sealer(Keyring({kid: b"\x00" * 32}, kid))
    redis_cli(settings, "SET", keys.state(cp.task_id), stdin=forger.seal(cp.task_id, 1, 2, forged.encode()))
    with pytest.raises(TamperedState):
        gate_store.load(cp.task_id)
    assert (gate_store.quarantine_reason(cp.task_id) or {})["reason"] == "tampered"


def test_restoring_an_older_valid_blob_is_detected_as_rollback(
    settings: Settings, gate_store: Store, leases: Leases
) -> None:
    cp = created(gate_store)
    admin = acl.connect(settings, "admin")
    old = raw_get(admin, keys.state(cp.task_id))
    lease = leases.acquire(cp.task_id)
    gate_store.transition(cp.task_id, 1, "m1", set_stage(Stage.READY), lease=lease)
    redis_cli(settings, "SET", keys.state(cp.task_id), stdin=old)
    with pytest.raises(RollbackDetected):
        gate_store.load(cp.task_id)
    assert (gate_store.quarantine_reason(cp.task_id) or {})["reason"] == "rollback"


def test_blob_copied_from_another_task_is_refused(settings: Settings, gate_store: Store) -> None:
    victim, donor = created(gate_store), created(gate_store, new_checkpoint(amount=999_999))
    admin = acl.connect(settings, "admin")
    redis_cli(settings, "SET", keys.state(victim.task_id), stdin=raw_get(admin, keys.state(donor.task_id)))
    with pytest.raises(MisplacedState):
        gate_store.load(victim.task_id)
    assert gate_store.load(donor.task_id).business.data["amount"] == 999_999


def test_rotated_key_keeps_old_blobs_readable_and_seals_new_ones_with_the_new_key(
    settings: Settings, gate_store: Store, leases: Leases
) -> None:
    cp = created(gate_store)
    old_ring = Keyring.load(settings.keyring)
    new_ring = old_ring.rotated()
    rotated = Store(gate_store.client, Sealer(new_ring), moves=gate_store.moves)
    assert rotated.load(cp.task_id).state_version == 1  # sealed with the old key, still readable
    rotated.transition(cp.task_id, 1, "m1", bump_attempts, lease=leases.acquire(cp.task_id))
    blob = raw_get(acl.connect(settings, "admin"), keys.state(cp.task_id))
    assert new_ring.active.encode() in blob[:40]
    # A worker that was never given the new key cannot read it (and says which key it lacks).
    with pytest.raises(KeyringError, match=new_ring.active):
        Store(gate_store.client, Sealer(old_ring), moves=gate_store.moves).load(cp.task_id)
    # The new key lived only in this test: park the task, so no later wake (the timer's sweep, D85)
    # meets a task no worker can read.
    gate_store.quarantine(cp.task_id, "tampered", "sealed under a key only this test held")


def test_v1_checkpoint_is_upgraded_by_its_migration_on_load(settings: Settings, gate_store: Store) -> None:
    cp = new_checkpoint()
    v1 = orjson.loads(cp.encode())
    v1["business"].update(v1["business"].pop("data"))  # v1 and v2 held the refund's fields here
    v1["schema_version"] = 1
    v1["security"] = {"tenant": "acme", "principal": "alice"}
    v1["versions"]["schema"] = 1
    v1["versions"]["state_version"] = 1
    sealed = gate_store.sealer.seal(cp.task_id, 1, 1, orjson.dumps(v1))
    admin = acl.connect(settings, "admin")
    admin.set(keys.state(cp.task_id), sealed)
    admin.xadd(keys.ctr(cp.task_id), {"v": 1}, id="1-1")
    loaded = gate_store.load(cp.task_id)
    assert loaded.schema_version == Checkpoint.SCHEMA and loaded.security.principal_ref == "principal:alice"
    assert loaded.business.data == {"amount": 100, "currency": "EUR"}


def test_quarantine_marker_is_never_dropped_by_a_ttl(settings: Settings, gate_store: Store) -> None:
    cp = created(gate_store)
    gate_store.quarantine(cp.task_id, "operator", "frozen by hand")
    admin = acl.connect(settings, "admin")
    for key in (keys.state(cp.task_id), keys.ctr(cp.task_id), keys.quarantine(cp.task_id)):
        assert admin.pttl(key) == -1, key


def test_store_refuses_to_run_as_the_default_user(settings: Settings) -> None:
    from dataclasses import replace

    from wakeful.core.errors import PermissionRefused

    nobody = replace(settings, secrets=settings.home / "missing-secrets")
    with pytest.raises(PermissionRefused, match="WAKEFUL_ALLOW_DEFAULT_USER"):
        wiring.store_for(nobody, "gate")
    allowed = replace(nobody, allow_default_user=True)
    client = acl.connect(allowed, "gate")
    with pytest.raises(redis.AuthenticationError):
        client.get(keys.state("anything"))  # and on the dev stack a stranger can do nothing anyway


def test_created_at_and_updated_at_are_stamped_by_the_store(gate_store: Store) -> None:
    before = datetime.now(UTC)
    cp = created(gate_store)
    assert cp.updated_at >= before and cp.state_version == 1
