"""Schedules on worker processes (D104): each tick of a schedule starts exactly one task, signed by
the scheduler and taken through the door like any upstream event, whatever the number of timers and
however often one is killed; meanwhile the commands add, list, pause, resume and delete others."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from cli_run import doc, wakeful

from wakeful.consumers.kafka.supervisor import ROLES
from wakeful.core import ids
from wakeful.core.errors import TaskNotFound
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.schemas.schedule import ScheduleRecord
from wakeful.state import keys
from wakeful.workflow import schedules

# Fifty ticks with a kill every 7.5 s, the kills from the first tick on, take as many kills (seven:
# each timer two or three times) as a hundred with one every 15 s did, in half the wait. A restarted
# timer is up within a few seconds and is killed again only after the other two (22.5 s later): each
# kill still lands on a running timer, now and then on one holding a claim that another must wait
# out (consumers/timer/schedules.py CLAIM_MS).
TICKS = 50
TIMERS = 3
KILL_EVERY_S = 7.5  # one timer killed, in turn, this often while the ticks run
SETTLE_S = 120.0
pytestmark = pytest.mark.timeout(TICKS + 2 * SETTLE_S + 120)


@pytest.fixture(scope="module")
def timers(settings: Settings, kafka_bootstrap: str, redis_url: str) -> Iterator[tuple[Client, Fleet]]:
    """The refund app with three timer processes, one of every other role."""
    client = Client(dataclasses.replace(settings, app="wakeful.examples.refund:app"))
    client.reset_authority()  # the dev signers, the scheduler among them
    env = {**os.environ, "WAKEFUL_APP": "wakeful.examples.refund:app", "WAKEFUL_MODEL": "rules"}
    fleet = Fleet(env, replicas={**dict.fromkeys(ROLES, 1), "timer": TIMERS}).start()
    try:
        yield client, fleet
    finally:
        for name in client.schedules.all():
            client.schedules.delete(name, by="ops-lead")
        fleet.stop()
        client.close()


def ticks_of(found: ScheduleRecord, until: datetime) -> list[datetime]:
    """An `every` schedule's ticks after its since, up to `until`."""
    step = timedelta(seconds=int(found.rule.removeprefix(schedules.EVERY)))
    first = found.since.replace(microsecond=0) + step
    return [first + k * step for k in range(int((until - first) / step) + 1)] if until >= first else []


def started(client: Client, task_id: str) -> bool:
    try:
        client.show(task_id)
    except TaskNotFound:
        return False
    return True


def test_each_tick_starts_exactly_one_task_with_three_timers_each_killed_in_turn_and_the_commands_work(
    timers: tuple[Client, Fleet],
) -> None:
    """While one schedule ticks for TICKS seconds, the commands are run on others: each tick of the
    first still starts one task, and the commands do what they say."""
    client, fleet = timers
    name = f"hundred-{os.urandom(3).hex()}"  # its own ticks only, on a stack kept from an earlier run
    found = client.schedules.add(name, "every:1", "refund", {"amount": 300}, by="ops-lead", catch_up="all")
    end = found.since + timedelta(seconds=TICKS)
    # The commands run beside the kills, so that the kills span all the ticks however long the
    # commands take on a busy box; what they assert is raised here once the ticks are over.
    with ThreadPoolExecutor(1) as beside:
        commands = beside.submit(the_commands_add_list_pause_resume_and_delete_a_schedule, client)
        killed, members = 0, fleet.members_of("timer")
        next_kill = time.monotonic()
        while datetime.now(UTC) < end:
            if time.monotonic() >= next_kill:  # SIGKILL one, in turn, and start it again
                member = members[killed % len(members)]
                fleet.kill(member)
                fleet.start_role(member)
                killed, next_kill = killed + 1, time.monotonic() + KILL_EVERY_S
            time.sleep(0.2)
        commands.result()
    wanted = ticks_of(found, end)
    # A tick is published up to a look (about a second) after its time: the last is awaited before
    # the schedule is deleted, or a delete in that second would leave it unpublished, as it should.
    assert wait_until(lambda: client.schedules.fired().get(name, found.since) >= wanted[-1], SETTLE_S)
    client.schedules.delete(name, by="ops-lead")
    deleted = datetime.now(UTC)
    assert len(wanted) == TICKS and killed >= TIMERS, (len(wanted), killed)
    ids = [schedules.task_id(name, t) for t in wanted]
    assert wait_until(lambda: all(started(client, t) for t in ids), SETTLE_S), [
        t for t in ids if not started(client, t)
    ]
    shown = [client.wait_settled(t, SETTLE_S) for t in ids]
    assert {s["stage"] for s in shown} == {"closed"}, [s for s in shown if s["stage"] != "closed"][:3]
    # one refund per tick, done once
    assert all([a["status"] for a in s["actions"].values()] == ["succeeded"] for s in shown), shown[:2]
    # and no other task of the schedule's: none for a tick twice, none before its since, and after
    # `end` only ticks published before the delete (a timer behind, say a broker restarted by a
    # module beside this one, publishes the ticks it owes in one look)
    made = sorted(r["id"] for r in client.list_tasks() if r["id"].startswith(f"{name}-"))
    later = ticks_of(found, deleted)[len(ids) :]
    assert made[: len(ids)] == ids and set(made[len(ids) :]) <= {schedules.task_id(name, t) for t in later}, (
        made[len(ids) :]
    )


def the_commands_add_list_pause_resume_and_delete_a_schedule(client: Client) -> None:
    """The commands, on schedules of their own, while another schedule ticks."""
    mark = os.urandom(3).hex()  # names of this run's own, on a stack kept from an earlier run
    nightly, quick = f"nightly-{mark}", f"quick-{mark}"
    added = wakeful(
        "schedule", "add", nightly, "--cron", "0 3 * * *", "--workflow", "refund",
        "--payload", '{"amount": 120}', "--by", "ops-lead", "--json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert doc(added)["next_tick"].endswith("T03:00:00+00:00"), added.stdout
    again = wakeful("schedule", "add", nightly, "--every", "1h", "--workflow", "refund", "--by", "ops-lead")
    assert again.returncode != 0 and "exists" in again.stderr, again
    wrong = wakeful(
        "schedule", "add", "bad", "--cron", "0 25 * * *", "--workflow", "refund", "--by", "ops-lead"
    )
    assert wrong.returncode != 0 and "hour" in wrong.stderr, wrong.stderr
    stranger = wakeful("schedule", "add", "x", "--every", "1h", "--workflow", "refund", "--by", "mallory")
    assert stranger.returncode != 0 and "not an operator" in stranger.stderr, stranger.stderr
    started_quick = wakeful(
        "schedule", "add", quick, "--every", "1s", "--workflow", "refund", "--payload", '{"amount": 90}',
        "--by", "ops-lead",
    )  # fmt: skip
    assert started_quick.returncode == 0, started_quick.stderr
    # A record planted in the schedules that is no schedule: listed with why, ticking nothing,
    # never stopping the timers, and deleted like any other.
    client.admin.hset(keys.AUTH_SCHEDULES, f"planted-{mark}", b'{"schema_version": 1, "name": 7')
    assert wait_until(lambda: quick in client.schedules.fired(), 30)
    assert wakeful("schedule", "pause", quick, "--by", "ops-lead", "--reason", "quiet").returncode == 0
    paused_at = client.schedules.fired()[quick]
    listed = doc(wakeful("schedule", "list", "--json"))["schedules"]
    assert {r["name"]: r["paused"] for r in listed if r["name"] in (nightly, quick)} == {
        nightly: False,
        quick: True,
    }, listed
    # over two ticks' worth of time, a paused schedule publishes none
    assert not wait_until(lambda: client.schedules.fired()[quick] != paused_at, 2.5)
    assert wakeful("schedule", "resume", quick, "--by", "ops-lead").returncode == 0
    assert wait_until(lambda: client.schedules.fired()[quick] > paused_at, 30)
    [planted] = [r for r in listed if r["name"] == f"planted-{mark}"]
    assert planted["error"].startswith("unreadable"), planted
    for name in (quick, nightly, f"planted-{mark}"):
        assert wakeful("schedule", "delete", name, "--by", "ops-lead").returncode == 0
    history = doc(wakeful("schedule", "history", "--json"))["history"]
    assert [(r["name"], r["action"]) for r in history if r["name"] == quick] == [
        (quick, "add"),
        (quick, "pause"),
        (quick, "resume"),
        (quick, "delete"),
    ]
    assert not {nightly, quick} & {r["name"] for r in doc(wakeful("schedule", "list", "--json"))["schedules"]}


def test_a_schedule_of_another_tenant_starts_its_tasks_in_that_tenant_signed_by_its_own_scheduler(
    timers: tuple[Client, Fleet],
) -> None:
    """D113: `--tenant` registers the tenant's own scheduler, whose key the timers sign its ticks
    with: each tick's task is the tenant's, in its namespace, and none is the default tenant's."""
    client, _ = timers
    mark = os.urandom(3).hex()
    tenant, name = f"sched-{mark}", f"tenanted-{mark}"
    added = wakeful(
        "schedule", "add", name, "--every", "1s", "--workflow", "refund", "--payload", '{"amount": 90}',
        "--tenant", tenant, "--by", "ops-lead", "--json",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert f"signed by scheduler@{tenant}" in added.stderr and doc(added)["tenant"] == tenant, added
    try:
        assert wait_until(lambda: name in client.schedules.fired(), 30)
        tick = client.schedules.fired()[name]  # the newest published, before the delete forgets it
    finally:
        assert wakeful("schedule", "delete", name, "--by", "ops-lead").returncode == 0
    task_id = ids.task_in(tenant, schedules.task_id(name, tick))
    assert wait_until(lambda: started(client, task_id), SETTLE_S)
    assert client.wait_settled(task_id, SETTLE_S)["stage"] == "closed"
    security = client.store.load(task_id).security
    assert (security.tenant, security.principal_ref) == (tenant, f"principal:scheduler@{tenant}")
    assert not started(client, schedules.task_id(name, tick))  # nothing in the default tenant's namespace
