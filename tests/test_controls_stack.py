"""A task's controls on worker processes. Durable sleep (sdk Sleep, workflow/sleeps.py): a task that
sleeps holds no lease and no process; the timer wakes it once, at its time, and it moves on; a task
poked while it sleeps moves on at once, and its sleep's time passing then changes nothing. A quorum
(Wait(count=2)): two different approvers of the version, the same one twice counting once and an
approval of another version counting for nothing."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cli_run import with_tests_on_path
from helpers import private_stack, run_cli
from nap_app import AWAITING, NAPPING, PAID, PAIRING, POKE, SIGNED

from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.operate.recover import run as recovery
from wakeful.schemas import events
from wakeful.state import keys
from wakeful.workflow.sleeps import SLEEP_WAIT

DESK = "nap-desk"
FIRST_RECEIPT_S = 120.0  # the first event also waits for the fresh roles to join their groups
SLEEP_S = 4.0
LATE_S = 10.0  # the timer's poll, the wake's hop to the gate and its write, on a busy box
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def napping(settings: Settings, kafka_bootstrap: str, redis_url: str) -> Iterator[Client]:
    client = Client(dataclasses.replace(settings, app="nap_app:app"))
    client.reset_authority()
    client.add_signer(DESK, (events.CREATE, POKE, events.CANCEL, SIGNED, PAID))
    client.add_signer("carol", (events.APPROVE,))  # a third approver, for a quorum of two of three
    client.authority.add_approver("carol", client.app.name)
    fleet = Fleet(with_tests_on_path(dict(os.environ)) | {"WAKEFUL_APP": "nap_app:app"}).start()
    try:
        yield client
    finally:
        fleet.stop()
        client.close()


def sleeping(client: Client, payload: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    task_id, receipt = client.create(payload, DESK, timeout=FIRST_RECEIPT_S)
    assert receipt["status"] == "accepted", receipt
    shown = client.show(task_id)
    assert shown["stage"] == NAPPING and [w["wait_for"] for w in shown["pending_waits"]] == [SLEEP_WAIT], (
        shown
    )
    return task_id, shown


def test_a_sleeping_task_holds_no_lease_and_wakes_once_at_its_time(napping: Client) -> None:
    client = napping
    task_id, shown = sleeping(client, {"sleep_s": SLEEP_S})
    due = datetime.fromisoformat(shown["pending_waits"][0]["deadline"])
    assert not client.admin.exists(keys.lease(task_id))  # asleep: nobody holds it
    woke = client.wait_stage(task_id, {"closed"}, timeout=SLEEP_S + LATE_S + 30)
    closed_at = datetime.fromisoformat(woke["updated_at"])
    assert due <= closed_at <= due + timedelta(seconds=LATE_S), (due, closed_at)
    assert woke["state_version"] == shown["state_version"] + 1  # one wake, one write
    assert woke["pending_waits"] == []


def test_a_task_poked_while_it_sleeps_moves_on_and_its_sleep_then_changes_nothing(napping: Client) -> None:
    client = napping
    task_id, shown = sleeping(client, {"until": (datetime.now(UTC) + timedelta(seconds=SLEEP_S)).isoformat()})
    poked = client.event(task_id, POKE, {}, DESK)
    assert poked["status"] == "accepted", poked
    after = client.show(task_id)
    assert after["stage"] == "closed" and after["pending_waits"] == []
    # The sleep's deadline stays with the timer, which fires it at its time: the wake finds nothing due.
    due_ms = int(datetime.fromisoformat(shown["pending_waits"][0]["deadline"]).timestamp() * 1000)
    member = f"{task_id}|{due_ms}"
    assert client.admin.zscore(keys.DEADLINES, member) is not None
    assert wait_until(lambda: client.admin.zscore(keys.DEADLINES, member) is None, SLEEP_S + LATE_S)
    assert wait_until(lambda: not client.admin.exists(keys.lease(task_id)), LATE_S)
    assert client.show(task_id)["state_version"] == after["state_version"]


def test_a_task_cancelled_while_it_sleeps_is_cancelled_at_once_and_its_sleep_then_changes_nothing(
    napping: Client,
) -> None:
    client = napping
    task_id, shown = sleeping(client, {"sleep_s": SLEEP_S})
    cancelled = client.cancel(task_id, "not needed", DESK)
    assert (cancelled["status"], cancelled["stage"]) == ("accepted", "cancelled"), (
        cancelled
    )  # nothing to undo
    after = client.show(task_id)
    assert after["pending_waits"] == [] and after["external_refs"]["cancel-reason"] == "not needed"
    due_ms = int(datetime.fromisoformat(shown["pending_waits"][0]["deadline"]).timestamp() * 1000)
    # its time comes and goes: the wake it fires finds a cancelled task, which takes no more events
    assert wait_until(
        lambda: client.admin.zscore(keys.DEADLINES, f"{task_id}|{due_ms}") is None, SLEEP_S + LATE_S
    )
    assert client.show(task_id)["state_version"] == after["state_version"]


def test_another_tenants_cancel_of_a_tasks_id_reaches_no_task_of_this_tenant(napping: Client) -> None:
    client = napping
    task_id, shown = sleeping(client, {"sleep_s": 600})
    client.add_signer("rival-desk", (events.CANCEL,), tenant="rival")
    # By the id this tenant gave it: in the rival's namespace that names a task of the rival's own,
    # which there is none of (a full id, `default.<id>`, no signer may name: D52).
    by_its_id = client.cancel(task_id, "mine now", "rival-desk")
    assert by_its_id["status"] == "rejected", by_its_id
    after = client.show(task_id)
    assert (after["stage"], after["state_version"]) == (NAPPING, shown["state_version"]), after
    assert client.cancel(task_id, "tidy", DESK)["stage"] == "cancelled"


def test_a_quorum_of_two_of_three_counts_each_approver_once_and_no_other_versions_approval(
    napping: Client,
) -> None:
    client = napping
    task_id, receipt = client.create({"workflow": "quorum"}, DESK, timeout=FIRST_RECEIPT_S)
    assert (receipt["status"], receipt["stage"]) == ("accepted", AWAITING), receipt
    first = client.approve(task_id, "alice", 1)
    assert (first["status"], first["stage"]) == ("accepted", AWAITING), first  # counted; still waiting
    twice = client.approve(task_id, "alice", 1)
    assert twice["status"] == "rejected" and "counts once" in twice["reason"], twice
    stale = client.approve(task_id, "bob", 2)
    assert (stale["status"], stale["reason"]) == (
        "rejected",
        "approval is for version 2, task is now version 1",
    )
    shown = client.show(task_id)
    assert shown["stage"] == AWAITING and shown["pending_waits"][0]["counted"] == ["alice"], shown
    done = client.approve(task_id, "carol", 1)
    assert (done["status"], done["stage"]) == ("accepted", "closed"), done
    approval = client.show(task_id)["approval"]
    assert (approval["approver_ref"], approval["co_approvers"]) == ("carol", ["alice"]), approval


def test_a_task_waiting_for_a_signature_and_a_payment_moves_on_once_both_came_in_either_order(
    napping: Client,
) -> None:
    client = napping
    task_id, receipt = client.create({"workflow": "pair"}, DESK, timeout=FIRST_RECEIPT_S)
    assert (receipt["status"], receipt["stage"]) == ("accepted", PAIRING), receipt
    paid = client.event(task_id, PAID, {}, DESK)
    assert (paid["status"], paid["stage"]) == ("accepted", PAIRING), paid  # one of two: it stays
    assert [w["wait_for"] for w in client.show(task_id)["pending_waits"]] == [SIGNED]
    again = client.event(task_id, PAID, {}, DESK)
    assert again["status"] == "rejected" and "answers none of them" in again["reason"], again
    signed = client.event(task_id, SIGNED, {}, DESK)
    assert (signed["status"], signed["stage"]) == ("accepted", "closed"), signed


RECOVER_SLEEP_S = 40.0  # long enough for the change to reach the log, a wipe and `wakeful recover`


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with private_stack(tmp_path_factory.mktemp("sleep")) as env:
        # The relay sweeps its outboxes, and puts its watermark on the log, every second.
        yield with_tests_on_path(env) | {"WAKEFUL_OUTBOX_SWEEP_S": "1", "WAKEFUL_APP": "nap_app:app"}


@pytest.mark.timeout(600)
def test_a_task_asleep_through_a_redis_wipe_and_recover_wakes_once_on_time(private: dict[str, str]) -> None:
    client = Client(dataclasses.replace(Settings.from_env(private), app="nap_app:app"))
    fleet = Fleet(private).start()
    try:
        client.reset_authority()
        client.add_signer(DESK, (events.CREATE, POKE))
        recovery.journal_authority(client.settings, client.admin, client.store.sealer)
        task_id, receipt = client.create({"sleep_s": RECOVER_SLEEP_S}, DESK, timeout=FIRST_RECEIPT_S)
        assert receipt["status"] == "accepted", receipt
        shown = client.show(task_id)
        due = datetime.fromisoformat(shown["pending_waits"][0]["deadline"])
        # The change that put it to sleep is on the log (its outbox published); then every key goes
        # and, with the workers stopped as recover asks, Redis is rebuilt from Kafka.
        assert wait_until(lambda: not client.admin.exists(keys.outbox(task_id)), 60)
        fleet.stop()
        names = list(client.admin.scan_iter(match=f"{keys.PREFIX}:*", count=1000))
        client.admin.delete(*names)
        assert wait_until(lambda: not recovery.busy(client.admin), 30, interval=0.2)
        ran = run_cli(private, "recover", "--json", timeout=300)
        assert ran.returncode == 0, ran.stderr[-3000:]
        fleet = Fleet(private).start()
        assert datetime.now(UTC) < due, "recover took past the sleep's end: lengthen RECOVER_SLEEP_S"
        back = client.show(task_id)
        assert back["stage"] == NAPPING and back["pending_waits"] == shown["pending_waits"], back
        woke = client.wait_stage(task_id, {"closed"}, timeout=RECOVER_SLEEP_S + LATE_S + 30)
        closed_at = datetime.fromisoformat(woke["updated_at"])
        assert due <= closed_at <= due + timedelta(seconds=LATE_S), (due, closed_at)
        assert woke["state_version"] == back["state_version"] + 1  # woke once
    finally:
        fleet.stop()
        client.close()
