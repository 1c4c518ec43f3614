"""Crash it on purpose: real worker processes killed with SIGKILL at every named step boundary, then
restarted, for each bundled app (the fleet runs it from WAKEFUL_APP), with the app's own traffic
(bench/traffic.py). After each crash: every task settles where its plan says, its downstream
recorded exactly one effect per op key and wakeful's action log knows each of them, every event is
accepted and applied, and no lease is left stuck.

The onboarding runs two tool steps and, on its second path, a compensation. A fault point fires
the first time the process reaches it, which in the plain run is the registration; the payment
step and the compensation get runs of their own, in which the timer is held back until every task
has registered, so the first executor step of the armed process is the payment (or the refusal of
it that starts the compensation).

The same checks run with three processes per role (`worker all --replicas 3`): the fault is armed
in one of them, which dies there, while the role's other two keep consuming. Tasks are then spread
one per partition, so the armed process has a share of them whichever partitions it holds."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import log_records

from wakeful.bench.traffic import Planned, Traffic, load_traffic, per_op_key, plan_tasks, warm_up
from wakeful.consumers.kafka.supervisor import ROLES
from wakeful.core import faults
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.examples import onboarding as onb
from wakeful.operate.client import REQUESTER, Client
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
# Points the onboarding's executor reaches while it undoes a cancelled task's registration.
CANCEL_POINTS = ["executor.after_consume", UNDO_POINT, "executor.after_advance", "executor.before_offsets"]
# The plain run: two tasks on the first path and one on the second (refund: two through an
# approval and one under the limit; onboarding: two paid and one compensated).
PATHS = {REFUND: [True, True, False], ONBOARDING: [False, False, True]}
NAMES = {REFUND: "refund", ONBOARDING: "onboarding"}
SETTLE_S = 90.0
REPLICAS = 3
# With three processes per role, the onboarding alone, at one point per role and the compensation's
# undo, not every point of both apps: the run at one process per role walks every point already,
# and each costs as much again here (CI's whole suite must stay well under 30 minutes on 2 cores).
# What three processes add is the role's other processes going on while one dies mid-step, and the
# dead one's partitions coming back to its restart; that holds or fails at any point of a role
# alike, so each role gets its point where a second run would do harm (the wake, the transition,
# the effect or the record is out, its mark is not). The onboarding is the app whose traffic
# reaches every role, the timer included, and has the compensation; the refund runs at three per
# role in test_chaos.py.
POINTS_OF_ONE_OF_THREE = [
    "inbound.after_publish",
    "gate.after_cas",
    "proposer.before_offsets",
    "executor.after_downstream_call",
    "timer.after_publish",
    "relay.after_publish",
]
# Due deadlines and outbox records go to whichever timer or relay asks first, so a round of work
# may miss the armed one of three: another round is sent after this long, until REACH_S.
FEED_S = 5.0
REACH_S = 90.0
WARM_S = 180.0  # devstack.traffic.warm_up's own bounds: the first test of each stack pays them
pytestmark = pytest.mark.timeout(WARM_S + REACH_S + SETTLE_S + 60)


@dataclasses.dataclass
class Stack:
    client: Client
    traffic: Traffic
    fleet: Fleet
    spread: int | None  # with several processes per role: the partitions to spread tasks over


@pytest.fixture(scope="module")
def app_spec(request: pytest.FixtureRequest) -> str:
    spec: str = request.param
    return spec


@pytest.fixture(scope="module")
def replicas(request: pytest.FixtureRequest) -> int:
    """Processes per role: 1 unless a test asks for more."""
    count: int = getattr(request, "param", 1)
    return count


@pytest.fixture(scope="module")
def stack(
    app_spec: str, replicas: int, settings: Settings, kafka_bootstrap: str, redis_url: str
) -> Iterator[Stack]:
    """`replicas` processes per role driving `app_spec`, warmed up by one task of its traffic."""
    client = Client(dataclasses.replace(settings, app=app_spec))
    client.reset_authority()  # and a dev signer for every principal the app names
    traffic = load_traffic(client.app)
    env = {**os.environ, "WAKEFUL_APP": app_spec, "WAKEFUL_MODEL": "rules"}
    env |= {"WAKEFUL_LEASE_TTL_MS": str(LEASE_TTL_MS)}
    fleet = Fleet(env, replicas=dict.fromkeys(ROLES, replicas)).start()
    try:
        warm_up(client, traffic)
        yield Stack(client, traffic, fleet, settings.partitions if replicas > 1 else None)
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


def armed(s: Stack, role: str) -> str:
    """The process of `role` that gets the fault: the role itself, or the last of several."""
    return s.fleet.members_of(role)[-1]


def send(s: Stack, paths: list[bool]) -> list[Planned]:
    """Plan and publish one task per path, without waiting. Spread over every partition, the paths
    are repeated until each partition has a task."""
    if s.spread and len(paths) < s.spread:
        paths = (paths * s.spread)[: s.spread]
    planned = plan_tasks(s.client, s.traffic, paths, random.Random(), "c", spread=s.spread)
    s.client.publisher.publish_many([e for p in planned for e in p.sent])
    return planned


def send_deadline_refund(client: Client) -> events.SignedEvent:
    """A refund above the limit whose approval wait lapses in a second: the refund's only timer work."""
    task_id = f"c-{os.urandom(6).hex()}"
    event = sign_event(
        client.signer(REQUESTER), events.CREATE, {"amount": 5000, "wait_s": 1}, task_id=task_id
    )
    client.publisher.publish(event)
    return event


def crash(s: Stack, member: str, point: str, feed: Callable[[], object] | None = None) -> None:
    """Wait for the armed process to kill itself at `point`, then start it again, clean. `feed`
    sends a round of work: now, and with several processes per role, again every FEED_S."""
    proc = s.fleet.procs[member]
    deadline = time.monotonic() + REACH_S
    step = FEED_S if s.spread and feed is not None else REACH_S
    while True:
        if feed is not None:
            feed()
        if wait_until(lambda: proc.poll() is not None, step):
            break
        assert time.monotonic() < deadline, f"{point} was never reached in {member}"
    assert proc.returncode == -signal.SIGKILL
    others = [m for m in s.fleet.members_of(faults.role_of(point)) if m != member]
    assert all(s.fleet.alive(m) for m in others), others  # the role's other processes went on
    s.fleet.start_role(member)


def holding(log: Path, since: int) -> set[int]:
    """The partitions a process holds, by the rebalance lines it logged after byte `since`."""
    held: set[int] = set()
    for _, record in log_records(log, since):
        if record.get("event") == "runner.assigned":
            held |= set(record.get("partitions", []))
        elif record.get("event") in ("runner.revoked", "runner.lost"):
            held -= set(record.get("partitions", []))
    return held


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


def settles_once_after_a_sigkill(s: Stack, app_spec: str, point: str) -> None:
    role = faults.role_of(point)
    member = armed(s, role)
    s.fleet.restart(member, fault=point)
    mark = s.traffic.mark(s.client.admin)
    planned: list[Planned] = []
    lapsing: list[events.SignedEvent] = []

    def feed() -> None:
        planned.extend(send(s, PATHS[app_spec]))
        if app_spec == REFUND and role == "timer":  # the refund's timer has work only when a deadline lapses
            lapsing.append(send_deadline_refund(s.client))

    crash(s, member, point, feed)

    check_settled_once(s, point, planned, mark)
    task_ids = [p.task_id for p in planned]
    for event in lapsing:
        shown = s.client.wait_settled(event.task_id or "", 60)
        assert shown["stage"] == "needs_review" and "escalated" in (shown["last_refusal"] or ""), shown
        task_ids.append(shown["id"])
    check_no_lease_stuck(s.client, task_ids)


@contextlib.contextmanager
def registered(s: Stack, paths: list[bool]) -> Iterator[tuple[str, list[Planned]]]:
    """Onboardings sent on `paths` and each registered, held before their payment step (woken
    through the timer, stopped meanwhile): the downstream's cursor before them, and them."""
    timers = s.fleet.members_of("timer")
    for timer in timers:
        s.fleet.stop_role(timer)
    try:
        mark = s.traffic.mark(s.client.admin)
        planned = send(s, paths)
        for p in planned:
            shown = s.client.wait_stage(p.task_id, {onb.SCHEDULING}, SETTLE_S)
            assert shown["stage"] == onb.SCHEDULING and not shown["pending_waits"], shown
        yield mark, planned
    finally:
        for timer in timers:
            s.fleet.start_role(timer)


def pays_or_undoes_once_after_a_sigkill(s: Stack, second: bool, point: str) -> None:
    fleet, client = s.fleet, s.client
    member = armed(s, "executor")
    with registered(s, [second, second]) as (mark, planned):
        log = fleet.dir / f"{member}.log"
        since = log.stat().st_size if log.exists() else 0
        fleet.restart(member, fault=point)
        if s.spread:
            # One round of work only, so the armed one of three must hold some of its partitions
            # before the timers release it: a restarted KIP-848 member gets them back only once
            # the others have let go, and the work could pass it by meanwhile.
            assert wait_until(lambda: bool(holding(log, since)), REACH_S), f"{member} was given no partition"
    crash(s, member, point)

    effects = check_settled_once(s, point, planned, mark)
    for p in planned:  # registered, then paid; or registered, then undone once the payment was refused
        kinds = sorted(op.split(":")[0] for op in effects[p.task_id])
        assert kinds == (["SUPPLIER-REG", "UNDO"] if second else ["FIRST-PAY", "SUPPLIER-REG"]), effects
    check_no_lease_stuck(client, [p.task_id for p in planned])


# One fleet per app and process count (module scope), not one per point.
@pytest.mark.parametrize("app_spec", list(PATHS), ids=NAMES.get, indirect=True, scope="module")
@pytest.mark.parametrize(
    "point", sorted(set(faults.POINTS) - {UNDO_POINT} - faults.MEMORY_POINTS)
)  # no refund undoes
def test_every_task_settles_with_one_effect_per_op_key_after_a_sigkill_at(
    app_spec: str, point: str, stack: Stack
) -> None:
    settles_once_after_a_sigkill(stack, app_spec, point)


@pytest.mark.parametrize("replicas", [REPLICAS], ids=["three-per-role"], indirect=True, scope="module")
@pytest.mark.parametrize("app_spec", [ONBOARDING], ids=NAMES.get, indirect=True, scope="module")
@pytest.mark.parametrize("point", POINTS_OF_ONE_OF_THREE)
def test_every_task_settles_with_one_effect_per_op_key_when_one_of_three_processes_dies_at(
    app_spec: str, point: str, stack: Stack
) -> None:
    settles_once_after_a_sigkill(stack, app_spec, point)


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
    pays_or_undoes_once_after_a_sigkill(stack, second, point)


def cancels_once_after_a_sigkill(s: Stack, point: str) -> None:
    """Registered onboardings, held before their payment, cancelled while the armed executor dies
    at `point` in their undo: each ends cancelled, its registration undone once, nothing paid."""
    client, member = s.client, armed(s, "executor")
    with registered(s, [False, False]) as (mark, planned):
        s.fleet.restart(member, fault=point)
        for p in planned:
            receipt = client.cancel(p.task_id, "the supplier withdrew", REQUESTER)
            assert receipt["status"] == "accepted", receipt
        crash(s, member, point)
    ended = {
        p.task_id: client.wait_stage(p.task_id, {"cancelled", "needs_review"}, SETTLE_S) for p in planned
    }
    found, _ = s.traffic.effects(client.admin, mark)
    effects = per_op_key(found, [p.task_id for p in planned])
    for p in planned:
        shown = ended[p.task_id]
        assert shown["stage"] == "cancelled", (point, shown)
        [entered] = [op for op in effects[p.task_id] if op.startswith("SUPPLIER-REG")]
        assert effects[p.task_id] == Counter({entered: 1, f"UNDO:{entered}": 1}), (point, effects)
        assert shown["external_refs"]["undone:register_supplier"] == entered
        assert shown["actions"][f"UNDO:{entered}"]["status"] == "succeeded"
    check_no_lease_stuck(client, [p.task_id for p in planned])


@pytest.mark.parametrize("app_spec", [ONBOARDING], ids=NAMES.get, indirect=True, scope="module")
@pytest.mark.parametrize("point", CANCEL_POINTS)
def test_an_onboarding_cancelled_mid_saga_is_undone_once_and_ends_cancelled_after_a_sigkill_at(
    app_spec: str, point: str, stack: Stack
) -> None:
    cancels_once_after_a_sigkill(stack, point)


@pytest.mark.parametrize("replicas", [REPLICAS], ids=["three-per-role"], indirect=True, scope="module")
@pytest.mark.parametrize("app_spec", [ONBOARDING], ids=NAMES.get, indirect=True, scope="module")
def test_no_onboarding_undoes_twice_when_one_of_three_executors_dies_after_its_undo(
    app_spec: str, stack: Stack
) -> None:
    pays_or_undoes_once_after_a_sigkill(stack, True, UNDO_POINT)
