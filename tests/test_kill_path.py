"""The kill path on the real stack: a freeze holds a task's events (kept, not refused) and its
steps, and a thaw lets it catch up; `freeze --all` during a run of 200 tasks is taken in by the
fleet, after which no new intent is written and no effect is left half-done; after the thaw every
task finishes, with exactly one booking each. A signer revoked mid-flight parks the tasks it
started (the refund app's rule) until a person reopens them."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime
from typing import Any

import orjson
import pytest
from change_doc import FREEZE, kill_path_command
from cli_run import doc, wakeful, with_tests_on_path
from helpers import BankClient, topic_marks, wait_letter

from wakeful.consumers.gate import hold as gate_hold
from wakeful.core import topics
from wakeful.devstack.fleet import Fleet
from wakeful.schemas import events
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.state import keys
from wakeful.state.replies import hash_reply

OPS = ("--by", "ops-lead")


def test_a_frozen_task_holds_its_events_and_catches_up_when_thawed(
    client: BankClient, shared_fleet: Fleet
) -> None:
    task_id, _ = client.new_task(2500)
    assert client.wait_stage(task_id, {"awaiting_approval"})["stage"] == "awaiting_approval"
    since = topic_marks(client.settings.kafka_bootstrap, topics.DLQ)
    frozen = wakeful(*kill_path_command("freeze", "--task", task_id=task_id, section=FREEZE), "--json")
    assert frozen.returncode == 0, frozen.stderr
    assert doc(frozen)["not_yet"] == [] and doc(frozen)["taken_in_by"], doc(frozen)

    # Held is not rejected: the command says "kept for the thaw" and exits 0 (docs/pipeline.md).
    sent = wakeful("task", "approve", task_id, "--by", "alice", "--version", "1", "--json")
    receipt = doc(sent)
    assert receipt["status"] == "held" and sent.returncode == 0, (receipt, sent.returncode)
    assert "frozen (task:" in receipt["reason"] and "customer dispute" in receipt["reason"], receipt
    assert client.show(task_id)["stage"] == "awaiting_approval"
    listed = doc(wakeful("frozen", "--json"))
    assert listed["frozen"][f"task:{task_id}"]["reason"] == "customer dispute"
    assert listed["log"][0]["switch"] == "freeze" and listed["log"][0]["by"] == "ops-lead"

    thawed = wakeful(*kill_path_command("thaw", "--task", task_id=task_id, section=FREEZE), "--json")
    assert thawed.returncode == 0 and doc(thawed)["was_frozen"], thawed.stderr
    done = client.wait_stage(task_id, {"closed"}, timeout=30)
    assert done["stage"] == "closed", done
    assert len(done["ledger"]) == 1
    # A proposal the thaw's catch-up made stale is superseded, not wrong: no dead letter.
    mine = wait_letter(client.settings.kafka_bootstrap, since, lambda d: d.get("task_id") == task_id, 5)
    assert mine is None, mine


def test_a_record_planted_on_a_held_list_is_dead_lettered_whole_and_the_task_still_catches_up(
    client: BankClient, shared_fleet: Fleet
) -> None:
    task_id, _ = client.new_task(2500)
    assert client.wait_stage(task_id, {"awaiting_approval"})["stage"] == "awaiting_approval"
    frozen = wakeful("freeze", "--task", task_id, "--reason", "planted records", *OPS, "--json")
    assert frozen.returncode == 0, frozen.stderr
    assert client.approve(task_id, "alice", 1)["status"] == "held"
    # Someone with write access to Redis plants two records in front of the real one: bytes that
    # are no record, and a well-formed record of a wake nobody signed.
    unsigned = {"key": "", "value": base64.b64encode(b'{"task_id": "x"}').decode(), "headers": []}
    client.admin.lpush(keys.held(task_id), orjson.dumps(unsigned), b"\x00planted")
    since = topic_marks(client.settings.kafka_bootstrap, topics.DLQ)

    thawed = wakeful("thaw", "--task", task_id, *OPS, "--json")
    assert thawed.returncode == 0, thawed.stderr
    done = client.wait_stage(task_id, {"closed"}, timeout=30)
    assert done["stage"] == "closed" and len(done["ledger"]) == 1, done
    for told in ("unreadable held wake", "unsigned message"):

        def says(letter: dict[str, Any], told: str = told) -> bool:
            return letter.get("source") == "gate" and told in letter.get("reason", "")

        found = wait_letter(client.settings.kafka_bootstrap, since, says, timeout=30)
        assert found is not None, f"no dead letter saying {told!r}"
        assert found[0]["reason"].startswith("held wake: "), found[0]
    assert client.admin.llen(keys.held(task_id)) == 0


def test_a_frozen_task_whose_held_list_is_full_dead_letters_further_events_whole(
    client: BankClient, shared_fleet: Fleet
) -> None:
    task_id, _ = client.new_task(2500)
    assert client.wait_stage(task_id, {"awaiting_approval"})["stage"] == "awaiting_approval"
    frozen = wakeful("freeze", "--task", task_id, "--reason", "a flood", *OPS, "--json")
    assert frozen.returncode == 0, frozen.stderr
    assert client.approve(task_id, "alice", 1)["status"] == "held"
    kept = client.admin.lindex(keys.held(task_id), 0)  # a real held wake: a replay keeps it, frozen
    assert isinstance(kept, bytes)
    client.admin.rpush(keys.held(task_id), *[kept] * (gate_hold.HELD_MAX - 1))
    since = topic_marks(client.settings.kafka_bootstrap, topics.DLQ)
    receipt = client.approve(task_id, "bob", 1)
    assert receipt["status"] == "held" and "held in the dead letters" in receipt["reason"], receipt

    def says(letter: dict[str, Any]) -> bool:
        return letter.get("task_id") == task_id and "the most a task keeps" in letter.get("reason", "")

    found = wait_letter(client.settings.kafka_bootstrap, since, says, timeout=30)
    assert found is not None and found[0]["raw"] and not found[0]["digest"], found  # bytes, to replay
    assert client.admin.llen(keys.held(task_id)) == gate_hold.HELD_MAX
    client.admin.delete(keys.held(task_id))
    assert wakeful("thaw", "--task", task_id, *OPS).returncode == 0


def test_freeze_names_exactly_one_scope_and_says_who_and_why() -> None:
    assert "exactly one of" in wakeful("freeze", "--all", "--tenant", "t", *OPS, "--reason", "r").stderr
    assert "--reason" in wakeful("freeze", "--all", *OPS).stderr
    assert "--by" in wakeful("freeze", "--all", "--reason", "r").stderr
    assert "is not a tenant name" in wakeful("freeze", "--tenant", "a b", *OPS, "--reason", "r").stderr


@pytest.mark.timeout(300)
def test_freeze_all_during_a_run_of_200_tasks_stops_new_intents_and_loses_nothing(
    client: BankClient, shared_fleet: Fleet
) -> None:
    run = f"f{uuid.uuid4().hex[:6]}"
    task_ids = [f"{run}-{i:03d}" for i in range(200)]
    for task_id in task_ids[:100]:  # under the limit: each runs to its booking with no one to wait for
        client.send("svc-refunds", events.CREATE, {"amount": 100, "currency": "EUR"}, task_id=task_id)
    deadline = time.monotonic() + 60
    while sum(_closed(client, t) for t in task_ids[:40]) < 5:
        assert time.monotonic() < deadline, "the run never started"
        time.sleep(0.05)

    freezing = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wakeful.cli.main",
            "freeze",
            "--all",
            *OPS,
            "--reason",
            "stop the fleet",
            "--json",
        ],
        env=with_tests_on_path(dict(os.environ)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    waiting = iter(task_ids[100:])
    for _ in range(80):  # the run goes on while the freeze is thrown
        if freezing.poll() is not None:
            break
        client.send("svc-refunds", events.CREATE, {"amount": 100, "currency": "EUR"}, task_id=next(waiting))
        time.sleep(0.01)
    out, err = freezing.communicate(timeout=60)
    for task_id in waiting:  # and after it is taken in: these are held, not refused
        client.send("svc-refunds", events.CREATE, {"amount": 100, "currency": "EUR"}, task_id=task_id)
    assert freezing.returncode == 0, err
    said = orjson.loads(out)
    assert said["not_yet"] == [] and said["taken_in_by"], said
    acknowledged = datetime.fromisoformat(said["acknowledged_at"])

    # Whatever was begun before the freeze completes; nothing begins after it.
    settled = time.monotonic() + 30
    while any(e.status is ActionStatus.IN_FLIGHT for e in _entries(client, task_ids)):
        assert time.monotonic() < settled, "an effect was left half-done under the freeze"
        time.sleep(0.1)
    begun = _entries(client, task_ids)
    assert all(e.started_at <= acknowledged for e in begun), [
        e.op_key for e in begun if e.started_at > acknowledged
    ]
    closed_at_freeze = sum(_closed(client, t) for t in task_ids)
    assert closed_at_freeze < len(task_ids), "the run ended before the freeze: nothing was tested"

    thawed = wakeful("thaw", "--all", *OPS, "--reason", "incident over")
    assert thawed.returncode == 0, thawed.stderr
    finish = time.monotonic() + 120
    while not all(_closed(client, t) for t in task_ids):
        assert time.monotonic() < finish, (
            f"{sum(_closed(client, t) for t in task_ids)} of 200 closed after the thaw"
        )
        time.sleep(0.2)
    shown = [client.show(t) for t in task_ids]
    assert all(len(s["actions"]) == 1 for s in shown)  # one operation per task, run once
    booked = [entry for s in shown for entry in s["ledger"]]  # by op key, no scan
    assert len(booked) == len(task_ids) and len({b["op_key"] for b in booked}) == len(task_ids)


def _closed(client: BankClient, task_id: str) -> bool:
    raw = client.admin.exists(keys.state(task_id))
    return bool(raw) and client.store.load(task_id).stage == "closed"


def _entries(client: BankClient, task_ids: list[str]) -> list[ActionLogEntry]:
    pipe = client.admin.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hgetall(keys.ops(task_id))
    return [ActionLogEntry.decode(raw) for reply in pipe.execute() for raw in hash_reply(reply).values()]


def test_a_signer_revoked_mid_flight_parks_the_tasks_it_started_until_a_person_reopens_them(
    client: BankClient, shared_fleet: Fleet
) -> None:
    requester = f"svc-{uuid.uuid4().hex[:8]}"
    client.add_signer(requester, (events.CREATE, events.RUN))
    task_id, created = client.new_task(2500, principal=requester)
    assert created["status"] == "accepted", created
    assert client.wait_stage(task_id, {"awaiting_approval"})["stage"] == "awaiting_approval"

    revoked = wakeful(
        "authority", "signers", "revoke", f"key-{requester}", *OPS, "--reason", "key leaked INC-9"
    )
    assert revoked.returncode == 0, revoked.stderr
    unknown = wakeful("authority", "signers", "revoke", "key-nobody", *OPS, "--reason", "x")
    assert unknown.returncode != 0 and "no signer key 'key-nobody' is registered" in unknown.stderr

    receipt = client.approve(task_id, "alice", 1)  # a live approver: the task rests on its requester
    assert receipt["status"] == "rejected" and "key leaked INC-9" in receipt["reason"], receipt
    parked = client.show(task_id)
    assert parked["stage"] == "needs_review" and f"signer {requester}" in parked["last_refusal"], parked

    reopened = client.reopen(task_id, "ops-lead")
    assert reopened["status"] == "accepted", reopened
    again = client.wait_stage(task_id, {"awaiting_approval", "ready", "closed"})
    if again["stage"] == "awaiting_approval":
        assert client.approve(task_id, "alice", again["version"])["status"] == "accepted"
    done = client.wait_stage(task_id, {"closed"}, timeout=30)
    assert done["stage"] == "closed" and len(done["ledger"]) == 1, done


def test_a_revoked_principal_gets_no_key_again_until_an_operator_lifts_it(client: BankClient) -> None:
    principal = f"svc-{uuid.uuid4().hex[:8]}"
    client.add_signer(principal, (events.CREATE,))
    revoked = wakeful("authority", "signers", "revoke", f"key-{principal}", *OPS, "--reason", "left")
    assert revoked.returncode == 0, revoked.stderr
    again = wakeful("authority", "signers", "add", principal, "--kinds", events.CREATE)
    assert again.returncode != 0 and "is revoked" in again.stderr and "unrevoke" in again.stderr, again.stderr
    assert client.authority.signer(f"key-{principal}") is None
    not_ops = wakeful("authority", "signers", "unrevoke", principal, "--by", "alice", "--reason", "back")
    assert not_ops.returncode != 0 and "is not an operator" in not_ops.stderr, not_ops.stderr
    lifted = wakeful("authority", "signers", "unrevoke", principal, *OPS, "--reason", "new key issued")
    assert lifted.returncode == 0, lifted.stderr
    assert wakeful("authority", "signers", "add", principal, "--kinds", events.CREATE).returncode == 0
    log = doc(wakeful("frozen", "--json"))["log"]
    assert [e["switch"] for e in log[:2]] == ["unrevoke", "revoke"], log[:2]
