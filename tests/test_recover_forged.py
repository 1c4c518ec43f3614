"""`wakeful recover` folds only what the relay signed, and no tombstone a purge could not have made
(D92), on a private stack (the test deletes every wakeful key of the stack it runs on).

A task waits for alice's approval, its changes on wakeful.log. Then two stolen credentials each
plant a tombstone for it:
- the relay's Kafka login and channel key (both under `secrets/relay/`): a tombstone tagged as the
  relay tags, with no log signature, and another with a signature that is not the relay's;
- the gate's Redis login: a tombstone added to the task's outbox, which the relay itself then
  signs and publishes (the gate and the executor may add to any outbox).
Redis is lost, and `wakeful recover` runs as a user runs it. Before D92 the first tombstone, tagged
by the channel key alone, dropped the task ("purged 1"): it came back from nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from helpers import BankClient, kafka_as, private_stack, role_message, run_cli

from wakeful.consumers.kafka import client as kafka_client
from wakeful.core import log_signing, topics
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.recover import run as recovery
from wakeful.schemas.logs import LOG_BATCH_HEAD, LOG_BATCH_TAIL
from wakeful.schemas.tombstone import OUTBOX_KIND, PurgeRecord, purge_record
from wakeful.state import acl, keys

SETTLE_S = 120.0
PARTITIONS = 6  # wakeful.log's, as `dev up` makes it

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with private_stack(tmp_path_factory.mktemp("forged")) as env:
        yield env | {"WAKEFUL_OUTBOX_SWEEP_S": "1", "WAKEFUL_MODEL": "rules"}


@pytest.fixture
def client(private: dict[str, str]) -> Iterator[BankClient]:
    made = BankClient(Settings.from_env(private))
    try:
        made.reset_authority()
        recovery.journal_authority(made.settings, made.admin, made.store.sealer)
        yield made
    finally:
        made.close()


def forged(task_id: str, stage: str, version: int, minutes_ago: int) -> PurgeRecord:
    """A tombstone as `wakeful task purge` writes one, for a task it would never take."""
    now = datetime.now(UTC)
    return purge_record(
        task_id=task_id,
        tenant="default",
        workflow="refund",
        stage=stage,
        state_version=version,
        last_change=now - timedelta(days=60),
        purged_at=now - timedelta(minutes=minutes_ago),
        by="admin",
        reason="closed_tasks=30 days",
    )


def publish_as_relay(settings: Settings, task_id: str, records: list[bytes], sig: bool) -> None:
    """A wakeful.log message on the task's partition, tagged with the relay's channel key and logged
    in as the relay: with no log signature, or (`sig`) with one made by a key that is not the
    relay's, under the relay's key id."""
    value = LOG_BATCH_HEAD + b",".join(records) + LOG_BATCH_TAIL
    msg = role_message(settings, "relay", topics.LOG, "", value)
    headers: list[tuple[str, str | bytes | None]] = [(str(h[0]), h[1]) for h in msg.headers() or []]
    if sig:
        kid = next(iter(log_signing.public_log_keys(settings)))
        index = log_signing.index_of(records)
        headers += [
            (log_signing.KID_HEADER, kid.encode()),
            (log_signing.INDEX_HEADER, index),
            (log_signing.SIG_HEADER, os.urandom(64)),
        ]
    producer = Producer(kafka_as(settings.kafka_bootstrap, "relay", settings))
    partition = kafka_client.partition_of(task_id, PARTITIONS)
    producer.produce(topics.LOG, value=value, headers=headers, partition=partition)
    assert producer.flush(30) == 0


def plant_in_outbox(settings: Settings, task_id: str, tomb: PurgeRecord) -> None:
    """The tombstone added to the task's outbox with the gate's Redis login, as a purge adds one."""
    gate = acl.connect(settings, "gate")
    try:
        fields = {"id": tomb.record_id, "r": tomb.encode(), "k": OUTBOX_KIND}
        gate.xadd(keys.outbox(task_id), fields)  # type: ignore[arg-type]
        gate.sadd(keys.OUTBOX_DIRTY, task_id)
    finally:
        gate.close()


def on_the_log(client: BankClient, task_id: str) -> None:
    assert wait_until(lambda: not client.admin.exists(keys.outbox(task_id)), 60)


def wipe(client: BankClient) -> None:
    """Every wakeful key deleted, as `wakeful chaos --lose-redis wipe` does."""
    names = list(client.admin.scan_iter(match=f"{keys.PREFIX}:*", count=1000))
    for start in range(0, len(names), 500):
        client.admin.delete(*names[start : start + 500])
    assert names


def test_tombstones_planted_with_the_relays_channel_key_or_a_gates_login_delete_no_waiting_task(
    private: dict[str, str], client: BankClient, tmp_path: Path
) -> None:
    settings = client.settings
    (tmp_path / "fleet").mkdir()
    fleet = Fleet(private, logs=tmp_path / "fleet").start()
    try:
        task_id, receipt = client.new_task(2500)  # over the limit: it waits for alice's approval
        assert receipt["status"] == "accepted", receipt
        assert client.wait_stage(task_id, {"awaiting_approval"}, SETTLE_S)["stage"] == "awaiting_approval"
        on_the_log(client, task_id)
        version = client.store.load(task_id).state_version
        through_gate = forged(task_id, "awaiting_approval", version, minutes_ago=3)
        plant_in_outbox(settings, task_id, through_gate)  # the relay signs this one itself
        on_the_log(client, task_id)
    finally:
        fleet.stop()
    untagged = forged(task_id, "closed", version, minutes_ago=2).encode()
    badly_signed = forged(task_id, "closed", version, minutes_ago=1).encode()
    publish_as_relay(settings, task_id, [untagged], sig=False)
    publish_as_relay(settings, task_id, [badly_signed], sig=True)

    wipe(client)
    assert wait_until(lambda: not recovery.busy(client.admin), 30, interval=0.2)
    ran = run_cli(private, "recover", "--json", timeout=300)
    report: dict[str, Any] = orjson.loads(ran.stdout)

    # The task came back as it was, waiting for its approval, and nothing took it.
    cp = client.store.load(task_id)
    assert cp.stage == "awaiting_approval" and cp.state_version == version
    assert [w.wait_for for w in cp.execution.pending_waits] == ["approval"]
    assert report["purged"] == 0 and report["failed"] == {}
    # Each refusal is named, and recover says so in its exit code and its last words.
    unsigned = report["unsigned_messages"]
    assert unsigned["count"] == 2, unsigned
    assert any("no log signature" in why for why in unsigned["named"]), unsigned
    assert any("does not verify" in why for why in unsigned["named"]), unsigned
    refused = report["tombstones_refused"]
    assert refused["count"] == 1, refused
    assert through_gate.record_id in refused["named"][0] and "the task is open" in refused["named"][0]
    assert ran.returncode == 2, ran.stderr[-2000:]
    assert "refused 2 log message(s) the relay did not sign and 1 tombstone(s)" in ran.stderr

    human = run_cli(private, "recover", timeout=300)  # run again: nothing restored, the same refusals
    assert human.returncode == 2
    assert "tombstone refused: " in human.stdout and "not signed by the relay: " in human.stdout
