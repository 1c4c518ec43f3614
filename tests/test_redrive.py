"""Redis lost in the relay's lag gives back every applied event (D87), on a private stack (the test
deletes every wakeful key of the stack it runs on).

Tasks wait for approvals; the relay is paused (SIGSTOP); the approvals are applied and their
refunds booked, all in Redis and none on the log; then the relay dies, the workers stop, every
`wk:*` key is deleted, and `wakeful recover` runs as a user runs it. The log alone gives the tasks
back at `awaiting_approval`: recover moves the gate's group back to what the log does not reflect,
so when the workers start again each approval is applied once more, exactly once, its receipt is
answered again, and the refund's op key finds its first booking at the bank.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from helpers import BankClient, private_stack, process_paused, run_cli

from wakeful.core import ids, kafka_auth, topics
from wakeful.core.process import wait_until
from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.recover import run as recovery
from wakeful.schemas import events
from wakeful.schemas.events import SignedEvent
from wakeful.sdk.workflow import CLOSED
from wakeful.state import keys

TASKS = 6
SETTLE_S = 120.0

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    with private_stack(tmp_path_factory.mktemp("redrive")) as env:
        # The relay sweeps its outboxes, and puts its watermark on the log, every second.
        yield env | {"WAKEFUL_OUTBOX_SWEEP_S": "1", "WAKEFUL_MODEL": "rules"}


def approve(client: BankClient, task_id: str) -> SignedEvent:
    """alice's approval of the task's pending wait, sent and not waited for."""
    cp = client.store.load(task_id)
    wait = next(w for w in cp.execution.pending_waits if w.wait_for == "approval")
    return client.send(
        "alice",
        events.APPROVE,
        {"version": cp.state_version},
        task_id=ids.named_by(cp.security.tenant, task_id),
        correlation_id=wait.correlation_id,
    )


def all_marked(fleet: Fleet, since: float) -> bool:
    """Whether a sweep of the relay after `since` found every message it published under its
    watermark, and the relay swept again a second later: the watermark is sent without waiting
    for the broker, so a relay paused at once may never have delivered it."""
    marked: float | None = None
    for line in (fleet.dir / "relay.log").read_bytes().splitlines():
        said = orjson.loads(line)
        if said.get("event") != "relay.sweep" or said["ts"] <= since:
            continue
        if marked is not None and said["ts"] > marked + 1.0:
            return True
        if marked is None and said.get("unmarked") == 0:
            marked = said["ts"]
    return False


def wipe(client: BankClient) -> int:
    """Every wakeful key deleted, as `wakeful chaos --lose-redis wipe` does (the bank's stay)."""
    names = list(client.admin.scan_iter(match=f"{keys.PREFIX}:*", count=1000))
    for start in range(0, len(names), 500):
        client.admin.delete(*names[start : start + 500])
    return len(names)


def test_recover_check_says_the_redriven_topics_keep_enough(private: dict[str, str]) -> None:
    """Run first, on a stack whose log covers all Redis holds."""
    checked = run_cli(private, "recover", "--check", "--json", timeout=120)
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert orjson.loads(checked.stdout)["retention"] == []


def waiting(client: BankClient) -> list[str]:
    """TASKS tasks made, each over the limit: each will wait for alice's approval."""
    made = [client.new_task(2500) for _ in range(TASKS)]  # over the limit: each waits for alice
    assert all(receipt["status"] == "accepted" for _, receipt in made), made
    return [task_id for task_id, _ in made]


def logged(client: BankClient, fleet: Fleet, tasks: list[str], stage: str) -> None:
    """Each task at `stage`, that change on the log and, once the relay swept again, under its
    watermark. Without one the re-drive starts at the earliest offsets kept: slower, and as
    correct; that it was used is asserted after the outcomes."""
    for task_id in tasks:
        assert client.wait_stage(task_id, {stage}, SETTLE_S)["stage"] == stage
    assert wait_until(lambda: not any(client.admin.exists(keys.outbox(t)) for t in tasks), 60)
    published = time.time()
    wait_until(lambda: all_marked(fleet, published), 60, interval=0.2)


def pause(fleet: Fleet, role: str) -> None:
    proc = fleet.procs[role]
    proc.send_signal(signal.SIGSTOP)
    assert wait_until(lambda: process_paused(proc.pid), 30)


def closed_in_redis_only(client: BankClient, fleet: Fleet, tasks: list[str]) -> dict[str, int]:
    """Every task closed with one booking while the relay is paused; then the relay dies paused,
    so nothing of it reaches the log. The tasks' versions."""
    for task_id in tasks:
        assert client.wait_settled(task_id, SETTLE_S)["stage"] == CLOSED
    assert all(len(client.bank.entries(t)) == 1 for t in tasks)
    fleet.kill("relay")
    return {t: client.store.load(t).state_version for t in tasks}


def lose_and_recover(
    client: BankClient, env: dict[str, str], tasks: list[str], back_at: str
) -> dict[str, Any]:
    """Every wakeful key deleted, `wakeful recover` run as a user runs it: its report. The log alone
    gives each task back at `back_at`."""
    assert wipe(client) > 0
    assert wait_until(lambda: not recovery.busy(client.admin), 30, interval=0.2)
    ran = run_cli(env, "recover", "--json", timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    report: dict[str, Any] = orjson.loads(ran.stdout)
    print("recover's re-drive:", report.get("redrive"))  # shown with -s: D87's figures
    assert report["restored"] >= len(tasks) and report["failed"] == {}
    for task_id in tasks:
        assert client.store.load(task_id).stage == back_at
    return report


def applied_once(client: BankClient, before: dict[str, int], sent: dict[str, SignedEvent]) -> None:
    """Each task closed again at the version it had before the loss (no change applied twice), one
    booking at the bank, and each approval's receipt answered."""
    for task_id, version in before.items():
        shown = client.wait_settled(task_id, SETTLE_S)
        assert shown["stage"] == CLOSED, (task_id, shown["stage"])
        assert client.store.load(task_id).state_version == version
        assert len(client.bank.entries(task_id)) == 1
    for task_id, event in sent.items():
        receipt = client.receipt(event.event_id, task_id, SETTLE_S, key_id=event.key_id)
        assert receipt["status"] == "accepted", (task_id, receipt)
    # on the log too before the fleet stops, so that the next test's loss starts from a clean log
    assert wait_until(lambda: not any(client.admin.exists(keys.outbox(t)) for t in before), 60)


@pytest.fixture
def client(private: dict[str, str]) -> Iterator[BankClient]:
    made = BankClient(Settings.from_env(private))
    try:
        made.reset_authority()
        recovery.journal_authority(made.settings, made.admin, made.store.sealer)
        yield made
    finally:
        made.close()


def fleet_in(private: dict[str, str], logs: Path) -> Fleet:
    logs.mkdir()
    return Fleet(private, logs=logs).start()


def test_approvals_applied_while_the_relay_lagged_are_applied_once_after_redis_is_lost_and_recovered(
    private: dict[str, str], client: BankClient, tmp_path: Path
) -> None:
    fleet = fleet_in(private, tmp_path / "before")
    try:
        tasks = waiting(client)
        logged(client, fleet, tasks, "awaiting_approval")
        pause(fleet, "relay")
        sent = {task_id: approve(client, task_id) for task_id in tasks}
        before = closed_in_redis_only(client, fleet, tasks)
    finally:
        fleet.stop()
    report = lose_and_recover(client, private, tasks, "awaiting_approval")
    fleet = fleet_in(private, tmp_path / "after")
    try:
        applied_once(client, before, sent)
    finally:
        fleet.stop()
    redriven = report["redrive"]
    assert redriven["watermarks"] >= 1 and redriven["changes_with_source"] >= TASKS
    assert redriven["wakes_published"] and redriven["deleted_by_retention"] == []
    assert all(line.startswith("wakeful.wake[") for line in redriven["wakes_published"])


def test_a_close_made_while_the_relay_lagged_runs_its_own_proposal_again_and_books_nothing_twice(
    private: dict[str, str], client: BankClient, tmp_path: Path
) -> None:
    """The approvals are on the log, the executor's closes are not: each task comes back with its
    proposal outstanding, and recover publishes that proposal again instead of waking the task."""
    fleet = fleet_in(private, tmp_path / "before")
    try:
        tasks = waiting(client)
        for task_id in tasks:
            assert client.wait_stage(task_id, {"awaiting_approval"}, SETTLE_S)["stage"] == "awaiting_approval"
        fleet.stop_role("executor")
        asked = {t: client.store.load(t).state_version + 1 for t in tasks}  # the approval's change
        sent = {task_id: approve(client, task_id) for task_id in tasks}
        assert wait_until(lambda: all(client.store.load(t).state_version >= v for t, v in asked.items()), 60)
        back_at = client.store.load(tasks[0]).stage
        logged(client, fleet, tasks, back_at)
        pause(fleet, "relay")
        fleet.start_role("executor")
        before = closed_in_redis_only(client, fleet, tasks)
    finally:
        fleet.stop()
    report = lose_and_recover(client, private, tasks, back_at)
    fleet = fleet_in(private, tmp_path / "after")
    try:
        applied_once(client, before, sent)
    finally:
        fleet.stop()
    published = " ".join(report["redrive"]["proposals_published"])
    assert all(f"{t} from wakeful.proposals" in published for t in tasks), published


def keep(admin: AdminClient, topic: str, retention_ms: int) -> None:
    entry = ConfigEntry("retention.ms", str(retention_ms), incremental_operation=AlterConfigOpType.SET)
    asked = admin.incremental_alter_configs([ConfigResource("topic", topic, incremental_configs=[entry])])
    for future in asked.values():
        future.result(30)


def test_recover_check_names_a_redriven_topic_that_keeps_too_little_and_what_to_set(
    private: dict[str, str],
) -> None:
    settings = Settings.from_env(private)
    admin = AdminClient(kafka_auth.client_config(settings, kafka_auth.ADMIN))
    keep(admin, topics.PROPOSALS, 3_600_000)
    try:
        checked = run_cli(private, "recover", "--check", "--json", timeout=120)
        assert checked.returncode == 2
        said = orjson.loads(checked.stdout)["retention"]
        assert any(topics.PROPOSALS in why and "retention.ms=86400000" in why for why in said), said
        assert "retention.ms=86400000" in checked.stderr
    finally:
        keep(admin, topics.PROPOSALS, 7 * 86_400_000)


def test_a_create_held_over_its_tenants_limit_comes_back_after_redis_is_lost_and_recovered(
    private: dict[str, str], client: BankClient, tmp_path: Path
) -> None:
    """D115: a create held over its tenant's limit made no change, so nothing on the log names it;
    it pins its partition's floor while it is held, so that recover re-drives its wake although
    later tasks' changes on the same partitions are on the log. After the loss it is judged again
    (the limit came back with authority) and starts once the limit is lifted."""
    tenant = f"held-{uuid.uuid4().hex[:6]}"
    client.add_signer(tenant, (events.CREATE,), tenant=tenant)
    client.limits.set(f"tenant:{tenant}", 1, by="ops-lead", reason="one at a time")
    recovery.journal_authority(client.settings, client.admin, client.store.sealer)
    refund = {"amount": 2500, "currency": "EUR"}  # over the approval limit: it waits, in flight
    fleet = fleet_in(private, tmp_path / "before")
    try:
        sent = {name: client.send(tenant, events.CREATE, refund, task_id=name) for name in ("a", "b", "c")}
        said = {
            name: client.receipt(e.event_id, ids.task_in(tenant, name), SETTLE_S, key_id=e.key_id)["status"]
            for name, e in sent.items()
        }
        assert sorted(said.values()) == ["accepted", "held", "held"], said  # one in flight, two held
        held = [name for name, status in said.items() if status == "held"]
        [first] = [name for name, status in said.items() if status == "accepted"]
        assert client.admin.zcard(keys.fair_queue(tenant)) == 2
        # Later tasks on every partition, their changes on the log under a watermark: each
        # partition's floor moves past the held creates' wakes but for the pins.
        later = [client.new_task(2500)[0] for _ in range(24)]
        logged(client, fleet, [*later, ids.task_in(tenant, first)], "awaiting_approval")
    finally:
        fleet.stop()
    lose_and_recover(client, private, later, "awaiting_approval")
    fleet = fleet_in(private, tmp_path / "after")
    try:
        assert wait_until(lambda: client.admin.zcard(keys.fair_flight(tenant)) >= 1, SETTLE_S)
        client.limits.unset(f"tenant:{tenant}", by="ops-lead", reason="let them in")
        for name in held:
            task_id = ids.task_in(tenant, name)
            assert client.wait_stage(task_id, {"awaiting_approval"}, SETTLE_S)["stage"] == "awaiting_approval"
            assert client.store.load(task_id).state_version == 1  # created once
    finally:
        fleet.stop()
