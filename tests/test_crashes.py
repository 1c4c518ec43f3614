"""Crash it on purpose: real worker processes killed with SIGKILL at every named step boundary, then
restarted, for each bundled app (the fleet runs it from WAKEFUL_APP), with the app's own traffic
(devstack/traffic.py). After each crash: every task settles where its plan says, its downstream
recorded exactly one effect per op key and wakeful's action log knows each of them, every event is
accepted and applied, and no lease is left stuck.

The onboarding runs two tool steps and, on its second path, a compensation. A fault point fires
the first time the process reaches it, which in the plain run is the registration; the payment
step and the compensation get runs of their own, in which the timer is held back until every task
has registered, so the first executor step of the armed process is the payment (or the refusal of
it that starts the compensation)."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

from wakeful.cli.client import REQUESTER, Client
from wakeful.core import faults
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.devstack.traffic import Planned, Traffic, load_traffic, per_op_key, plan_tasks, warm_up
from wakeful.examples import onboarding as onb
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.state import keys

REFUND, ONBOARDING = "wakeful.examples.refund:app", "wakeful.examples.onboarding:app"
LEASE_TTL_MS = 1500  # so a lease held by a killed worker lapses quickly
# Points the onboarding's executor reaches on the payment step, and on the refused payment whose
# failure starts the compensation, which ends in the undo.
UNDO_POINT = "executor.after_undo"
PAYMENT_POINTS = sorted(p for p in faults.POINTS if faults.role_of(p) == "executor" and p != UNDO_POINT)
COMPENSATION_POINTS = [
    "executor.after_consume",
    "executor.after_intent",
    UNDO_POINT,
    "executor.before_offsets",
]
# The plain run: two tasks on the first path and one on the second (refund: two through an
# approval and one under the limit; onboarding: two paid and one compensated).
PATHS = {REFUND: [True, True, False], ONBOARDING: [False, False, True]}
NAMES = {REFUND: "refund", ONBOARDING: "onboarding"}
SETTLE_S = 90.0


@dataclasses.dataclass
class Stack:
    client: Client
    traffic: Traffic
    fleet: Fleet


@pytest.fixture(scope="module")
def app_spec(request: pytest.FixtureRequest) -> str:
    spec: str = request.param
    return spec


@pytest.fixture(scope="module")
def stack(app_spec: str, settings: Settings, kafka_bootstrap: str, redis_url: str) -> Iterator[Stack]:
    """One process per role driving `app_spec`, warmed up by one task of its traffic."""
    client = Client(dataclasses.replace(settings, app=app_spec))
    client.reset_authority()  # and a dev signer for every principal the app names
    traffic = load_traffic(client.app)
    env = {**os.environ, "WAKEFUL_APP": app_spec, "WAKEFUL_MODEL": "rules"}
    fleet = Fleet(env | {"WAKEFUL_LEASE_TTL_MS": str(LEASE_TTL_MS)}).start()
    try:
        warm_up(client, traffic)
        yield Stack(client, traffic, fleet)
    finally:
        fleet.stop()
        client.close()


def wait_until(check: Callable[[], bool], timeout: float, step: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return False


def send(s: Stack, paths: list[bool]) -> tuple[list[Planned], str]:
    """Plan and publish one task per path, without waiting; and the downstream's mark before."""
    mark = s.traffic.mark(s.client.admin)
    planned = plan_tasks(s.client, s.traffic, paths, random.Random(), "c")
    s.client.publisher.publish_many([e for p in planned for e in p.sent])
    return planned, mark


def send_deadline_refund(client: Client) -> events.SignedEvent:
    """A refund above the limit whose approval wait lapses in a second: the refund's only timer work."""
    task_id = f"c-{os.urandom(6).hex()}"
    event = sign_event(
        client.signer(REQUESTER), events.CREATE, {"amount": 5000, "wait_s": 1}, task_id=task_id
    )
    client.publisher.publish(event)
    return event


def crash(s: Stack, point: str) -> None:
    """Wait for the armed process to kill itself at `point`, then start its role again, clean."""
    role = faults.role_of(point)
    proc = s.fleet.procs[role]
    assert wait_until(lambda: proc.poll() is not None, 60), f"{point} was never reached"
    assert proc.returncode == -signal.SIGKILL
    s.fleet.start_role(role)


def check_settled_once(s: Stack, point: str, planned: list[Planned], mark: str) -> dict[str, Counter[str]]:
    """Every task settled on its plan with one effect per op key; returns the effects per task."""
    client = s.client
    for p in planned:
        shown = client.wait_settled(p.task_id, SETTLE_S)
        assert shown["stage"] == p.plan.settles, (point, shown)
    found, _ = s.traffic.effects(client.admin, mark)
    effects = per_op_key(found, [p.task_id for p in planned])
    for p in planned:
        counts, actions = effects[p.task_id], client.show(p.task_id)["actions"]
        # one effect per op key, at the downstream, and each one known to the action log as done
        assert sum(counts.values()) == p.plan.effects and set(counts.values()) == {1}, (point, counts)
        assert {op: actions.get(op, {}).get("status") for op in counts} == dict.fromkeys(counts, "succeeded")
    # no event lost: every one has an outcome, and every accepted one is in its task's inbox
    for event in [e for p in planned for e in p.sent]:
        receipt = client.receipt(event.event_id, event.task_id, timeout=30, key_id=event.key_id)
        assert receipt["status"] == "accepted", (point, receipt)
        applied = keys.event_identity(event.key_id, event.event_id)
        assert client.admin.sismember(keys.inbox(receipt["task_id"]), applied)
    return effects


def check_no_lease_stuck(client: Client, task_ids: list[str]) -> None:
    """A lease held by the killed process lapses; every other one was released."""
    assert wait_until(
        lambda: not any(client.admin.exists(keys.lease(t)) for t in task_ids), LEASE_TTL_MS / 1000 + 5
    )


# One fleet per app (module scope), not one per point.
@pytest.mark.parametrize("app_spec", list(PATHS), ids=NAMES.get, indirect=True, scope="module")
@pytest.mark.parametrize("point", sorted(set(faults.POINTS) - {UNDO_POINT}))  # no refund undoes
def test_every_task_settles_with_one_effect_per_op_key_after_a_sigkill_at(
    app_spec: str, point: str, stack: Stack
) -> None:
    role = faults.role_of(point)
    stack.fleet.restart(role, fault=point)
    planned, mark = send(stack, PATHS[app_spec])
    # The refund's timer has work only when a deadline lapses.
    lapsing = send_deadline_refund(stack.client) if app_spec == REFUND and role == "timer" else None
    crash(stack, point)

    check_settled_once(stack, point, planned, mark)
    task_ids = [p.task_id for p in planned]
    if lapsing is not None:
        shown = stack.client.wait_settled(lapsing.task_id or "", 60)
        assert shown["stage"] == "needs_review" and "escalated" in (shown["last_refusal"] or ""), shown
        task_ids.append(shown["id"])
    check_no_lease_stuck(stack.client, task_ids)


@pytest.mark.parametrize("app_spec", [ONBOARDING], ids=NAMES.get, indirect=True, scope="module")
@pytest.mark.parametrize(
    ("second", "point"),
    [
        *(pytest.param(False, p, id=f"payment-{p}") for p in PAYMENT_POINTS),
        *(pytest.param(True, p, id=f"compensation-{p}") for p in COMPENSATION_POINTS),
    ],
)
def test_no_onboarding_pays_or_undoes_twice_after_a_sigkill_in_its_second_step_at(
    app_spec: str, second: bool, point: str, stack: Stack
) -> None:
    fleet, client = stack.fleet, stack.client
    fleet.stop_role("timer")  # the payment step is woken through the timer: hold it back
    try:
        planned, mark = send(stack, [second, second])
        for p in planned:
            shown = client.wait_stage(p.task_id, {onb.SCHEDULING}, SETTLE_S)
            assert shown["stage"] == onb.SCHEDULING and not shown["pending_waits"], shown
        fleet.restart("executor", fault=point)
    finally:
        fleet.start_role("timer")
    crash(stack, point)

    effects = check_settled_once(stack, point, planned, mark)
    for p in planned:  # registered, then paid; or registered, then undone once the payment was refused
        kinds = sorted(op.split(":")[0] for op in effects[p.task_id])
        assert kinds == (["SUPPLIER-REG", "UNDO"] if second else ["FIRST-PAY", "SUPPLIER-REG"]), effects
    check_no_lease_stuck(client, [p.task_id for p in planned])
