"""`wakeful chaos [--app X] --tasks N --kills K`: run N tasks of the app's traffic
(bench/traffic.py) while killing random workers K times at random moments (SIGKILL, then a
restart), then check the invariants and print a report:

- every task is settled or resumable (closed, needs_review, quarantined; or at any stage with a
  pending wait whose deadline is registered): none is lost;
- at most one effect per op key, counted at the app's downstream (the bank's ledger, the supplier
  register's records), not in wakeful's own action log;
- every accepted event was applied once: each has a receipt and sits in its task's inbox, and each
  task's state_version equals the number of distinct messages it applied.

It also says how many tasks ended off their plan (another stage, or another number of effects),
which is not an invariant the runtime promises under every policy, but is a surprise here.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from wakeful.bench.traffic import Planned, Traffic, load_traffic, per_op_key, plan_tasks, warm_up
from wakeful.core.process import Say
from wakeful.core.settings import Settings
from wakeful.devstack import stack
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.sdk.app import ENV, load_app
from wakeful.state import keys

LEASE_TTL_MS = 2000  # a killed holder's lease lapses quickly, as a shorter TTL would in production
RATE = 100.0  # tasks offered per second
BURST = 5  # tasks published together
SETTLED = {"closed", "needs_review", "quarantined"}


def run(
    settings: Settings,
    tasks: int,
    kills: int,
    seed: int | None,
    say: Say,
    *,
    replicas: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    traffic = load_traffic(load_app(settings.app))  # before anything starts: a missing one is one line
    rng = random.Random(seed)
    stack.up(settings, say)
    client = Client(settings)
    client.reset_authority()
    env = {**os.environ, "WAKEFUL_LEASE_TTL_MS": str(LEASE_TTL_MS), "WAKEFUL_MODEL": "rules"}
    fleet = Fleet(env | ({ENV: settings.app} if settings.app else {}), replicas=replicas).start()
    killed: Counter[str] = Counter()
    started = time.monotonic()
    try:
        warm_up(client, traffic)
        mark = traffic.mark(client.admin)
        paths = [rng.random() < traffic.share for _ in range(tasks)]
        plans = plan_tasks(client, traffic, paths, rng, "x")
        span = tasks / RATE + 5.0
        killer = threading.Thread(
            target=_killer, args=(fleet, kills, span, rng, killed), kwargs={"say": say}, daemon=True
        )
        say(f"running {tasks} {client.app.name} tasks at ~{RATE:.0f}/s while killing {kills} workers ...")
        killer.start()
        publish(client, plans)
        killer.join()
        say("kills done; waiting for every task to settle ...")
        report = check(client, traffic, plans, mark, timeout=max(120.0, tasks / 5))
    finally:
        fleet.stop()
        client.close()
    report |= {
        "app": client.app.name,
        "processes": len(fleet.members),
        "kills": sum(killed.values()),
        "killed": dict(killed),
        "seconds": round(time.monotonic() - started, 1),
    }
    report["ok"] = (
        report["lost"] == 0 and report["duplicate_effects"] == 0 and report["misapplied_events"] == 0
    )
    return report


def publish(client: Client, plans: list[Planned], rate: float = RATE) -> None:
    """Publish the plans' events in bursts of BURST tasks, `rate` tasks a second."""
    origin = time.monotonic()
    for i in range(0, len(plans), BURST):
        burst = [event for p in plans[i : i + BURST] for event in p.sent]
        client.publisher.publish_many(burst, timeout=60)
        time.sleep(max(0.0, origin + (i + BURST) / rate - time.monotonic()))


def _killer(
    fleet: Fleet, kills: int, span: float, rng: random.Random, killed: Counter[str], *, say: Say
) -> None:
    moments = sorted(rng.uniform(0, span) for _ in range(kills))
    origin = time.monotonic()
    for at in moments:
        time.sleep(max(0.0, origin + at - time.monotonic()))
        member = rng.choice(fleet.members)  # any process of any role: with replicas, one of several
        fleet.kill(member)
        killed[member] += 1
        time.sleep(rng.uniform(0.1, 1.0))
        fleet.start_role(member)
    say(f"killed {sum(killed.values())} workers: {dict(killed)}")


def _settle(client: Client, task_ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    shown: dict[str, dict[str, Any]] = {}
    pending = list(task_ids)
    while pending and time.monotonic() < deadline:
        for task_id in pending:
            try:
                shown[task_id] = client.show(task_id)
            except Exception as exc:  # not created yet, or unreadable: keep waiting
                shown[task_id] = {"id": task_id, "stage": "missing", "error": str(exc)}
        pending = [t for t in pending if shown[t]["stage"] not in SETTLED]
        if pending:
            time.sleep(0.5)
    return shown


def check(
    client: Client, traffic: Traffic, plans: list[Planned], mark: str, timeout: float
) -> dict[str, Any]:
    """Wait up to `timeout` for the tasks to settle, then count what the module docstring says."""
    task_ids = [p.task_id for p in plans]
    shown = _settle(client, task_ids, timeout)
    pending = [t for t in task_ids if shown[t]["stage"] not in SETTLED]
    resumable = [t for t in pending if waits_with_deadline(client, shown[t])]
    lost = [t for t in pending if t not in resumable]
    found, _ = traffic.effects(client.admin, mark)
    effects = per_op_key(found, task_ids)
    duplicates = sorted(f"{op} x{n}" for counts in effects.values() for op, n in counts.items() if n > 1)
    off_plan = [
        f"{p.task_id}: {shown[p.task_id]['stage']} with {sum(effects[p.task_id].values())} effects"
        for p in plans
        if (shown[p.task_id]["stage"], sum(effects[p.task_id].values())) != (p.plan.settles, p.plan.effects)
    ]
    misapplied = misapplied_events(client, [e for p in plans for e in p.sent])
    for task_id in task_ids:
        if shown[task_id].get("state_version") not in (None, client.admin.scard(keys.inbox(task_id))):
            misapplied.append(f"{task_id}: state_version != applied messages")
    return {
        "tasks": len(task_ids),
        "events": sum(len(p.sent) for p in plans),
        "second_path": sum(p.second for p in plans),
        "second_path_means": traffic.second_path,
        "stages": dict(Counter(s["stage"] for s in shown.values())),
        "with_effects": sum(1 for counts in effects.values() if counts),
        "effects": sum(sum(counts.values()) for counts in effects.values()),
        "resumable": len(resumable),
        "lost": len(lost),
        "lost_tasks": lost[:10],
        "duplicate_effects": len(duplicates),
        "duplicate_examples": duplicates[:5],
        "off_plan": len(off_plan),
        "off_plan_examples": off_plan[:5],
        "misapplied_events": len(misapplied),
        "misapplied_examples": misapplied[:5],
    }


def misapplied_events(client: Client, sent: list[events.SignedEvent]) -> list[str]:
    """The ids of events with no receipt, or not in their task's inbox: each should be applied once."""
    pipe = client.admin.pipeline(transaction=False)
    for event in sent:
        task_id = event.task_id or ""
        pipe.exists(keys.receipt(event.event_id, task_id, key_id=event.key_id))
        pipe.sismember(keys.inbox(task_id), keys.event_identity(event.key_id, event.event_id))
    replies = pipe.execute()
    return [e.event_id for i, e in enumerate(sent) if not (replies[2 * i] and replies[2 * i + 1])]


def waits_with_deadline(client: Client, shown: dict[str, Any]) -> bool:
    """A task at any stage with a pending wait whose deadline is registered: resumable, not lost."""
    if not shown.get("pending_waits"):
        return False
    members: list[bytes] = client.admin.zrangebyscore(keys.DEADLINES, "-inf", "+inf")  # type: ignore[assignment]
    return any(m.startswith(f"{shown['id']}|".encode()) for m in members)


def render(r: dict[str, Any]) -> str:
    verdict = "OK" if r["ok"] else "FAILED"
    return "\n".join(
        [
            f"chaos {verdict} ({r['app']}): {r['tasks']} tasks, {r['events']} events, {r['kills']} kills "
            f"{r['killed']} in {r['seconds']} s",
            f"second path       : {r['second_path']} {r['second_path_means']}",
            f"stages            : {r['stages']}",
            f"tasks with effects: {r['with_effects']} ({r['effects']} effects at the downstream)",
            f"lost tasks        : {r['lost']} {r['lost_tasks'] or ''}",
            f"resumable waiting : {r['resumable']}",
            f"duplicate effects : {r['duplicate_effects']} {r['duplicate_examples'] or ''}",
            f"misapplied events : {r['misapplied_events']} {r['misapplied_examples'] or ''}",
            f"off their plan    : {r['off_plan']} {r['off_plan_examples'] or ''}",
        ]
    )
