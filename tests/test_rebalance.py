"""Consumer groups that change while tasks flow: for the gate and the executor, a process joins the
role's group (a replica started mid-run), another leaves it (SIGTERM: it finishes its batch and
stops) and a third is SIGKILLed and never comes back, so each group rebalances three ways while
the refund's traffic runs through it. Every task still finishes once: none lost, no effect twice
at the downstream, every event applied once. Under both group protocols (docs/decisions.md D41).

The counts come from `wakeful chaos`'s own check (bench/chaos.py), the processes from its fleet."""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import pytest

from wakeful.bench import chaos
from wakeful.bench.traffic import load_traffic, plan_tasks, split, warm_up
from wakeful.consumers.kafka.supervisor import ROLES
from wakeful.core.settings import GROUP_PROTOCOLS, Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client

TASKS = 120
RATE = 10.0  # tasks a second, so that tasks are in flight through every move below
MOVED = ("gate", "executor")
SETTLE_S = 180.0  # for every task to finish once the moves are done
# Above the test's own bounds: twelve role processes start (on a group that classic members may first
# have to leave, under KIP-848) and warm up (up to 180 s), then the tasks have SETTLE_S.
pytestmark = pytest.mark.timeout(SETTLE_S + 300)


@pytest.fixture()
def client(settings: Settings, kafka_bootstrap: str, redis_url: str) -> Iterator[Client]:
    c = Client(settings)
    c.reset_authority()
    yield c
    c.close()


@pytest.mark.parametrize("protocol", GROUP_PROTOCOLS)
def test_every_task_finishes_once_while_processes_join_leave_and_die_in_a_group(
    protocol: str, client: Client, settings: Settings
) -> None:
    traffic = load_traffic(client.app)
    env = {**os.environ, "WAKEFUL_MODEL": "rules", "WAKEFUL_LEASE_TTL_MS": str(chaos.LEASE_TTL_MS)}
    env |= {"WAKEFUL_KAFKA_GROUP_PROTOCOL": protocol}
    fleet = Fleet(env, replicas=dict.fromkeys(ROLES, 2)).start()
    try:
        warm_up(client, traffic)
        mark = traffic.mark(client.admin)
        # One task per partition in turn, so every process, and each move, meets some.
        paths = split(TASKS, traffic.share)
        plans = plan_tasks(client, traffic, paths, random.Random(7), "r", spread=settings.partitions)
        quarter = TASKS // 4
        chaos.publish(client, plans[:quarter], rate=RATE)
        joined = [fleet.add_member(role) for role in MOVED]  # gate#3, executor#3
        chaos.publish(client, plans[quarter : 2 * quarter], rate=RATE)
        left = [fleet.members_of(role)[1] for role in MOVED]  # gate#2, executor#2
        for member in left:
            fleet.stop_role(member)
        chaos.publish(client, plans[2 * quarter : 3 * quarter], rate=RATE)
        for role in MOVED:  # the first process of each, never started again
            fleet.kill(role)
        chaos.publish(client, plans[3 * quarter :], rate=RATE)
        report = chaos.check(client, traffic, plans, mark, timeout=SETTLE_S)
    finally:
        counters = fleet.stop()

    assert (report["lost"], report["duplicate_effects"], report["misapplied_events"]) == (0, 0, 0), report
    assert report["stages"] == {"closed": TASKS} and report["effects"] == TASKS, report
    assert report["off_plan"] == 0, report["off_plan_examples"]
    for member in joined:  # it was given partitions, and took tasks from the ones who went
        assert counters[member]["messages"] > 0, (member, counters.get(member))
    for member in left:  # it stopped as asked, with its batch done and its counters written
        assert member in counters, member
