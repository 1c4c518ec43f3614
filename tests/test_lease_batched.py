"""A lease that rides in a handler's own round trips (D38) holds the same guarantees as one taken
and given back on its own: reads after it are made under it, nothing read without it is judged,
and it is given back whichever way the handler ends."""

from __future__ import annotations

import pytest
import redis
from helpers import bump_attempts, new_checkpoint, raw_get, set_stage

from wakeful.consumers.kafka import wiring
from wakeful.core.errors import LeaseBusy, LeaseLost, TaskNotFound
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.examples.refund import Stage
from wakeful.state import acl, first_step, keys
from wakeful.state.lease import Held, Leases
from wakeful.state.store import Store


def test_a_busy_lease_judges_nothing_it_read(
    settings: Settings, executor_store: Store, leases: Leases, redis_client: redis.Redis
) -> None:
    cp = executor_store.create(new_checkpoint(), "create-busy").checkpoint
    old = raw_get(redis_client, keys.state(cp.task_id))
    holder = wiring.leases_for(settings, "executor", owner="the-holder")
    held = holder.acquire(cp.task_id)
    executor_store.transition(cp.task_id, 1, "m1", set_stage(Stage.READY), lease=held)
    # What a reader could see mid-write: one side of the holder's EXEC for the state, the other
    # for its counter. Under the lease it would be rollback; without it, it must not be judged.
    redis_client.set(keys.state(cp.task_id), old)
    with pytest.raises(LeaseBusy), executor_store.pinned(cp.task_id) as pinned:
        executor_store.acquire_with(leases, cp.task_id, [], pinned=pinned)
    assert executor_store.quarantine_reason(cp.task_id) is None


def test_a_lease_given_back_in_the_last_write_is_gone_and_not_released_twice(
    executor_store: Store, leases: Leases, redis_client: redis.Redis
) -> None:
    cp = executor_store.create(new_checkpoint(), "create-release").checkpoint
    with executor_store.pinned(cp.task_id) as pinned:
        lease, loaded, _, _ = executor_store.acquire_with(leases, cp.task_id, [], pinned=pinned)
    assert loaded.state_version == 1 and redis_client.exists(keys.lease(cp.task_id))
    held = Held(lease)
    outcome = executor_store.transition(cp.task_id, 1, "m1", bump_attempts, lease=lease, release=held)
    assert outcome.status == "applied" and not redis_client.exists(keys.lease(cp.task_id))
    nxt = leases.acquire(cp.task_id)  # free again, with a newer fence
    leases.finish(held)  # already given back: this must not touch the new holder's lease
    assert nxt.fence > lease.fence and redis_client.get(keys.lease(cp.task_id)) == nxt.token.encode()
    leases.release(nxt)


def test_a_lease_taken_for_a_load_that_fails_is_given_back(
    executor_store: Store, leases: Leases, redis_client: redis.Redis
) -> None:
    task_id = new_checkpoint().task_id  # never created
    with pytest.raises(TaskNotFound), executor_store.pinned(task_id) as pinned:
        executor_store.acquire_with(leases, task_id, [], pinned=pinned)
    assert not redis_client.exists(keys.lease(task_id))


def test_a_release_inside_the_close_never_deletes_a_newer_holders_lease(
    settings: Settings, executor_store: Store, leases: Leases, redis_client: redis.Redis
) -> None:
    """The close gives the lease back with a plain DEL (D49): safe only because the lease is WATCHed
    since the read that found this holder's token. A holder paused past its ttl, whose lease
    another worker took, loses its EXEC and leaves the newer lease alone."""
    cp = executor_store.create(new_checkpoint(), "create-paused").checkpoint
    slow = Leases(acl.connect(settings, "executor"), owner="paused-holder", ttl_ms=200)
    with executor_store.pinned(cp.task_id) as pinned:
        lease, _, _, watched = executor_store.acquire_with(slow, cp.task_id, [], pinned=pinned)
        first = [*watched, pinned.batch([first_step.seen(cp.task_id, "late")])[0]]
        assert wait_until(lambda: redis_client.pttl(keys.lease(cp.task_id)) == -2, 30, interval=0.02)
        newer = leases.acquire(cp.task_id)
        with pytest.raises(LeaseLost):
            executor_store.transition(
                cp.task_id,
                1,
                "late",
                bump_attempts,
                lease=lease,
                release=Held(lease),
                pinned=pinned,
                first=first,
            )
    assert redis_client.get(keys.lease(cp.task_id)) == newer.token.encode()
    assert executor_store.load(cp.task_id).state_version == 1
    leases.release(newer)
