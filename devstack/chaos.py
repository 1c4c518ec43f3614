"""`wakeful chaos --tasks N --kills K`: run N tasks while killing random workers K times at random
moments (SIGKILL, then a restart), then check the invariants and print a report:

- every task is terminal or resumable (closed, needs_review, quarantined; or waiting with its
  deadline registered): none is lost;
- at most one effect per op key: no task has two ledger entries;
- every accepted event was applied once: each has a receipt and sits in its task's inbox, and each
  task's state_version equals the number of distinct messages it applied.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections import Counter
from typing import Any

from wakeful.cli.client import REQUESTER, Client
from wakeful.core.settings import Settings
from wakeful.devstack import stack
from wakeful.devstack.fleet import Fleet
from wakeful.devstack.process import Say
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.state import keys

LEASE_TTL_MS = 2000  # a killed holder's lease lapses quickly, as a shorter TTL would in production
RATE = 100.0  # tasks offered per second
SETTLED = {"closed", "needs_review", "quarantined"}


def run(settings: Settings, tasks: int, kills: int, seed: int | None, say: Say) -> dict[str, Any]:
    rng = random.Random(seed)
    stack.up(settings, say)
    client = Client(settings)
    client.reset_authority()
    fleet = Fleet({**os.environ, "WAKEFUL_LEASE_TTL_MS": str(LEASE_TTL_MS), "WAKEFUL_MODEL": "rules"}).start()
    killed: Counter[str] = Counter()
    started = time.monotonic()
    try:
        warm, _ = client.new_task(10)
        client.wait_settled(warm, 60)
        sent, task_ids = _plan(client, tasks, rng)
        span = tasks / RATE + 5.0
        killer = threading.Thread(
            target=_killer, args=(fleet, kills, span, rng, killed), kwargs={"say": say}, daemon=True
        )
        say(f"running {tasks} tasks at ~{RATE:.0f}/s while killing {kills} workers at random ...")
        killer.start()
        for i in range(0, len(sent), 10):
            client.publisher.publish_many(sent[i : i + 10], timeout=60)
            time.sleep(10 / (RATE * 1.5))
        killer.join()
        say("kills done; waiting for every task to settle ...")
        report = _check(client, sent, task_ids, timeout=max(120.0, tasks / 10))
    finally:
        fleet.stop()
        client.close()
    report |= {
        "kills": sum(killed.values()),
        "killed": dict(killed),
        "seconds": round(time.monotonic() - started, 1),
    }
    report["ok"] = (
        report["lost"] == 0 and report["duplicate_effects"] == 0 and report["misapplied_events"] == 0
    )
    return report


def _plan(client: Client, tasks: int, rng: random.Random) -> tuple[list[events.SignedEvent], list[str]]:
    requester, alice = client.signer(REQUESTER), client.signer("alice")
    sent, task_ids = [], []
    for _ in range(tasks):
        task_id = f"x-{uuid.uuid4().hex[:12]}"  # new ids every run, even with the same seed
        needs = rng.random() < 0.4
        sent.append(sign_event(requester, events.CREATE, {"amount": 2500 if needs else 300}, task_id=task_id))
        if needs:
            sent.append(sign_event(alice, events.APPROVE, {"version": 1}, task_id=task_id))
        task_ids.append(task_id)
    return sent, task_ids


def _killer(
    fleet: Fleet, kills: int, span: float, rng: random.Random, killed: Counter[str], *, say: Say
) -> None:
    moments = sorted(rng.uniform(0, span) for _ in range(kills))
    origin = time.monotonic()
    for at in moments:
        time.sleep(max(0.0, origin + at - time.monotonic()))
        role = rng.choice(fleet.roles)
        fleet.kill(role)
        killed[role] += 1
        time.sleep(rng.uniform(0.1, 1.0))
        fleet.start_role(role)
    say(f"killed {sum(killed.values())} workers: {dict(killed)}")


def _check(
    client: Client, sent: list[events.SignedEvent], task_ids: list[str], timeout: float
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    shown: dict[str, dict[str, Any]] = {}
    pending = list(task_ids)
    while pending and time.monotonic() < deadline:
        for task_id in pending:
            try:
                shown[task_id] = client.show(task_id)
            except Exception as exc:  # not created yet, or unreadable: keep waiting
                shown[task_id] = {"stage": "missing", "error": str(exc)}
        pending = [t for t in pending if shown[t]["stage"] not in SETTLED]
        if pending:
            time.sleep(0.5)
    resumable = [t for t in pending if _waits_with_deadline(client, shown[t])]
    lost = [t for t in pending if t not in resumable]
    duplicates = [t for t in task_ids if len(shown[t].get("ledger", [])) > 1]
    misapplied = []
    for event in sent:
        task_id = event.task_id or ""
        raw = client.admin.get(keys.receipt(event.event_id, task_id, key_id=event.key_id))
        applied = keys.event_identity(event.key_id, event.event_id)
        if raw is None or not client.admin.sismember(keys.inbox(task_id), applied):
            misapplied.append(event.event_id)
    for task_id in task_ids:
        if shown[task_id].get("state_version") not in (None, client.admin.scard(keys.inbox(task_id))):
            misapplied.append(f"{task_id}: state_version != applied messages")
    stages = Counter(s["stage"] for s in shown.values())
    return {
        "tasks": len(task_ids),
        "events": len(sent),
        "stages": dict(stages),
        "refunded": sum(1 for s in shown.values() if s.get("ledger")),
        "resumable": len(resumable),
        "lost": len(lost),
        "lost_tasks": lost[:10],
        "duplicate_effects": len(duplicates),
        "misapplied_events": len(misapplied),
        "misapplied_examples": misapplied[:5],
    }


def _waits_with_deadline(client: Client, shown: dict[str, Any]) -> bool:
    if shown.get("stage") != "awaiting_approval":
        return False
    members: list[bytes] = client.admin.zrangebyscore(keys.DEADLINES, "-inf", "+inf")  # type: ignore[assignment]
    return any(m.startswith(f"{shown['id']}|".encode()) for m in members)


def render(r: dict[str, Any]) -> str:
    verdict = "OK" if r["ok"] else "FAILED"
    return "\n".join(
        [
            f"chaos {verdict}: {r['tasks']} tasks, {r['events']} events, {r['kills']} kills {r['killed']} "
            f"in {r['seconds']} s",
            f"stages            : {r['stages']}",
            f"refunded          : {r['refunded']}",
            f"lost tasks        : {r['lost']} {r['lost_tasks'] or ''}",
            f"resumable waiting : {r['resumable']}",
            f"duplicate effects : {r['duplicate_effects']}",
            f"misapplied events : {r['misapplied_events']} {r['misapplied_examples'] or ''}",
        ]
    )
