"""`wakeful task purge` on the real Redis and Kafka: only finished tasks older than the retention go
(never one that waits, is parked for review or is quarantined), a dry run writes nothing, a purge
takes every key of the task, its receipts, its index entry, its correlation ids and deadlines,
leaves a tombstone on wakeful.log, and a second purge finds nothing; a purge schedule's tick runs
one purge (D114)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest
import redis
from cli_run import doc, wakeful
from confluent_kafka import Consumer, Producer
from helpers import kafka_as, new_checkpoint, set_stage, topic_marks

from wakeful.authority.schedule_store import ScheduleStore
from wakeful.consumers.kafka.producing import producer_config
from wakeful.consumers.relay.main import Relay
from wakeful.consumers.timer.schedules import Scheduler
from wakeful.core import topics
from wakeful.core.log import Log
from wakeful.core.process import wait_until
from wakeful.core.provenance import load_signer
from wakeful.core.settings import Settings
from wakeful.examples.refund import Stage
from wakeful.examples.refund import app as refund_app
from wakeful.operate import purge
from wakeful.operate.purge_schedules import PurgeSchedules
from wakeful.schemas.checkpoint import SecurityScope
from wakeful.schemas.logs import batch_items
from wakeful.schemas.tombstone import PURGE_FIELD
from wakeful.state import acl, keys
from wakeful.state.index import Index
from wakeful.state.outbox import Outbox
from wakeful.state.seal import Keyring, Sealer
from wakeful.state.store import Store
from wakeful.workflow import engine

pytestmark = pytest.mark.timeout(180)

NOW = datetime.now(UTC)
LONG_AGO = NOW - timedelta(days=60)
SIGNER = "key-upstream"


def store_at(settings: Settings, when: datetime) -> Store:
    """The gate's store with a clock at `when`: its changes are stamped then."""
    sealer = Sealer(Keyring.load(settings.keyring))
    return Store(acl.connect(settings, "gate"), sealer, moves=engine.moves(refund_app), clock=lambda: when)


def made(store: Store, tenant: str, name: str, stages: list[str], admin: redis.Redis) -> str:
    """A refund task of `tenant` moved through `stages`, each change by an outside event whose
    receipt its transaction writes (as the gate does)."""
    task_id = f"{tenant}.{name}"
    cp = new_checkpoint(task_id).model_copy(
        update={"security": SecurityScope(tenant=tenant, principal_ref="principal:alice")}
    )

    def receipt(event: str) -> Any:
        key = keys.receipt(event, task_id, key_id=SIGNER)
        return lambda _cp: [("SET", key, orjson.dumps({"status": "accepted"}), "EX", keys.RECEIPT_TTL_S)]

    store.create(cp, keys.event_identity(SIGNER, f"evt-{name}-0"), also=receipt(f"evt-{name}-0"))
    for i, stage in enumerate(stages, start=1):
        event = f"evt-{name}-{i}"
        store.transition(
            task_id,
            None,
            keys.event_identity(SIGNER, event),
            set_stage(stage),
            lease=None,
            also=receipt(event),
        )
    admin.set(keys.corr(f"corr-{name}"), keys.corr_value(tenant, task_id))  # an answered wait's
    admin.zadd(keys.DEADLINES, {f"{task_id}|{int(NOW.timestamp() * 1000) + 86_400_000}": 1})
    return task_id


@pytest.fixture()
def relay(settings: Settings) -> Iterator[Relay]:
    client = acl.connect(settings, "relay")
    producer = Producer(producer_config(settings, "relay"))
    yield Relay(
        Outbox(client),
        producer,
        Log(role="relay"),
        signer=load_signer(settings, "relay"),
        index=Index(client),
    )
    producer.flush(10)


def drained(relay: Relay, admin: redis.Redis, task_ids: list[str]) -> bool:
    relay.run_once()
    return all(admin.xlen(keys.outbox(t)) == 0 for t in task_ids)


def snapshot(admin: redis.Redis, task_ids: list[str], tenant: str) -> dict[str, Any]:
    """Every key of these tasks with its value (DUMP), and the tenant's index."""
    found: dict[str, Any] = {}
    for t in task_ids:
        for key in admin.scan_iter(match=f"wk:{{{t}}}:*", count=1000):
            found[key.decode()] = admin.dump(key)
    for key in admin.scan_iter(match=f"wk:index:{{{tenant}}}:*", count=1000):
        found[key.decode()] = admin.dump(key)
    return found


def tombstones(bootstrap: str, marks: list[Any], task_ids: set[str]) -> set[str]:
    consumer = Consumer(kafka_as(bootstrap) | {"group.id": f"purge-{uuid.uuid4().hex}"})
    consumer.assign(marks)
    found: set[str] = set()
    try:

        def read() -> bool:
            for msg in consumer.consume(500, 0.5):
                for item in batch_items(msg.value() or b""):
                    if isinstance(item, dict) and PURGE_FIELD in item and item.get("task_id") in task_ids:
                        found.add(str(item["task_id"]))
            return found == task_ids

        wait_until(read, 60, interval=0)
    finally:
        consumer.close()
    return found


def test_purge_takes_only_old_finished_tasks_leaves_a_tombstone_and_finds_nothing_twice(
    settings: Settings, kafka_bootstrap: str, relay: Relay
) -> None:
    admin = acl.connect(settings, "admin")
    tenant = f"purge{uuid.uuid4().hex[:8]}"
    old, recent = store_at(settings, LONG_AGO), store_at(settings, NOW)
    closed = [made(old, tenant, f"closed-{i}", [Stage.READY, Stage.CLOSED], admin) for i in range(3)]
    waiting = made(old, tenant, "waiting", [Stage.AWAITING_APPROVAL], admin)
    review = made(old, tenant, "review", [Stage.NEEDS_REVIEW], admin)
    marked = made(old, tenant, "marked", [Stage.READY, Stage.CLOSED], admin)
    fresh = made(recent, tenant, "fresh", [Stage.READY, Stage.CLOSED], admin)
    kept = [waiting, review, marked, fresh]
    everyone = closed + kept
    assert wait_until(lambda: drained(relay, admin, everyone), 60, interval=0.1)
    old.quarantine(marked, "tampered_state", "a test's marker")  # parked for good after it closed
    assert wait_until(lambda: drained(relay, admin, everyone), 60, interval=0.1)

    before = snapshot(admin, everyone, tenant)
    said = wakeful("task", "purge", "--before", NOW.isoformat(), "--dry-run", "--json", "--tenant", tenant)
    assert said.returncode == 0, said.stderr
    dry = doc(said)
    assert sorted(e["task_id"] for e in dry["examples"]) == sorted(closed)
    assert dry["purged"] == 3 and dry["kept"] == {"quarantined": 1}
    assert dry["correlation_ids"] == 3 and dry["deadlines"] == 3
    assert snapshot(admin, everyone, tenant) == before  # a dry run writes nothing

    marks = topic_marks(kafka_bootstrap, topics.LOG)
    done = purge.run(admin, refund_app, NOW, NOW, dry_run=False, tenant=tenant, wait_s=0)
    assert done.purged == 3 and done.keys == dry["keys"] and done.kept == dry["kept"]
    assert wait_until(lambda: drained(relay, admin, closed), 60, interval=0.1)
    assert tombstones(kafka_bootstrap, marks, set(closed)) == set(closed)

    again = purge.run(admin, refund_app, NOW, NOW, dry_run=False, tenant=tenant, wait_s=10)
    assert again.purged == 0 and again.keys == 0 and again.outboxes_dropped >= 3
    index = Index(admin)
    for t in closed:  # nothing of it answers: no key of its slot, no index entry, receipt or inbox
        assert list(admin.scan_iter(match=f"wk:{{{t}}}:*", count=1000)) == []
        assert index.task(tenant, t) is None
        assert admin.zscore(keys.index_stage(tenant, Stage.CLOSED), t) is None
        assert admin.get(keys.receipt(f"evt-{t.partition('.')[2]}-0", t, key_id=SIGNER)) is None
        assert not admin.sismember(keys.inbox(t), keys.event_identity(SIGNER, f"evt-{t.partition('.')[2]}-0"))
        assert admin.get(keys.corr(f"corr-{t.partition('.')[2]}")) is None
        assert not any(m.decode().startswith(f"{t}|") for m in admin.zrange(keys.DEADLINES, 0, -1))  # type: ignore[union-attr]
    after = snapshot(admin, kept, tenant)
    untouched = {
        k: v for k, v in before.items() if not any(f"{{{t}}}" in k for t in closed) and "index" not in k
    }
    assert {k: after.get(k) for k in untouched} == untouched
    for t in kept:
        assert index.task(tenant, t) is not None
        assert admin.get(keys.corr(f"corr-{t.partition('.')[2]}")) is not None


def test_a_purge_schedule_purges_old_finished_tasks_once_per_tick_and_no_timer_publishes_it(
    settings: Settings, relay: Relay
) -> None:
    """D114: a schedule added with --purge is run by `schedule run-purges`, not by the timers: its
    due tick purges the old finished tasks (never one that waits), once however often it is looked
    at, and the run is in the schedules' history."""
    admin = acl.connect(settings, "admin")
    tenant, mark = f"sched{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:6]
    old = store_at(settings, LONG_AGO)
    closed = [made(old, tenant, f"closed-{i}", [Stage.READY, Stage.CLOSED], admin) for i in range(2)]
    waiting = made(old, tenant, "waiting", [Stage.AWAITING_APPROVAL], admin)
    assert wait_until(lambda: drained(relay, admin, [*closed, waiting]), 60, interval=0.1)
    refused = wakeful("schedule", "add", f"x-{mark}", "--every", "1h", "--purge", "--workflow", "refund",
                      "--by", "ops-lead")  # fmt: skip
    assert refused.returncode != 0 and "--purge runs the app's retention" in refused.stderr, refused.stderr
    added = wakeful(
        "schedule", "add", f"cli-{mark}", "--every", "1d", "--purge", "--by", "ops-lead", "--json"
    )
    assert added.returncode == 0 and doc(added)["job"] == "purge", added.stderr
    assert wakeful("schedule", "delete", f"cli-{mark}", "--by", "ops-lead").returncode == 0
    # One whose first tick fell an hour ago: due now.
    name = f"nightly-{mark}"
    ScheduleStore(admin, lambda: NOW - timedelta(hours=2)).add(
        name, "every:3600", "", {}, by="ops-lead", catch_up="one", job="purge"
    )
    said: list[str] = []
    runner = PurgeSchedules(admin, refund_app, settings, said.append, wait_s=0)
    try:
        # A timer looks at it and passes it by: it signs and publishes nothing of a purge's.
        nothing: Any = None  # no producer: a timer that published a purge's tick would fail here
        timer = Scheduler(
            acl.connect(settings, "timer"), nothing, lambda _: pytest.fail("signed"), Log(role="timer")
        )
        assert timer.look() == 0
        ran = dict(runner.look())
        assert ran[name].purged >= 2 and not any(admin.exists(keys.state(t)) for t in closed), said
        assert admin.exists(keys.state(waiting))
        assert name not in dict(runner.look())  # the same tick again: claimed, run once
        history = [r for r in ScheduleStore(admin).history() if r["name"] == name]
        assert [r["action"] for r in history] == ["add", "ran"] and "purged" in history[-1]["reason"]
    finally:
        ScheduleStore(admin).delete(name, by="ops-lead")
    assert wait_until(lambda: drained(relay, admin, closed), 60, interval=0.1)
    once = wakeful("schedule", "run-purges", "--once", "--json")  # as the page runs it: nothing due now
    assert once.returncode == 0 and name not in {r["schedule"] for r in doc(once)["ran"]}, once.stderr
