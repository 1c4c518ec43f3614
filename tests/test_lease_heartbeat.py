"""Long tools keep their lease, and an unavailable tool is retried without it (D61): real executor
processes running the test-only slow app (tests/slow_app.py), whose tool blocks for its task's
hold_s and records every call by op key and fence in a file its downstream keeps.

- A call four times the lease's ttl runs under one lease, renewed by the executor's heartbeat, and
  the task closes with one effect.
- An executor stopped (SIGSTOP) in the middle of a call loses its lease; the other executor takes
  the task once the group hands it the partition, asks the tool's lookup, calls again under the same
  op key with a newer fence, and closes the task. Resumed (SIGCONT), the first one's late call is
  refused by its fence, and nothing is done twice.
- A tool that is unavailable is called again in a later handling, under a lease taken afresh (a
  newer fence each time), its calls counted on the action log, and fails for good after its
  attempts.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cli_run import with_tests_on_path
from slow_app import read_rows

from wakeful.authority.limit_store import tool_scope
from wakeful.consumers.kafka.supervisor import ROLES
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.state import keys

APP = "slow_app:app"
TTL_MS = 6_000  # shorter than the default 15 s, so that four times it is a wait of 24 s, not 60
LONG_HOLD_S = 4 * TTL_MS / 1000
STOPPED_HOLD_S = 8.0  # past a third of the ttl: the second executor's call is renewed too
TAKEN_OVER_S = 150.0  # the stopped member's group session (30 s), a rejoin, the lease and the call
SETTLE_S = 60.0
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def slow(settings: Settings, kafka_bootstrap: str, redis_url: str) -> Iterator[tuple[Client, Fleet]]:
    """Every role running the slow app, with two executors, warmed up by one quick task."""
    client = Client(dataclasses.replace(settings, app=APP))
    client.reset_authority()  # the app's policy and tool catalog, and a dev signer for its principals
    env = with_tests_on_path({**os.environ, "WAKEFUL_APP": APP, "WAKEFUL_MODEL": "rules"})
    env["WAKEFUL_LEASE_TTL_MS"] = str(TTL_MS)
    fleet = Fleet(env, replicas={**dict.fromkeys(ROLES, 1), "executor": 2}).start()
    try:
        warm, _ = client.create({"hold_s": 0})
        assert client.wait_settled(warm, 180)["stage"] == "closed"
        yield client, fleet
    finally:
        fleet.stop()
        client.close()


def wait_for(find: Callable[[], Any], timeout: float, step: float = 0.1) -> Any:
    """The first truthy value `find` returns before the deadline, else None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = find()
        if found:
            return found
        time.sleep(step)
    return None


def rows_of(client: Client, task_id: str, event: str | None = None) -> list[dict[str, Any]]:
    """The slow downstream's rows for the task's op keys (of one kind of event, if given)."""
    mine = [r for r in read_rows(client.settings.home) if r["op_key"].split(":")[1] == task_id]
    return [r for r in mine if event is None or r["event"] == event]


def fence_count(client: Client, task_id: str) -> int:
    return int(client.admin.get(keys.fence(task_id)) or 0)


def test_a_tool_call_four_times_the_lease_ttl_runs_under_one_lease_and_has_one_effect(
    slow: tuple[Client, Fleet],
) -> None:
    client, _ = slow
    task_id, _ = client.create({"hold_s": LONG_HOLD_S})
    [began] = wait_for(lambda: rows_of(client, task_id, "start"), SETTLE_S)
    holder = client.admin.get(keys.lease(task_id))
    assert isinstance(holder, bytes) and holder.endswith(b":%d" % began["fence"]), holder
    deadline = time.monotonic() + LONG_HOLD_S + SETTLE_S
    while not rows_of(client, task_id, "done"):  # while the call runs, the lease never changes hands
        assert time.monotonic() < deadline, "the call never finished"
        now_held = client.admin.get(keys.lease(task_id))
        if rows_of(client, task_id, "done"):
            break
        assert now_held == holder, (holder, now_held)
        time.sleep(0.5)
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed", shown
    [done] = rows_of(client, task_id, "done")
    assert [r["event"] for r in rows_of(client, task_id)] == ["start", "done"]  # one call, one effect
    [(op, entry)] = shown["actions"].items()
    assert (entry["status"], entry["fence"], done["fence"]) == ("succeeded", began["fence"], began["fence"])
    assert fence_count(client, task_id) == began["fence"] == 1  # one grant: never lapsed, never retaken
    assert shown["effects"][op] == {"receipt": done["receipt"]}
    assert wait_for(lambda: not client.admin.exists(keys.lease(task_id)), 5)  # given back by the close


def test_an_executor_stopped_mid_call_is_fenced_and_the_task_is_done_once_by_another(
    slow: tuple[Client, Fleet],
) -> None:
    client, fleet = slow
    task_id, _ = client.create({"hold_s": STOPPED_HOLD_S})
    [first] = wait_for(lambda: rows_of(client, task_id, "start"), SETTLE_S)
    [stopped] = [m for m in fleet.members_of("executor") if fleet.procs[m].pid == first["pid"]]
    fleet.procs[stopped].send_signal(signal.SIGSTOP)
    try:
        # Its lease lapses; the other executor is handed the partition, finds nothing done by the
        # op key's lookup, and calls again under the same op key with a newer fence.
        second = wait_for(lambda: [r for r in rows_of(client, task_id, "start") if r != first], TAKEN_OVER_S)
        assert second, f"no other executor took {task_id} over"
        [again] = second
        assert again["pid"] != first["pid"] and again["fence"] > first["fence"], again
        assert again["op_key"] == first["op_key"]
        shown = client.wait_settled(task_id, STOPPED_HOLD_S + SETTLE_S)
        assert shown["stage"] == "closed", shown
        closed_at = shown["state_version"]
    finally:
        fleet.procs[stopped].send_signal(signal.SIGCONT)
    # Resumed, the first call reaches its effect with the old fence: the downstream refuses it.
    fenced = wait_for(lambda: rows_of(client, task_id, "fenced"), SETTLE_S)
    assert fenced and all(r["fence"] == first["fence"] and r["pid"] == first["pid"] for r in fenced), fenced
    assert fleet.alive(stopped)  # refused, not crashed
    [done] = rows_of(client, task_id, "done")
    assert done["fence"] == again["fence"]
    shown = client.show(task_id)
    [(op, entry)] = shown["actions"].items()
    assert (entry["status"], entry["fence"]) == ("succeeded", again["fence"])
    assert (shown["stage"], shown["state_version"]) == ("closed", closed_at)  # nothing written late
    assert shown["effects"][op] == {"receipt": done["receipt"]}
    assert wait_for(lambda: not client.admin.exists(keys.lease(task_id)), TTL_MS / 1000 + 5)


def test_a_task_cancelled_while_its_step_runs_lets_the_step_finish_then_undoes_it_once(
    slow: tuple[Client, Fleet],
) -> None:
    client, _ = slow
    task_id, _ = client.create({"hold_s": STOPPED_HOLD_S, "confirm": True})
    [began] = wait_for(lambda: rows_of(client, task_id, "start"), SETTLE_S)
    # The gate applies the cancel only once the step has given the task's lease back: the call
    # runs to its end, once, and the task moves on; then the cancel undoes it.
    receipt = client.cancel(task_id, "no longer wanted", timeout=STOPPED_HOLD_S + SETTLE_S)
    assert receipt["status"] == "accepted", receipt
    shown = client.wait_stage(task_id, {"cancelled", "needs_review"}, SETTLE_S)
    assert shown["stage"] == "cancelled", shown
    assert [r["event"] for r in rows_of(client, task_id)] == ["start", "done", "undone"]
    op = began["op_key"]
    assert (shown["actions"][op]["status"], shown["actions"][f"UNDO:{op}"]["status"]) == (
        "succeeded",
        "succeeded",
    )
    assert shown["external_refs"]["undone:slow_pay"] == op and shown["pending_waits"] == []
    assert wait_for(lambda: not client.admin.exists(keys.lease(task_id)), 5)
    refused = client.cancel(task_id, "again")
    assert (refused["status"], refused["reason"]) == (
        "rejected",
        "task is cancelled; it accepts no more events",
    )


def test_an_unavailable_tool_is_called_again_under_a_new_lease_and_its_calls_are_counted(
    slow: tuple[Client, Fleet],
) -> None:
    client, _ = slow
    task_id, _ = client.create({"hold_s": 0, "outage": 2})
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed", shown
    calls = rows_of(client, task_id)
    assert [r["event"] for r in calls] == ["unavailable", "unavailable", "start", "done"]
    fences = [r["fence"] for r in calls[:3]]
    assert fences == sorted(set(fences)), fences  # each call under a lease taken afresh, none slept under
    [entry] = shown["actions"].values()
    assert (entry["status"], entry["attempts"]) == ("succeeded", 2)


def test_a_tool_unavailable_at_every_call_fails_for_good_after_its_attempts(
    slow: tuple[Client, Fleet],
) -> None:
    client, _ = slow
    task_id, _ = client.create({"hold_s": 0, "outage": 10})
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "needs_review", shown
    assert "slowbank unavailable after 3 attempts" in (shown["last_refusal"] or ""), shown
    assert [r["event"] for r in rows_of(client, task_id)] == ["unavailable"] * 3
    [entry] = shown["actions"].values()
    assert (entry["status"], entry["attempts"]) == ("failed", 3)


def test_a_tool_held_to_one_call_at_once_never_runs_two_even_past_the_lease_ttl(
    slow: tuple[Client, Fleet],
) -> None:
    """D111: with the tool held to one call at once, the calls of five tasks sent together run one
    after another, over both executors, and the first, two and a half times the lease's ttl, keeps
    its slot by the heartbeat: no call starts while it runs."""
    client, fleet = slow
    scope = tool_scope("slow", "slow_pay")
    client.limits.set_rate(scope, None, None, max_in_flight=1, by="ops-lead", reason="one at a time")
    try:
        first, _ = client.create({"hold_s": 2.5 * TTL_MS / 1000})
        assert wait_for(lambda: rows_of(client, first, "start"), SETTLE_S)
        others = [client.create({"hold_s": 0.5})[0] for _ in range(4)]
        shown = [client.wait_settled(task_id, SETTLE_S + 2 * TTL_MS / 1000) for task_id in [first, *others]]
    finally:
        client.limits.unset(scope, by="ops-lead")
    assert [s["stage"] for s in shown] == ["closed"] * 5, shown
    mine = {first, *others}
    calls = [r for r in read_rows(client.settings.home) if r["op_key"].split(":")[1] in mine]
    running, most = 0, 0
    for row in calls:  # the downstream's rows, in the order it wrote them
        running += {"start": 1, "done": -1}.get(row["event"], 0)
        most = max(most, running)
    assert most == 1, calls
    assert sorted(r["op_key"] for r in calls if r["event"] == "done") == sorted(
        f"SLOW:{task_id}:v1" for task_id in mine
    )  # each task's call done once
    logs = b"".join((fleet.dir / f"{m}.log").read_bytes() for m in fleet.members_of("executor"))
    assert b"executor.tool_full" in logs  # the others waited their turn
    assert not client.admin.exists(keys.tool_slots("slow", "slow_pay"))  # every slot given back
