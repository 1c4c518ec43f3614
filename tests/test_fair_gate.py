"""A tenant's in-flight limit at the gate and the timer's look, driven through the roles' own
handle() and look() against the stack `wakeful dev up` starts (D108): a create over the limit is
held, never refused, and costs no second slot when it comes again; a create the workflow refuses
is refused at once; a task that ends gives its slot back, and the timer then lets the oldest held
create in and wakes it, and its replay starts the task; a held create of a higher priority goes
before older ones (D110); a workflow at its limit holds back only its own creates (D112)."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from helpers import BankClient, executor_for, gate_for, inbound_wake, refund_proposal, role_message

from wakeful.authority.kept import moved
from wakeful.consumers.timer import main as timer_main
from wakeful.consumers.timer.fair import Releaser
from wakeful.core import ids, topics
from wakeful.core.errors import ConfigError
from wakeful.core.log import Log
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.state import acl, fair, keys

pytestmark = pytest.mark.timeout(120)
OVER_LIMIT = 2500  # above the approval limit: the task waits for an approver, in flight
OPERATOR = "ops-lead"


@dataclass
class Tenant:
    """A tenant of its own for one test, with a signer that may create and cancel its tasks."""

    name: str
    principal: str

    def task(self, outside: str) -> str:
        return ids.task_in(self.name, outside)


@pytest.fixture()
def tenant(client: BankClient) -> Iterator[Tenant]:
    name = f"fair-{uuid.uuid4().hex[:8]}"
    client.add_signer(name, (events.CREATE, events.CANCEL), tenant=name)
    yield Tenant(name, name)
    with contextlib.suppress(ConfigError):  # its own limit only: others on the stack may hold theirs
        client.limits.unset(f"tenant:{name}", by=OPERATOR, reason="the test is done")
    moved(client.admin)


@pytest.fixture(scope="module")
def gate(client: BankClient) -> Any:
    return gate_for(client.settings)


def sent(
    client: BankClient, gate: Any, who: Tenant, kind: str, payload: dict[str, Any], *, outside: str
) -> Any:
    """One signed event as inbound wakes the gate with it, handled; the wake message, to send again."""
    event = sign_event(client.signer(who.principal), kind, payload, task_id=outside)
    wake = inbound_wake(event, who.task(outside), principal=who.principal)
    msg = role_message(client.settings, "inbound", topics.WAKE, who.task(outside), wake.encode())
    gate.handle(msg)
    return event, msg


def receipt(client: BankClient, event: Any, task_id: str) -> dict[str, Any]:
    return client.receipt(event.event_id, task_id, 5.0, key_id=event.key_id)


def later_millisecond() -> None:
    """Return once the clock has moved to the next millisecond: two creates held in one are in
    no order of age, and their queue then orders them by name."""
    now = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 <= now:  # ends: the clock moves on within a millisecond
        time.sleep(0.0002)


def create(client: BankClient, gate: Any, who: Tenant, outside: str, amount: int = OVER_LIMIT) -> Any:
    return sent(client, gate, who, events.CREATE, {"amount": amount, "currency": "EUR"}, outside=outside)


def test_a_create_over_its_tenants_limit_is_held_never_refused(
    client: BankClient, gate: Any, tenant: Tenant
) -> None:
    client.limits.set(f"tenant:{tenant.name}", 1, by=OPERATOR)
    first, _ = create(client, gate, tenant, "one")
    assert receipt(client, first, tenant.task("one"))["status"] == "accepted"
    second, _ = create(client, gate, tenant, "two")
    held = receipt(client, second, tenant.task("two"))
    assert held["status"] == "held" and "limit" in held["reason"], held
    assert client.admin.zrange(keys.fair_flight(tenant.name), 0, -1) == [tenant.task("one").encode()]
    assert client.admin.zrange(keys.fair_queue(tenant.name), 0, -1) == [tenant.task("two").encode()]
    assert client.admin.sismember(keys.FAIR_QUEUED, tenant.name)
    assert not client.admin.exists(keys.state(tenant.task("two")))  # no task yet: nothing decided
    assert client.admin.llen(keys.held(tenant.task("two"))) == 1  # its wake kept to replay
    assert client.limits.now(f"tenant:{tenant.name}") == {"in_flight": 1, "held": 1}  # as `limits list` says


def test_a_redelivered_create_takes_no_second_slot(client: BankClient, gate: Any, tenant: Tenant) -> None:
    client.limits.set(f"tenant:{tenant.name}", 2, by=OPERATOR)
    _, msg = create(client, gate, tenant, "one")
    gate.handle(msg)  # the same wake again: a redelivery after a crash
    assert client.admin.zcard(keys.fair_flight(tenant.name)) == 1
    second, _ = create(client, gate, tenant, "two")
    assert receipt(client, second, tenant.task("two"))["status"] == "accepted"  # the second slot is free


def test_a_create_the_workflow_refuses_is_refused_at_once_never_held(
    client: BankClient, gate: Any, tenant: Tenant
) -> None:
    client.limits.set(f"tenant:{tenant.name}", 1, by=OPERATOR)
    create(client, gate, tenant, "one")
    refused, _ = sent(client, gate, tenant, events.CREATE, {"amount": -5, "currency": "EUR"}, outside="bad")
    assert receipt(client, refused, tenant.task("bad"))["status"] == "rejected"
    assert client.admin.zcard(keys.fair_queue(tenant.name)) == 0


def test_an_ended_task_gives_its_slot_to_the_oldest_held_create_which_the_timer_lets_in(
    client: BankClient, gate: Any, tenant: Tenant
) -> None:
    client.limits.set(f"tenant:{tenant.name}", 1, by=OPERATOR)
    create(client, gate, tenant, "one")
    older, _ = create(client, gate, tenant, "two")
    later_millisecond()  # a held create's place is the millisecond the gate held it in
    create(client, gate, tenant, "three")
    # Unmarked: the timers of any fleet on this stack look at marked tenants only, every 50 ms while
    # creates are held, and would let "two" in before this test's own look does.
    client.admin.srem(keys.FAIR_QUEUED, tenant.name)
    cancelled, _ = sent(client, gate, tenant, events.CANCEL, {"reason": "not needed"}, outside="one")
    assert receipt(client, cancelled, tenant.task("one"))["stage"] == "cancelled"
    assert client.admin.zcard(keys.fair_flight(tenant.name)) == 0  # its slot given back
    releaser = Releaser(acl.connect(client.settings, "timer"), Log(role="timer"))
    releaser.look([tenant.name])
    flight = client.admin.zrange(keys.fair_flight(tenant.name), 0, -1)
    assert flight == [tenant.task("two").encode()]  # the oldest, and only as many as fit
    assert client.admin.zrange(keys.fair_queue(tenant.name), 0, -1) == [tenant.task("three").encode()]
    due: list[bytes] = client.admin.zrange(keys.DEADLINES, 0, -1)  # type: ignore[assignment]
    woken = [m.decode() for m in due if m.decode().startswith(f"{tenant.task('two')}|")]
    assert len(woken) == 1
    due_ms = int(woken[0].rpartition("|")[2])
    gate.handle(deadline_wake(client, tenant.task("two"), due_ms))  # as the timer's tick publishes it
    let_in = receipt(client, older, tenant.task("two"))
    assert (let_in["status"], let_in["stage"]) == ("accepted", "awaiting_approval"), let_in
    assert client.admin.llen(keys.held(tenant.task("two"))) == 0


def test_a_task_the_executor_closes_gives_its_slot_back(
    client: BankClient, gate: Any, tenant: Tenant
) -> None:
    client.limits.set(f"tenant:{tenant.name}", 1, by=OPERATOR)
    create(client, gate, tenant, "one", amount=300)  # under the approval limit: ready for its refund
    task_id = tenant.task("one")
    assert client.admin.zrange(keys.fair_flight(tenant.name), 0, -1) == [task_id.encode()]
    version = client.store.load(task_id).state_version
    proposal = refund_proposal(task_id, version, 300)
    executor = executor_for(client.settings, [])
    message = role_message(client.settings, "proposer", topics.PROPOSALS, task_id, proposal.encode())
    executor.handle(message)
    assert client.store.load(task_id).stage == "closed"
    assert client.admin.zcard(keys.fair_flight(tenant.name)) == 0
    # A close whose give-back a crash (or a Redis out of memory) cut short after its commit: the
    # proposal is handled again, finds its task moved on, and gives the slot back all the same.
    client.admin.zadd(keys.fair_flight(tenant.name), {task_id: 1})
    executor.handle(message)
    assert client.admin.zcard(keys.fair_flight(tenant.name)) == 0


def deadline_wake(client: BankClient, task_id: str, due_ms: int) -> Any:
    wake = timer_main.deadline_wake(task_id, due_ms)  # as the timer's tick publishes it
    return role_message(client.settings, "timer", topics.WAKE, task_id, wake.encode())


def test_a_held_create_of_a_higher_priority_goes_before_older_ones_of_a_lower(
    client: BankClient, tenant: Tenant
) -> None:
    # The tenant's limit of 1 is taken: no timer on the stack lets any of these in meanwhile.
    client.limits.set(f"tenant:{tenant.name}", 1, by=OPERATOR)
    gate_redis, timer_redis = acl.connect(client.settings, "gate"), acl.connect(client.settings, "timer")
    first, old, urgent, later = (tenant.task(n) for n in ("first", "old", "urgent", "later"))
    line = fair.Line(tenant.name)  # the tenant's own queue
    try:
        assert fair.take(gate_redis, line, first, 1, 1_000)
        assert not fair.take(gate_redis, line, old, 1, 2_000, priority=0)
        assert not fair.take(gate_redis, line, urgent, 1, 3_000, priority=5)
        assert not fair.take(gate_redis, line, later, 1, 4_000, priority=5)
        assert not fair.take(gate_redis, line, old, 1, 5_000, priority=9)  # keeps its first place
        heads, _ = fair.heads(timer_redis, line, 4, 200)  # were there room for all three
        assert heads == [urgent, later, old]
    finally:
        client.admin.delete(keys.fair_flight(tenant.name), keys.fair_queue(tenant.name))
        client.admin.srem(keys.FAIR_QUEUED, tenant.name)


def test_a_workflow_at_its_limit_holds_its_own_creates_and_none_of_the_tenants_others(
    client: BankClient, tenant: Tenant
) -> None:
    """D112: a workflow held to 2 of each tenant's tasks queues the tenant's third in the workflow's
    own queue; the tenant's create of another workflow, queued while one is held, is let in at the
    timer's next look all the same, and the held one once a task of its workflow gives its slot back."""
    workflow = ("fairtest", f"w{uuid.uuid4().hex[:8]}")  # an app no stack runs: no role's limit
    scope = f"workflow:{workflow[0]}:{workflow[1]}"
    client.limits.set(scope, 2, by=OPERATOR, reason="two at once")
    gate_redis, timer_redis = acl.connect(client.settings, "gate"), acl.connect(client.settings, "timer")
    held_line = fair.Line(tenant.name, workflow, own_queue=True)
    other_line = fair.Line(tenant.name, ("fairtest", "other"))
    a, b, c, d = (tenant.task(n) for n in "abcd")
    try:
        assert fair.take(gate_redis, held_line, a, fair.MOST, 1_000, workflow_limit=2)
        assert fair.take(gate_redis, held_line, b, fair.MOST, 1_001, workflow_limit=2)
        assert not fair.take(gate_redis, held_line, c, fair.MOST, 1_002, workflow_limit=2)
        assert client.admin.zrange(keys.fair_wqueue(tenant.name, *workflow), 0, -1) == [c.encode()]
        assert not fair.take(gate_redis, other_line, d, fair.MOST, 1_003)  # one is held: it waits its turn
        assert client.admin.zrange(keys.fair_queue(tenant.name), 0, -1) == [d.encode()]
        client.admin.srem(keys.FAIR_QUEUED, tenant.name)  # this test's look only, not the fleets'
        releaser = Releaser(timer_redis, Log(role="timer"))
        assert releaser.look([tenant.name]) == 1  # d; not c: its workflow is at its limit
        assert client.admin.zscore(keys.fair_flight(tenant.name), d) is not None
        assert client.admin.zrange(keys.fair_wqueue(tenant.name, *workflow), 0, -1) == [c.encode()]
        fair.give_back(gate_redis, tenant.name, b, workflow)  # b ended
        assert releaser.look([tenant.name]) == 1  # c
        flight = client.admin.zrange(keys.fair_wflight(tenant.name, *workflow), 0, -1)
        assert sorted(flight) == sorted([a.encode(), c.encode()])
        assert releaser.look([tenant.name]) == 0
        assert not client.admin.exists(keys.fair_queues(tenant.name))  # every queue found empty, dropped
        assert not client.admin.sismember(keys.FAIR_QUEUED, tenant.name)
        # A name planted in the tenant's set of queues is logged and dropped, and holds nothing back.
        client.admin.sadd(keys.fair_queues(tenant.name), b"not a queue", b'["only one"]')
        assert releaser.look([tenant.name]) == 0
        assert not client.admin.exists(keys.fair_queues(tenant.name))
    finally:
        client.limits.unset(scope, by=OPERATOR, reason="the test is done")
        client.admin.delete(
            keys.fair_flight(tenant.name),
            keys.fair_queue(tenant.name),
            keys.fair_queues(tenant.name),
            keys.fair_wflight(tenant.name, *workflow),
            keys.fair_wqueue(tenant.name, *workflow),
            keys.fair_wflight(tenant.name, "fairtest", "other"),
        )
        client.admin.srem(keys.FAIR_QUEUED, tenant.name)


def test_a_slot_whose_task_is_not_stored_is_given_back_after_an_hour_and_no_stored_tasks_is(
    client: BankClient, gate: Any, tenant: Tenant
) -> None:
    """A leak (a task removed by hand, a create let in and refused at its replay) would hold its
    tenant to fewer tasks for good: the timer's mend gives back a slot an hour old whose task is not
    stored, never a stored task's, nor a slot taken within the hour (a create not yet replayed)."""
    client.limits.set(f"tenant:{tenant.name}", 5, by=OPERATOR)
    create(client, gate, tenant, "stored")
    stored, gone, recent = tenant.task("stored"), tenant.task("gone"), tenant.task("recent")
    workflow = keys.fair_wflight(tenant.name, "refund", "refund")
    now_ms = int(time.time() * 1000)
    client.admin.zadd(keys.fair_flight(tenant.name), {stored: 1, gone: 1, "not a task id": 1, recent: now_ms})
    client.admin.zadd(workflow, {gone: 1, stored: 1})
    releaser = Releaser(acl.connect(client.settings, "timer"), Log(role="timer"))
    assert releaser.mend() >= 3  # this tenant's two (and any other test's left on the stack)
    assert sorted(client.admin.zrange(keys.fair_flight(tenant.name), 0, -1)) == sorted(
        [stored.encode(), recent.encode()]
    )
    assert client.admin.zrange(workflow, 0, -1) == [stored.encode()]
    client.admin.delete(keys.fair_flight(tenant.name), workflow)
