"""The resume path: what a task meets when it wakes after hours or days. Stale, reordered,
tampered and revoked inputs are refused with a recorded reason; changed policy follows its
declared rule; paused workers are fenced off; server restarts lose nothing."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
import release_apps
from confluent_kafka import Producer
from helpers import (
    BankClient,
    RecordedLog,
    command,
    deliver_under,
    executor_for,
    kafka_as,
    log_records,
    process_paused,
    raw_get,
    refund_proposal,
    role_message,
    start_fleet,
    topic_marks,
    wait_dead_letter,
    wait_logged,
)

from wakeful.consumers.gate.main import Gate
from wakeful.consumers.kafka import wiring
from wakeful.consumers.kafka.runner import Runner
from wakeful.core import provenance, topics
from wakeful.core.errors import LeaseLost
from wakeful.core.log import Log
from wakeful.core.process import wait_until
from wakeful.core.retry import Retry
from wakeful.core.settings import Settings
from wakeful.devstack import kafka, redis_server
from wakeful.devstack.fleet import Fleet
from wakeful.examples import bank
from wakeful.examples.refund import Stage
from wakeful.examples.refund import app as refund_app
from wakeful.operate.client import REQUESTER
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.schemas.events import Envelope
from wakeful.sdk import App
from wakeful.state import keys

LEASE_TTL_MS = 1500


@pytest.fixture(scope="module")
def fleet(client: BankClient) -> Iterator[Fleet]:
    # Supervised as `wakeful worker all` runs them: across a broker restart a role whose Kafka client
    # will not close gives up and asks to be started again (runner.Runner._replace_client).
    fleet = start_fleet(client, lease_ttl_ms=LEASE_TTL_MS, restart_failed=True)
    yield fleet
    fleet.stop()


def test_same_approval_delivered_twice_pays_once(client: BankClient, fleet: Fleet) -> None:
    task_id, _ = client.new_task(2500)
    approval = sign_event(client.signer("alice"), events.APPROVE, {"version": 1}, task_id=task_id)
    client.publisher.publish_many([approval, approval])
    shown = client.wait_settled(task_id)
    assert shown["stage"] == "closed" and len(shown["ledger"]) == 1


def test_events_out_of_order_are_refused_then_the_right_order_applies(
    client: BankClient, fleet: Fleet
) -> None:
    early_id = f"t-early-{os.urandom(4).hex()}"
    early = client.send("alice", events.APPROVE, {"version": 1}, task_id=early_id)  # before its task exists
    assert client.receipt(early.event_id, early_id, key_id=early.key_id)["reason"] == f"no task {early_id}"

    task_id, _ = client.new_task(2500)
    ahead = client.approve(task_id, "alice", 2)  # approves a version the amendment has not made yet
    assert ahead["reason"] == "approval is for version 2, task is now version 1"
    assert client.amend(task_id, 3000)["version"] == 2
    assert client.approve(task_id, "alice", 2)["status"] == "accepted"
    assert [e["amount"] for e in client.wait_settled(task_id)["ledger"]] == [3000]


def test_approve_amend_then_the_old_approval_is_refused(
    client: BankClient, fleet: Fleet, kafka_bootstrap: str
) -> None:
    fleet.stop_role("executor")  # the approved v1 must not run before the amendment lands
    since = topic_marks(kafka_bootstrap, topics.DLQ)
    try:
        task_id, _ = client.new_task(2500)
        assert client.approve(task_id, "alice", 1)["status"] == "accepted"
        decided_on = client.show(task_id)["state_version"]  # the proposal for version 1 carries this
        amended = client.amend(task_id, 2600)
        assert (amended["stage"], amended["version"]) == ("awaiting_approval", 2)
        assert client.show(task_id)["approval"] is None  # the amendment voided it
        again = client.approve(task_id, "alice", 1)
        assert again["reason"] == "approval is for version 1, task is now version 2"
    finally:
        fleet.start_role("executor")
    # The proposal queued for version 1 reaches the executor and is dropped as superseded: the task
    # moved on, nothing is wrong with it, so it is no dead letter.
    dropped = wait_logged(fleet.dir / "executor.log", "executor.superseded", task_id)
    assert dropped is not None, "the executor never dropped the proposal queued for version 1"
    assert dropped["why"].startswith(f"stale proposal: decided on state_version {decided_on},"), dropped
    assert wait_dead_letter(kafka_bootstrap, since, task_id, "executor", timeout=3) is None
    shown = client.show(task_id)
    assert shown["stage"] == "awaiting_approval" and shown["ledger"] == []


@pytest.mark.parametrize(
    ("rule", "expect_stage", "stamped"),
    [
        ("pin", "closed", "started"),
        ("migrate", "closed", "deployed"),
        ("quarantine", "quarantined", None),
    ],
)
def test_policy_changed_mid_flight_applies_the_declared_rule(
    client: BankClient, fleet: Fleet, rule: str, expect_stage: str, stamped: str | None
) -> None:
    task_id, _ = client.new_task(2500)
    started = client.show(task_id)["versions"]["policy"]
    deployed = client.policies.deploy("refund", refund_app.policy + "\n// next\n", by="test", reason="next")
    client.authority.set_policy(compat={"policy": rule})
    try:
        receipt = client.approve(task_id, "alice", 1)
        shown = client.wait_stage(task_id, {Stage.CLOSED, Stage.QUARANTINED}, timeout=30)
    finally:
        client.reset_authority()  # the app's own text in force again, the rule back to pin
    assert shown["stage"] == expect_stage, shown
    if stamped:
        assert shown["versions"]["policy"] == {"started": started, "deployed": deployed.stamp}[stamped]
        assert len(shown["ledger"]) == 1
    else:
        assert receipt["status"] == "rejected" and "quarantined" in receipt["reason"]
        assert shown["quarantine"]["reason"] == "incompatible" and shown["ledger"] == []


def _approve_under(client: BankClient, settings: Settings, redeployed: App, task_id: str) -> None:
    """A gate of the new deploy takes the task's approval."""
    approval = sign_event(client.signer("alice"), events.APPROVE, {"version": 1}, task_id=task_id)
    deliver_under(redeployed, settings, approval, "alice")


def test_a_tool_reworded_mid_flight_lets_the_waiting_task_finish_by_default(
    client: BankClient, fleet: Fleet, settings: Settings
) -> None:
    task_id, _ = client.new_task(2500)
    redeployed = release_apps.reworded  # the tool's description reworded
    assert redeployed.catalog != refund_app.catalog
    _approve_under(client, settings, redeployed, task_id)
    assert client.show(task_id)["stage"] == "ready"  # approved, not quarantined
    client.run(task_id)  # the running fleet, of the first deploy, takes it on from here
    shown = client.wait_settled(task_id)
    assert shown["stage"] == "closed" and len(shown["ledger"]) == 1, shown


def test_a_tool_whose_op_key_changed_mid_flight_quarantines_by_default(
    client: BankClient, fleet: Fleet, settings: Settings
) -> None:
    task_id, _ = client.new_task(2500)
    redeployed = release_apps.rekeyed  # the tool's op key changed
    _approve_under(client, settings, redeployed, task_id)
    shown = client.show(task_id)
    assert shown["stage"] == "quarantined" and shown["ledger"] == []
    assert f"tool_catalog {refund_app.catalog} -> {redeployed.catalog}" in str(shown["quarantine"])


def test_checkpoint_hand_edited_with_redis_cli_is_quarantined_at_resume(
    client: BankClient, fleet: Fleet, settings: Settings
) -> None:
    from test_store import redis_cli

    task_id, _ = client.new_task(2500)
    blob = bytearray(raw_get(client.admin, keys.state(task_id)))
    blob[-5] ^= 0x40
    redis_cli(settings, "SET", keys.state(task_id), stdin=bytes(blob))
    receipt = client.approve(task_id, "alice", 1)
    assert receipt["status"] == "rejected" and "tampered" in receipt["reason"]
    shown = client.show(task_id)
    assert shown["stage"] == "quarantined" and shown["ledger"] == []


def test_deadline_escalation_is_loud_and_recoverable_and_no_ttl_drops_the_wait(
    client: BankClient, fleet: Fleet
) -> None:
    task_id, _ = client.new_task(2500, wait_s=2)
    for key in (keys.state(task_id), keys.ctr(task_id), keys.inbox(task_id)):
        assert client.admin.pttl(key) == -1, key  # no Redis TTL can silently drop a waiting task
    members = [m.decode() for m in command(client.admin, "ZRANGE", keys.DEADLINES, "0", "-1")]
    assert any(m.startswith(f"{task_id}|") for m in members)
    shown = client.wait_stage(task_id, {Stage.NEEDS_REVIEW}, timeout=30)
    assert "escalated to ops-lead" in shown["last_refusal"]
    reopened = client.reopen(task_id, wait_s=600)
    assert (reopened["status"], reopened["stage"]) == ("accepted", "awaiting_approval")
    assert client.approve(task_id, "alice", 1)["status"] == "accepted"
    assert client.wait_settled(task_id)["stage"] == "closed"


def test_same_task_woken_from_two_executors_at_once_has_one_effect(
    client: BankClient, fleet: Fleet, settings: Settings, kafka_bootstrap: str
) -> None:
    fleet.stop_role("executor")  # the fleet's executor joins late: a third contender
    task_id, _ = client.new_task(300)
    shown = client.show(task_id)
    proposal = refund_proposal(task_id, shown["state_version"], 300)
    msg = role_message(settings, "proposer", topics.PROPOSALS, task_id, proposal.encode())

    finished: list[str] = []
    letters: list[str] = []
    log = RecordedLog()

    def executor(name: str) -> None:
        ex = executor_for(settings, letters, owner=name, log=log)
        while True:
            try:
                ex.handle(msg)
                finished.append(name)
                return
            except (Retry, LeaseLost):
                time.sleep(0.005)

    threads = [threading.Thread(target=executor, args=(f"ex-{i}",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(finished) == ["ex-0", "ex-1"]  # both ran to the end: one paid, one was refused
    dropped = log.said("executor.superseded")  # the loser finds the task moved on
    assert letters == [] and len(dropped) == 1 and dropped[0]["why"].startswith("stale proposal"), dropped
    assert len(client.bank.entries(task_id)) == 1
    since = topic_marks(kafka_bootstrap, topics.DLQ)
    path = fleet.dir / "executor.log"
    seen = path.stat().st_size if path.exists() else 0
    fleet.start_role("executor")
    # Its copy of the proposal arrives after the close and is dropped as superseded.
    late = wait_logged(path, "executor.superseded", task_id, seen)
    assert late is not None, "the fleet's executor never dropped its copy of the proposal"
    assert late["why"].startswith(f"stale proposal: decided on state_version {proposal.task_version},"), late
    assert wait_dead_letter(kafka_bootstrap, since, task_id, "executor", timeout=3) is None
    shown = client.wait_settled(task_id)
    assert shown["stage"] == "closed" and len(shown["ledger"]) == 1


def test_worker_paused_past_its_lease_is_refused_by_fencing(client: BankClient, fleet: Fleet) -> None:
    paused = fleet.restart("executor", fault="executor.after_intent:stop")
    try:
        task_id, _ = client.new_task(300)
        assert wait_until(lambda: process_paused(paused.pid), 30, interval=0.05), (
            "the executor never paused at its intent"
        )
        # Paused past its lease (a GC pause, SIGSTOP, a slow disk): Redis has expired it.
        assert wait_until(lambda: client.admin.pttl(keys.lease(task_id)) == -2, 30, interval=0.05), (
            "the paused executor's lease never expired"
        )
        fleet.start_role("executor")  # same identity: it takes over the partition at once
        shown = client.wait_settled(task_id, 60)
        assert shown["stage"] == "closed" and len(shown["ledger"]) == 1
        newer_fence = shown["ledger"][0]["fence"]
        os.kill(paused.pid, signal.SIGCONT)  # the old holder wakes up and carries on with its stale fence
        # Refused by its fence: the minter makes no bank user for a step whose lease has moved on
        # (D120), and a call that got past it would meet the bank's FencedOff.
        refused = ("is not held at fence", f"older than fence {newer_fence} already seen downstream")
        assert wait_until(
            lambda: any(_logged(fleet.dir / "executor.log", "runner.retry", task_id, r) for r in refused), 60
        ), "the executor that woke up was never refused by its fence"
    finally:
        if paused.poll() is None:
            paused.send_signal(signal.SIGCONT)
            paused.send_signal(signal.SIGTERM)
            paused.wait(30)
    shown = client.show(task_id)
    assert (
        shown["stage"] == "closed"
        and len(shown["ledger"]) == 1
        and shown["ledger"][0]["fence"] == newer_fence
    )


# Redis and Kafka each restarted (up to WAKEFUL_START_TIMEOUT, 90 s by default, each), then up to
# 120 s for the tasks: past the default limit on a slow machine.
@pytest.mark.timeout(480)
def test_redis_and_kafka_restarted_mid_run_every_task_finishes_once(
    client: BankClient, fleet: Fleet, settings: Settings
) -> None:
    requester, alice = client.signer(REQUESTER), client.signer("alice")
    batch, task_ids = [], []
    for i in range(30):
        task_id = f"r-{os.urandom(6).hex()}"
        batch.append(
            sign_event(requester, events.CREATE, {"amount": 2500 if i % 3 == 0 else 300}, task_id=task_id)
        )
        if i % 3 == 0:
            batch.append(sign_event(alice, events.APPROVE, {"version": 1}, task_id=task_id))
        task_ids.append(task_id)
    client.publisher.publish_many(batch[: len(batch) // 2])
    assert redis_server.stop(settings)  # AOF on: what was acknowledged survives
    redis_server.start(settings, lambda _: None)
    client.publisher.publish_many(batch[len(batch) // 2 :])
    assert kafka.stop(settings)
    kafka.start(settings, lambda _: None)
    for task_id in task_ids:
        shown = client.wait_stage(task_id, {Stage.CLOSED}, timeout=120)
        assert shown["stage"] == "closed" and len(shown["ledger"]) == 1, shown
    assert all(fleet.alive(role) for role in fleet.roles)


def _logged(path: Path, event: str, *needles: str) -> bool:
    """Whether a structured log line for `event` in path mentions every needle."""
    return any(
        record.get("event") == event and all(n.encode() in line for n in needles)
        for line, record in log_records(path)
    )


def test_amendment_is_refused_once_the_refund_has_started(client: BankClient, fleet: Fleet) -> None:
    executor = fleet.restart("executor", fault="executor.after_downstream_call")
    try:
        task_id, _ = client.new_task(2500)
        assert client.approve(task_id, "alice", 1)["status"] == "accepted"
        executor.wait(timeout=60)  # booked at the bank, died before recording it
        assert len(client.bank.entries(task_id)) == 1
        amended = client.amend(task_id, 9000)  # would be v2 under a new op key: a second refund
        assert amended["status"] == "rejected" and "has started" in amended["reason"]
    finally:
        fleet.start_role("executor")
    shown = client.wait_settled(task_id, 60)
    assert shown["stage"] == "closed" and [e["amount"] for e in shown["ledger"]] == [2500]


def test_wake_carrying_an_event_signed_for_another_task_is_refused(
    client: BankClient, settings: Settings
) -> None:
    task_a, _ = client.new_task(2500)
    task_b, _ = client.new_task(2500)
    before = client.show(task_b)["state_version"]
    event = sign_event(client.signer("alice"), events.APPROVE, {"version": 1}, task_id=task_a)
    wake = Envelope(
        message_id=event.event_id,
        task_id=task_b,  # rerouted by someone who can write to wakeful.wake
        task_version=1,
        kind="wake",
        created_at=datetime.now(UTC),
        trace_id="forged",
        payload={
            "reason": "event",
            "principal": "alice",
            "event": event.encode().decode(),
            "judged_at": datetime.now(UTC).isoformat(),
        },
    )
    letters: list[str] = []
    producer = Producer(kafka_as(settings.kafka_bootstrap, "gate"))
    gate = Gate(
        wiring.store_for(settings, "gate"),
        producer,
        Log(),
        keys=provenance.load_keys(settings, "gate"),
        app=refund_app,
    )
    gate.runner = cast(
        Runner, SimpleNamespace(dead_letter=lambda _m, reason, _t=None: letters.append(reason))
    )
    gate.handle(role_message(settings, "inbound", topics.WAKE, task_b, wake.encode()))
    assert letters and f"signed for task {task_a}" in letters[0]
    shown = client.show(task_b)
    assert shown["state_version"] == before and shown["stage"] == "awaiting_approval"


def test_refused_event_on_a_ready_task_does_not_strand_it(client: BankClient, fleet: Fleet) -> None:
    fleet.stop_role("executor")  # the first proposal waits, and will be stale
    try:
        task_id, _ = client.new_task(300)
        refused = client.approve(task_id, "alice", 1)  # a ready task waits for no approval
        assert refused["status"] == "rejected" and "not awaiting" in refused["reason"]
    finally:
        fleet.start_role("executor")
    shown = client.wait_settled(task_id, 60)
    assert shown["stage"] == "closed" and len(shown["ledger"]) == 1


def test_reopened_task_retries_a_refund_the_bank_refused_under_the_same_key(
    client: BankClient, fleet: Fleet
) -> None:
    task_id = f"t-flaky-{os.urandom(4).hex()}"
    client.admin.set(bank.faults_key(task_id), 3)  # the bank refuses the first three calls
    client.send(REQUESTER, events.CREATE, {"amount": 300}, task_id=task_id)
    parked = client.wait_stage(task_id, {Stage.NEEDS_REVIEW}, timeout=60)
    assert "bank unavailable" in parked["last_refusal"] and parked["ledger"] == []
    assert client.reopen(task_id)["stage"] == "ready"
    shown = client.wait_settled(task_id, 60)
    assert shown["stage"] == "closed" and [e["op_key"] for e in shown["ledger"]] == [f"REFUND:{task_id}:v1"]
