"""wakeful on a real Redis Cluster: three masters of Debian's redis-server on ports of their own,
started as `wakeful dev up --redis-cluster` starts them. The pipeline's core flows (imported from
test_pipeline.py, run here against this module's cluster-backed fixtures) and a small `wakeful
chaos` run lose no task and book no effect twice (docs/decisions.md D40). That every transaction
and script wakeful sends names keys of one slot only is checked with no server at all, in
tests/unit/test_cluster_slots.py."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import pytest
import redis
from helpers import CHAOS_S, bump_attempts, chaos_report, command, new_checkpoint, start_fleet
from test_pipeline import LEASE_TTL_MS

from wakeful.consumers.kafka import wiring
from wakeful.core import process, secrets
from wakeful.core.retry import SlotMoved
from wakeful.core.settings import Settings
from wakeful.devstack import kafka, redis_cluster
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.state import acl, keys, library
from wakeful.state.lease import Leases
from wakeful.state.pinned import CrossSlot, Pinned, node_of, slot
from wakeful.state.store import Store


def _cluster_port(base: int) -> int:
    """A WAKEFUL_REDIS_PORT whose three cluster ports, and their bus ports, are free now."""
    for start in range(base + 10, base + 400, 4):
        wanted = [start + n for n in (1, 2, 3)]
        if all(process.port_free(p) and process.port_free(p + 10000) for p in wanted):
            return start
    raise RuntimeError(f"no free ports for a Redis Cluster above {base}")


@pytest.fixture(scope="module")
def cluster_env() -> dict[str, str]:
    base = Settings.from_env()
    return {
        **os.environ,
        "WAKEFUL_REDIS_CLUSTER": "1",
        "WAKEFUL_REDIS_PORT": str(_cluster_port(base.redis_port)),
    }


@pytest.fixture(scope="module")
def settings(cluster_env: dict[str, str]) -> Iterator[Settings]:
    """This module's stack: the shared Kafka, and a Redis Cluster of its own."""
    clustered = Settings.from_env(cluster_env)
    redis_cluster.start(clustered, lambda line: None)
    yield clustered
    redis_cluster.stop(clustered)


@pytest.fixture(scope="module")
def kafka_bootstrap(settings: Settings) -> str:
    assert kafka.healthy(settings, timeout=5.0), f"Kafka is not reachable at {settings.kafka_bootstrap}"
    return settings.kafka_bootstrap


@pytest.fixture(scope="module")
def redis_url(settings: Settings) -> str:
    assert redis_cluster.healthy(settings)
    return settings.redis_url


@pytest.fixture(scope="module")
def gate_store(settings: Settings) -> Store:
    return wiring.store_for(settings, "gate")


@pytest.fixture(scope="module")
def leases(settings: Settings) -> Leases:
    return wiring.leases_for(settings, "executor")


@pytest.fixture()
def redis_client(settings: Settings) -> Iterator[redis.Redis]:
    client = acl.connect(settings, "admin")
    yield client
    client.close()


@pytest.fixture(scope="module")
def workers(client: Client, cluster_env: dict[str, str]) -> Iterator[Fleet]:
    fleet = start_fleet(client, model="gullible", lease_ttl_ms=LEASE_TTL_MS, env=cluster_env)
    yield fleet
    fleet.stop()


# ---- on the cluster ---------------------------------------------------------------------------


def test_a_key_of_another_slot_inside_multi_is_refused_before_anything_is_sent(settings: Settings) -> None:
    client = acl.connect(settings, "admin")
    home, other = (
        "t-home-0001",
        next(
            f"t-other-{n}"
            for n in range(100)
            if slot(keys.state(f"t-other-{n}")) != slot(keys.state("t-home-0001"))
        ),
    )
    with Pinned(client, keys.state(home)) as pinned, pytest.raises(CrossSlot):
        pinned.batch(
            [
                ("MULTI",),
                ("SET", keys.quarantine(home), b"x"),
                ("SET", keys.quarantine(other), b"x"),
                ("EXEC",),
            ]
        )
    assert client.exists(keys.quarantine(home), keys.quarantine(other)) == 0
    # outside MULTI a read of another node is sent there, and answers in its place
    client.set(keys.quarantine(other), b"seen")
    with Pinned(client, keys.state(home)) as pinned:
        assert pinned.batch([("GET", keys.quarantine(home)), ("GET", keys.quarantine(other))]) == [
            None,
            b"seen",
        ]
    client.delete(keys.quarantine(other))
    client.close()


def _migrate_slot(settings: Settings, key: str, ports: Sequence[int], to: int | None = None) -> None:
    """Move `key`'s slot, with its keys, to the master on port `to` (another one if None) behind
    every client's back, the way `redis-cli --cluster reshard` does: IMPORTING, MIGRATING,
    MIGRATE, then SETSLOT NODE on every master."""
    user = secrets.load(settings, "admin", "redis")
    nodes = {port: redis_cluster.node_admin(settings, port) for port in ports}
    n_slot = slot(key)
    ids = {port: command(r, "CLUSTER", "MYID").decode() for port, r in nodes.items()}
    source = next(port for port, r in nodes.items() if command(r, "CLUSTER", "COUNTKEYSINSLOT", n_slot))
    target = to if to is not None else next(port for port in ports if port != source)
    command(nodes[target], "CLUSTER", "SETSLOT", n_slot, "IMPORTING", ids[source])
    command(nodes[source], "CLUSTER", "SETSLOT", n_slot, "MIGRATING", ids[target])
    moving = command(nodes[source], "CLUSTER", "GETKEYSINSLOT", n_slot, 100)
    command(
        nodes[source],
        *("MIGRATE", "127.0.0.1", target, "", 0, 5000, "AUTH2", user["user"], user["password"], "KEYS"),
        *moving,
    )
    for r in nodes.values():
        try:
            command(r, "CLUSTER", "SETSLOT", n_slot, "NODE", ids[target])
        except redis.ResponseError as exc:
            # A master that gave up its last slot has turned into a replica of the one that took
            # it (cluster-allow-replica-migration): it follows that master now.
            assert "only with masters" in str(exc), exc
    for r in nodes.values():
        r.close()


def test_a_transition_whose_slot_moved_is_retried_on_the_new_node_not_dead_lettered(
    settings: Settings,
) -> None:
    """A reshard while roles run: the pinned batch meets MOVED on the slot's old node. That is a
    SlotMoved (a Retry, so the runner tries the message again rather than dead-letter it), and the
    client's slot map then names the new node, where the next attempt applies."""
    store, leases = wiring.store_for(settings, "gate"), wiring.leases_for(settings, "executor")
    cp = store.create(new_checkpoint(), "create-moved").checkpoint
    lease = leases.acquire(cp.task_id)
    before = node_of(store.client, keys.state(cp.task_id)).name  # type: ignore[arg-type]  # a cluster here
    _migrate_slot(settings, keys.state(cp.task_id), settings.redis_cluster_ports)
    with pytest.raises(SlotMoved):
        store.transition(cp.task_id, 1, "bump-after-move", bump_attempts, lease=lease)
    assert node_of(store.client, keys.state(cp.task_id)).name != before  # type: ignore[arg-type]
    applied = store.transition(cp.task_id, 1, "bump-after-move", bump_attempts, lease=lease)
    assert (applied.status, applied.checkpoint.state_version, applied.checkpoint.execution.attempts) == (
        "applied",
        2,
        cp.execution.attempts + 1,
    )
    assert store.load(cp.task_id).state_version == 2
    leases.release(lease)


def test_a_function_called_after_its_slot_moved_runs_once_on_the_new_node(settings: Settings) -> None:
    """A lone FCALL goes out on a raw connection; a MOVED reply (nothing ran) hands it to the
    cluster client, which follows the redirect: the caller sees the result, not the reshard."""
    store, leases = wiring.store_for(settings, "gate"), wiring.leases_for(settings, "executor")
    task_id = store.create(new_checkpoint(), "create-fcall-moved").checkpoint.task_id
    _migrate_slot(settings, keys.lease(task_id), settings.redis_cluster_ports)
    lease = leases.acquire(task_id)  # the client's map still names the old node
    assert lease.fence == 1 and leases.release(lease)


def _joined(settings: Settings, ports: Sequence[int]) -> bool:
    """Every node lists every other one, connected, and serves the cluster (cluster_state:ok)."""
    for port in ports:
        with redis_cluster.node_admin(settings, port) as r:
            lines = command(r, "CLUSTER", "NODES").decode().splitlines()
        if len(lines) != len(ports) or not all(line.split()[7] == "connected" for line in lines):
            return False
        if redis_cluster.cluster_info(settings, port).get("cluster_state") != "ok":
            return False
    return True


def test_a_slot_resharded_onto_a_master_that_just_joined_is_followed_there(settings: Settings) -> None:
    """Scale-out itself: a master joins the cluster and a task's slot moves onto it. The roles'
    client first hears of that node in the MOVED reply, and the retry reaches it there."""
    port = next(
        p
        for p in range(settings.redis_port + 4, settings.redis_port + 400)
        if process.port_free(p) and process.port_free(p + 10000)
    )
    originals = settings.redis_cluster_ports
    redis_cluster.start_node(settings, port, lambda _line: None)
    ports = [*originals, port]
    moved_slot: int | None = None
    try:
        with redis_cluster.node_admin(settings, originals[0]) as first:
            command(first, "CLUSTER", "MEET", "127.0.0.1", port)
        assert process.wait_until(lambda: _joined(settings, ports), 30), "the new master never joined"
        with redis_cluster.node_admin(settings, port) as new:
            library.load(new, settings)
        store, leases = wiring.store_for(settings, "gate"), wiring.leases_for(settings, "executor")
        cp = store.create(new_checkpoint(), "create-on-new-master").checkpoint
        moved_slot = slot(keys.state(cp.task_id))
        lease = leases.acquire(cp.task_id)
        _migrate_slot(settings, keys.state(cp.task_id), ports, to=port)
        with pytest.raises(SlotMoved):
            store.transition(cp.task_id, 1, "bump-on-new-master", bump_attempts, lease=lease)
        applied = store.transition(cp.task_id, 1, "bump-on-new-master", bump_attempts, lease=lease)
        assert (applied.status, applied.checkpoint.state_version) == ("applied", 2)
        assert node_of(store.client, keys.state(cp.task_id)).port == port  # type: ignore[arg-type]
        assert leases.release(lease)
    finally:  # leave the cluster as the module's other tests found it, whatever failed above
        with redis_cluster.node_admin(settings, port) as new:
            new_id = command(new, "CLUSTER", "MYID").decode()
            if moved_slot is not None and command(new, "CLUSTER", "COUNTKEYSINSLOT", moved_slot):
                _migrate_slot(settings, keys.state(cp.task_id), ports, to=originals[0])  # hand it back
        for other in originals:
            with redis_cluster.node_admin(settings, other) as r:
                if moved_slot is not None:
                    command(r, "CLUSTER", "SETSLOT", moved_slot, "STABLE")
                command(r, "CLUSTER", "FORGET", new_id)
        redis_cluster.stop_node(settings, port)


@pytest.mark.timeout(CHAOS_S + 60)  # above the round's own bound
def test_random_kills_on_a_redis_cluster_lose_no_task_and_duplicate_no_effect(
    settings: Settings, cluster_env: dict[str, str], kafka_bootstrap: str
) -> None:
    report = chaos_report("--tasks", "20", "--kills", "3", "--seed", "11", env=cluster_env)
    assert report["ok"] and report["kills"] == 3
    assert (report["lost"], report["duplicate_effects"], report["misapplied_events"]) == (0, 0, 0)
    assert report["stages"] == {"closed": 20} and report["effects"] == 20


# ---- the pipeline's core flows, and memory's store, on the cluster ------------------------------

# Imported last, so they run after the chaos run: its fleet and this module's `workers` may not
# meet (one fleet per state dir). Collected here, they run against this module's fixtures. Memory's:
# each subject's records, and each evidence document, live under a hash tag of their own; the write
# door's function, a status change's compare-and-swap, the scans of the operator's commands and a
# document's forget all go through the cluster.
from test_memory_store import (  # noqa: E402, F401
    test_a_document_is_stored_once_and_forgotten_with_every_excerpt_of_it,
    test_a_status_moves_only_from_the_statuses_its_command_names,
    test_the_read_door_reads_only_records_filed_under_their_own_tenant_and_subject,
    test_the_write_door_makes_room_by_dropping_expired_and_revoked_records,
    test_the_write_door_writes_once_and_refuses_past_a_subjects_limit_with_a_reason,
)
from test_pipeline import (  # noqa: E402, F401
    test_amended_task_rejects_its_stale_approval,
    test_instruction_planted_in_evidence_is_blocked_into_needs_review,
    test_no_duplicate_refund_when_executor_dies_after_downstream_call,
    test_passed_deadline_escalates,
    test_right_approval_runs_the_task_once,
    test_same_event_delivered_ten_times_causes_one_transition,
    test_task_that_needs_approval_is_refused_before_approval,
)

# ---- the store's checks, on the cluster ---------------------------------------------------------
# The integrity and CAS tests of test_store.py against this module's cluster-backed store: the
# tampering goes through `redis-cli -c`, as an operator of a cluster would; the 64-writer races
# write through the cluster too (their writer processes are told its port).
from test_store import (  # noqa: E402, F401
    test_64_concurrent_writers_lose_no_update,
    test_64_workers_with_their_own_leases_serialise_and_lose_no_update,
    test_a_write_between_the_callers_reads_and_its_transition_is_caught_and_revalidated,
    test_blob_copied_from_another_task_is_refused,
    test_created_at_and_updated_at_are_stamped_by_the_store,
    test_duplicate_message_id_causes_no_second_transition,
    test_flipped_byte_in_the_stored_blob_quarantines_the_task,
    test_illegal_transition_raises_and_writes_nothing,
    test_quarantine_marker_is_never_dropped_by_a_ttl,
    test_re_encoded_copy_with_another_stage_quarantines_the_task,
    test_restoring_an_older_valid_blob_is_detected_as_rollback,
    test_rotated_key_keeps_old_blobs_readable_and_seals_new_ones_with_the_new_key,
    test_stale_expected_version_is_refused_and_writes_nothing,
    test_v1_checkpoint_is_upgraded_by_its_migration_on_load,
    test_worker_whose_lease_expired_cannot_write,
)
