"""A tenant's in-flight limit on worker processes (D108), with the nap app's tasks, which stay open
for as long as their create says: a tenant never has more tasks open than its limit, and every
create held over it is let in and closes exactly once; a tenant's flood holds back no other
tenant's tasks; a limit raised live lets held creates in at the timer's next look, the change
in the limits' history; and a workflow's limit holds each tenant's tasks of it (D112)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from cli_run import with_tests_on_path
from helpers import run_cli
from nap_app import NAPPING, PAID, PAIRING, POKE, SIGNED

from wakeful.authority.kept import moved
from wakeful.core import ids
from wakeful.core.errors import ConfigError
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.state import keys

FIRST_RECEIPT_S = 120.0  # the first event also waits for the fresh roles to join their groups
OPERATOR = "ops-lead"
LONG = {"sleep_s": 600}  # a task that stays open until it is poked
pytestmark = pytest.mark.timeout(300)
LOGS: dict[str, Path] = {}  # where the module's fleet logs
MADE: list[str] = []  # the tenants the module made, whose limits it lifts when it ends


@dataclasses.dataclass
class Tenant:
    name: str

    def task(self, outside: str) -> str:
        return ids.task_in(self.name, outside)

    @property
    def flight(self) -> str:
        return keys.fair_flight(self.name)

    @property
    def queue(self) -> str:
        return keys.fair_queue(self.name)


@pytest.fixture(scope="module")
def fair(settings: Settings, kafka_bootstrap: str, redis_url: str) -> Iterator[Client]:
    client = Client(dataclasses.replace(settings, app="nap_app:app"))
    client.reset_authority()
    fleet = Fleet(with_tests_on_path(dict(os.environ)) | {"WAKEFUL_APP": "nap_app:app"}).start()
    LOGS["dir"] = fleet.dir
    try:
        warm = tenant(client)  # the roles join their groups before anything is timed
        _, receipt = client.create({"sleep_s": 0.1}, warm.name, timeout=FIRST_RECEIPT_S)
        assert receipt["status"] == "accepted", receipt
        yield client
    finally:
        for name in MADE:  # this module's own limits only: others on the stack may hold theirs
            with contextlib.suppress(ConfigError):
                client.limits.unset(f"tenant:{name}", by=OPERATOR, reason="the module is done")
        moved(client.admin)
        fleet.stop()
        client.close()


def tenant(client: Client) -> Tenant:
    """A tenant of its own, whose signer (named as the tenant) may create, poke and pair its tasks."""
    name = f"t{uuid.uuid4().hex[:8]}"
    MADE.append(name)
    client.add_signer(name, (events.CREATE, POKE, SIGNED, PAID), tenant=name)
    return Tenant(name)


def flood(client: Client, who: Tenant, count: int, payload: dict[str, Any], prefix: str = "n") -> list[str]:
    """`count` creates sent at once, none waited for; the runtime's ids of their tasks."""
    outside = [f"{prefix}{i:03d}" for i in range(count)]
    for name in outside:
        client.send(who.name, events.CREATE, payload, task_id=name)
    return [who.task(name) for name in outside]


def closed(client: Client, task_ids: list[str], known: set[str] | None = None) -> int:
    """How many of `task_ids` are closed (`known`: those found closed before, not read again)."""
    done = known if known is not None else set()
    for task_id in set(task_ids) - done:
        if client.admin.exists(keys.state(task_id)) and client.store.load(task_id).stage == "closed":
            done.add(task_id)
    return len(done)


def most_open_at_once(client: Client, task_ids: list[str]) -> int:
    """The most of `task_ids` open at one moment, from when the gate stored each (its receipt's
    line in the gate's log, by the wall clock) to when it closed (its last change): an account
    kept apart from the count. Not the task's creation time: a held create's task is dated by
    when its sender's event came, as a replayed wake is judged as of then."""
    stored: dict[str, float] = {}
    for line in (LOGS["dir"] / "gate.log").read_bytes().splitlines():
        if b'"gate.receipt"' in line and b'"accepted"' in line:
            said = orjson.loads(line)
            stored.setdefault(said["task_id"], said["ts"])
    moments: list[tuple[float, int]] = []
    for task_id in task_ids:
        created = stored.get(task_id)
        assert created is not None, f"the gate's log has no receipt for {task_id}"
        ended = client.store.load(task_id).updated_at
        moments += [(created, 1), (datetime.timestamp(ended), -1)]
    most = now = 0
    for _, step in sorted(moments, key=lambda m: (m[0], m[1])):  # an end before a start at one ms
        now += step
        most = max(most, now)
    return most


def test_a_tenant_never_has_more_than_its_limit_open_and_every_held_create_closes_once(fair: Client) -> None:
    client, who = fair, tenant(fair)
    client.limits.set(f"tenant:{who.name}", 3, by=OPERATOR, reason="a flood")
    task_ids = flood(client, who, 30, {"sleep_s": 0.3})
    seen: list[int] = []
    done: set[str] = set()

    def all_closed() -> bool:
        seen.append(int(client.admin.zcard(who.flight)))
        return closed(client, task_ids, done) == len(task_ids)

    assert wait_until(all_closed, 60, interval=0.01), f"closed {len(done)} of {len(task_ids)}"
    assert max(seen) == 3, seen  # full while the flood lasted, and never past its limit
    # a slot is given back just after the change that closed its task: seen closed a moment before
    assert wait_until(lambda: client.admin.zcard(who.flight) == 0 and client.admin.zcard(who.queue) == 0, 10)
    assert not client.admin.sismember(keys.FAIR_QUEUED, who.name)
    for task_id in task_ids:  # created once, closed once: nothing ran twice
        cp = client.store.load(task_id)
        assert (cp.stage, cp.state_version) == ("closed", 2), (task_id, cp.stage, cp.state_version)
    assert wait_until(lambda: client.admin.zcard(keys.index_created(who.name)) == len(task_ids), 30)
    assert most_open_at_once(client, task_ids) <= 3


def test_a_flooding_tenant_does_not_hold_back_another_tenants_tasks(fair: Client) -> None:
    client, flooding, other = fair, tenant(fair), tenant(fair)
    client.limits.set(f"tenant:{flooding.name}", 2, by=OPERATOR, reason="a flood")
    # Not the default scope: that would hold every tenant of the modules that share this stack.
    client.limits.set(f"tenant:{other.name}", 3, by=OPERATOR, reason="a limit of its own")
    flooded = flood(client, flooding, 40, LONG)
    assert wait_until(lambda: client.admin.zcard(flooding.queue) == 38, 30), client.admin.zcard(
        flooding.queue
    )
    quick = flood(client, other, 5, {"sleep_s": 0.3})
    assert wait_until(lambda: closed(client, quick) == 5, 30), f"closed {closed(client, quick)} of 5"
    # The other tenant's five all closed while the flood's creates were still held: none let in.
    assert client.admin.zcard(flooding.queue) == 38 and client.admin.zcard(flooding.flight) == 2
    assert sum(client.admin.exists(keys.state(t)) for t in flooded) == 2
    tidy(client, flooding, flooded)


def test_a_limit_raised_live_releases_held_creates_and_is_in_history(fair: Client) -> None:
    client, who = fair, tenant(fair)
    env = with_tests_on_path(dict(os.environ)) | {"WAKEFUL_APP": "nap_app:app"}
    said = run_cli(env, "authority", "limits", "set", "--tenant", who.name, "--max-in-flight", "1",
                   "--by", OPERATOR, "--reason", "one at a time", timeout=60)  # fmt: skip
    assert said.returncode == 0, said.stderr
    task_ids = flood(client, who, 4, LONG)
    assert wait_until(lambda: client.admin.zcard(who.queue) == 3, 30)
    listed = run_cli(env, "authority", "limits", "list", "--json", timeout=60)
    [row] = [r for r in orjson.loads(listed.stdout)["limits"] if r["scope"] == f"tenant:{who.name}"]
    assert (row["max_in_flight"], row["in_flight"], row["held"]) == (1, 1, 3), row  # what it holds now
    raised = run_cli(env, "authority", "limits", "set", "--tenant", who.name, "--max-in-flight", "4",
                     "--by", OPERATOR, "--reason", "room for all", timeout=60)  # fmt: skip
    assert raised.returncode == 0, raised.stderr
    assert "was 1" in raised.stderr, raised.stderr

    def all_napping() -> bool:
        stored = [client.store.load(t) for t in task_ids if client.admin.exists(keys.state(t))]
        return len(stored) == 4 and all(cp.stage == NAPPING for cp in stored)

    assert wait_until(all_napping, 30)
    assert client.admin.zcard(who.flight) == 4 and client.admin.zcard(who.queue) == 0
    assert wait_until(lambda: not client.admin.sismember(keys.FAIR_QUEUED, who.name), 5)
    shown = run_cli(env, "authority", "limits", "history", "--json", timeout=60)
    assert shown.returncode == 0, shown.stderr
    mine = [r for r in orjson.loads(shown.stdout)["history"] if r["scope"] == f"tenant:{who.name}"]
    assert [(r["action"], r["max_in_flight"], r["by"], r["reason"]) for r in mine] == [
        ("set", "1", OPERATOR, "one at a time"),
        ("set", "4", OPERATOR, "room for all"),
    ]
    tidy(client, who, task_ids)


def test_a_workflow_at_its_limit_holds_each_tenants_tasks_of_it_and_none_of_their_others(
    fair: Client,
) -> None:
    """D112: the nap workflow held to two of each tenant's tasks in flight: a tenant's flood of
    naps never has more than two open, another tenant's naps are not held by it, and the flooding
    tenant's create of another workflow starts while its naps are held."""
    client, who, other = fair, tenant(fair), tenant(fair)
    env = with_tests_on_path(dict(os.environ)) | {"WAKEFUL_APP": "nap_app:app"}
    said = run_cli(env, "authority", "limits", "set", "--workflow", "nap", "--max-in-flight", "2",
                   "--by", OPERATOR, "--reason", "two naps at once", timeout=60)  # fmt: skip
    assert said.returncode == 0, said.stderr
    assert "workflow:naps:nap: at most 2 tasks of each tenant in flight" in said.stderr, said.stderr
    naps_queue = keys.fair_wqueue(who.name, "naps", "nap")
    try:
        naps = flood(client, who, 12, {"sleep_s": 0.3})
        theirs = flood(client, other, 2, {"sleep_s": 0.3})
        assert wait_until(lambda: client.admin.zcard(naps_queue) >= 4, 30), client.admin.zcard(naps_queue)
        client.send(who.name, events.CREATE, {"workflow": "pair"}, task_id="pair")
        pair = who.task("pair")

        def paired() -> bool:
            return bool(client.admin.exists(keys.state(pair))) and client.store.load(pair).stage == PAIRING

        pairing = wait_until(paired, 30)
        assert pairing and client.admin.zcard(naps_queue) > 0  # started while naps were still held
        done: set[str] = set()
        assert wait_until(lambda: closed(client, naps + theirs, done) == 14, 90), f"closed {len(done)} of 14"
    finally:
        lifted = run_cli(
            env, "authority", "limits", "unset", "--workflow", "nap", "--by", OPERATOR, timeout=60
        )
        assert lifted.returncode == 0, lifted.stderr
    assert most_open_at_once(client, naps) <= 2
    for task_id in naps:  # created once, closed once: nothing ran twice
        cp = client.store.load(task_id)
        assert (cp.stage, cp.state_version) == ("closed", 2), (task_id, cp.stage, cp.state_version)
    held = [
        orjson.loads(line)
        for line in (LOGS["dir"] / "gate.log").read_bytes().splitlines()
        if b"gate.fair_held" in line
    ]
    assert {h["tenant"] for h in held} & {who.name, other.name} == {who.name}  # the other's naps went at once
    for kind in (SIGNED, PAID):
        client.send(who.name, kind, {}, task_id="pair")
    assert wait_until(lambda: closed(client, [pair]) == 1, 30)
    assert wait_until(lambda: not client.admin.exists(naps_queue, keys.fair_queues(who.name)), 10)


def tidy(client: Client, who: Tenant, task_ids: list[str]) -> None:
    """Let every held create of `who` in and close its tasks: nothing of this test stays open."""
    # Its own limit lifted (never the others': modules beside it hold theirs): the timer lets its
    # queue in.
    with contextlib.suppress(ConfigError):
        client.limits.unset(f"tenant:{who.name}", by=OPERATOR, reason="the test is done")
    assert wait_until(lambda: sum(client.admin.exists(keys.state(t)) for t in task_ids) == len(task_ids), 30)
    for task_id in task_ids:
        client.send(who.name, POKE, {}, task_id=ids.named_by(who.name, task_id))
    assert wait_until(lambda: closed(client, task_ids) == len(task_ids), 30)
