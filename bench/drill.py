"""`wakeful chaos --lose-redis wipe|fresh`: lose Redis mid-workload, rebuild it from Kafka with
`wakeful recover`, and check that nothing was lost and no effect ran twice (D70).

1. The app's traffic starts N tasks; of each task only its first event is sent (a create). The
   rest (an approval, a supplier's reply) is held back: those tasks wait, with deadlines.
2. The executor is stopped, a last burst of tasks is created (their proposals queue up), and an
   executor that dies right after its first downstream call is started: an intent is in flight
   with its call made and no outcome recorded.
3. Once the relay has published every change, Redis loses every wakeful key: `wipe` deletes every
   `wk:*` key under the running fleet; `fresh` moves the fleet to a new, empty Redis on another port
   (the downstreams' own keys are copied over: in production they are other systems).
4. Recovery is refused while workers run; the fleet is stopped; `recover` runs, then runs again
   and must restore nothing; the fleet starts again.
5. The waiting tasks must still wait, with the deadlines they had; then the held events are sent
   and every task must settle as planned, with one effect per op key at the downstream.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from datetime import UTC, datetime
from typing import Any

from wakeful.bench import chaos
from wakeful.bench import log as bench_log
from wakeful.bench.traffic import Planned, load_traffic, plan_tasks, warm_up
from wakeful.core.errors import WakefulError
from wakeful.core.process import Say, port_free, wait_until
from wakeful.core.settings import Settings
from wakeful.devstack import redis_server, stack
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.operate.recover import run as recovery
from wakeful.operate.recover import scan as recovery_scan
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.sdk.app import ENV, load_app
from wakeful.state import keys

MODES = ("wipe", "fresh")
LAST_BURST = 0.1  # share of the tasks created while the executor is down
SETTLE_S = 180.0


def run(settings: Settings, tasks: int, mode: str, seed: int | None, say: Say) -> dict[str, Any]:
    traffic = load_traffic(load_app(settings.app))
    rng = random.Random(seed)
    stack.up(settings, say)
    client = Client(settings)
    client.reset_authority()
    recovery.journal_authority(settings, client.admin, client.store.sealer)  # as the CLI's commands do
    env = {**os.environ, "WAKEFUL_LEASE_TTL_MS": str(chaos.LEASE_TTL_MS), "WAKEFUL_MODEL": "rules"}
    env |= {ENV: settings.app} if settings.app else {}
    fleet = Fleet(env).start()
    report: dict[str, Any] = {"app": client.app.name, "mode": mode, "tasks": tasks}
    try:
        warm_up(client, traffic)
        mark = traffic.mark(client.admin)
        plans = plan_tasks(client, traffic, [rng.random() < traffic.share for _ in range(tasks)], rng, "r")
        say(f"creating {tasks} {client.app.name} tasks, holding back every later event ...")
        _load(client, fleet, plans)
        before = _waiting(client, plans)
        timers = _timers(client, list(before))
        rule = recovery.tombstone_rule(settings, client.app, datetime.now(UTC))
        _, missing, _ = recovery_scan.uncovered(client.admin, settings, say, rule)
        if missing:
            raise WakefulError(
                f"this stack's Redis holds {len(missing)} task(s) its log cannot give back (e.g. "
                f"{sorted(missing.items())[:3]}): the drill would lose them; run it on a stack of its own"
            )
        report["in_flight_at_loss"] = _in_flight(client, plans)
        report["waiting_at_loss"] = len(before)
        flying = len(report["in_flight_at_loss"])
        say(f"losing Redis ({mode}): {len(before)} tasks wait, {flying} intent(s) in flight")
        if mode == "fresh":  # the fleet's Redis is gone: it stops, and comes back on the new one
            fleet.stop()
        client = _lose(settings, client, mode, say)
        if mode == "wipe":  # the fleet still runs on the wiped Redis: recovery must refuse
            wait_until(lambda: bool(recovery.busy(client.admin)), 10, interval=0.2)
            report["refused_while_running"] = _refused(client, say)
            fleet.stop()
        wait_until(lambda: not recovery.busy(client.admin), 30, interval=0.2)
        started = time.monotonic()
        first = _recover(client, say)
        report["recover_s"] = round(time.monotonic() - started, 2)
        report["recovered"] = first.as_dict()
        report["second_run_restored"] = len(_recover(client, say).done.restored)
        # Checked in Redis before any worker runs: the timer index, and each intent still in flight.
        report["timers_kept"] = _timers(client, list(before)) == timers
        report["in_flight_after"] = _in_flight(client, plans)
        fleet = Fleet(env | _redis_env(client)).start()
        report |= _finish(client, traffic, plans, (mark, before), say)
    finally:
        fleet.stop()
        client.close()
        if mode == "fresh":
            stop_fresh(settings)
    report["ok"] = (
        report.get("lost") == 0
        and report.get("duplicate_effects") == 0
        and report.get("misapplied_events") == 0
        and report.get("deadlines_kept") is True
        and report.get("timers_kept") is True
        and report.get("in_flight_after") == report.get("in_flight_at_loss")
        and report.get("refused_while_running", True) is True
        and report.get("second_run_restored") == 0
        and not report.get("recovered", {}).get("failed")
    )
    return report


def _load(client: Client, fleet: Fleet, plans: list[Planned]) -> None:
    """Create the tasks; the last burst while the executor is down, then an executor that dies
    right after its first downstream call; return once the relay has published every change."""
    last = max(1, int(len(plans) * LAST_BURST))
    chaos.publish(client, [_first(p) for p in plans[:-last]])
    _created(client, plans[:-last])
    fleet.stop_role("executor")
    chaos.publish(client, [_first(p) for p in plans[-last:]])
    _created(client, plans[-last:])
    fleet.start_role("executor", fault="executor.after_downstream_call")
    if not wait_until(lambda: not fleet.alive("executor"), 60, interval=0.1):
        raise WakefulError("the executor never reached its first downstream call")
    if not bench_log.drained(client.admin, 60):
        raise WakefulError("the relay did not publish every change within 60 s")


def _first(plan: Planned) -> Planned:
    return dataclasses.replace(plan, sent=plan.sent[:1])


def _created(client: Client, plans: list[Planned]) -> None:
    ids = [p.task_id for p in plans]
    if not wait_until(lambda: all(_exists(client, t) for t in ids), 120, interval=0.3):
        raise WakefulError("not every task was created within 120 s")


def _exists(client: Client, task_id: str) -> bool:
    return bool(client.admin.exists(keys.state(task_id)))


def _waiting(client: Client, plans: list[Planned]) -> dict[str, list[str]]:
    """Each task that waits, and its waits' deadlines."""
    found = {}
    for plan in plans:
        shown = client.show(plan.task_id)
        if shown.get("pending_waits"):
            found[plan.task_id] = sorted(str(w.get("deadline")) for w in shown["pending_waits"])
    return found


def _timers(client: Client, task_ids: list[str]) -> set[str]:
    """The members of the timer index (`<task>|<deadline ms>`) of these tasks."""
    members: list[bytes] = client.admin.zrange(keys.DEADLINES, 0, -1)  # type: ignore[assignment]
    mine = {f"{t}|" for t in task_ids}
    return {m.decode() for m in members if m.decode().split("|")[0] + "|" in mine}


def _in_flight(client: Client, plans: list[Planned]) -> list[str]:
    pipe = client.admin.pipeline(transaction=False)
    for plan in plans:
        pipe.hvals(keys.ops(plan.task_id))
    flying = []
    for plan, entries in zip(plans, pipe.execute(), strict=True):
        flying += [
            f"{plan.task_id} {e.op_key}"
            for e in (ActionLogEntry.decode(raw) for raw in entries)
            if e.status is ActionStatus.IN_FLIGHT
        ]
    return flying


def _lose(settings: Settings, client: Client, mode: str, say: Say) -> Client:
    """Lose every wakeful key; returns the client of the Redis the fleet uses from now on."""
    if mode == "wipe":
        names = list(client.admin.scan_iter(match=f"{keys.PREFIX}:*", count=1000))
        for start in range(0, len(names), 500):
            client.admin.delete(*names[start : start + 500])
        say(f"deleted {len(names)} wakeful keys")
        return client
    fresh = fresh_redis(settings)
    redis_server.start(fresh, say)
    moved = Settings.from_env({**os.environ, "WAKEFUL_REDIS_URL": fresh.redis_url})
    new = Client(moved)
    copied = 0
    for name in client.admin.scan_iter(count=1000):
        dumped: bytes | None = client.admin.dump(name)
        if dumped is not None and not name.startswith(f"{keys.PREFIX}:".encode()):
            new.admin.restore(name, 0, dumped, replace=True)
            copied += 1
    say(f"moved to a new, empty Redis at {fresh.redis_url}; copied {copied} downstream keys over")
    client.close()
    return new


def fresh_redis(settings: Settings) -> Settings:
    """The settings of the new Redis `fresh` moves to: a state dir of its own beside the stack's,
    the stack's secrets and keyring, and the first free port past the stack's Redis."""
    port = next(p for p in range(settings.redis_port + 7, settings.redis_port + 100) if port_free(p))
    return Settings.from_env(
        {
            **os.environ,
            "WAKEFUL_HOME": str(settings.home / "fresh-redis"),
            "WAKEFUL_REDIS_PORT": str(port),
            "WAKEFUL_SECRETS": str(settings.secrets),
            "WAKEFUL_KEYRING": str(settings.keyring),
            "WAKEFUL_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        }
    )


def stop_fresh(settings: Settings) -> None:
    """Stop the new Redis a `fresh` run started, if one runs."""
    redis_server.stop(Settings.from_env({**os.environ, "WAKEFUL_HOME": str(settings.home / "fresh-redis")}))


def _recover(client: Client, say: Say) -> recovery.Report:
    return recovery.recover(client.settings, client.app, client.admin, client.store.sealer, say, force=False)


def _refused(client: Client, say: Say) -> bool:
    try:
        _recover(client, say)
    except WakefulError as exc:
        say(f"recover refused, as it must while workers run: {str(exc)[:120]}")
        return True
    return False


def _redis_env(client: Client) -> dict[str, str]:
    url = client.settings.redis_url_external
    return {"WAKEFUL_REDIS_URL": url} if url else {}


def _finish(
    client: Client, traffic: Any, plans: list[Planned], marks: tuple[str, dict[str, list[str]]], say: Say
) -> dict[str, Any]:
    """Check the waits kept their deadlines (`marks`: the downstream's mark before the run, and
    each waiting task's deadlines before the loss), send what was held back, check the invariants."""
    mark, before = marks
    after = _waiting(client, [p for p in plans if p.task_id in before])
    kept = after == before
    held = [dataclasses.replace(p, sent=p.sent[1:]) for p in plans if len(p.sent) > 1]
    say(f"{len(after)} tasks still wait (deadlines kept: {kept}); sending {len(held)} held events ...")
    chaos.publish(client, held)
    checked = chaos.check(client, traffic, plans, mark, timeout=SETTLE_S)
    return checked | {"deadlines_kept": kept, "still_waiting": len(after)}


def render(r: dict[str, Any]) -> str:
    recovered = r.get("recovered", {})
    lines = [
        f"recovery drill {'OK' if r['ok'] else 'FAILED'} ({r['app']}, {r['mode']}): {r['tasks']} tasks",
        f"at the loss       : {r.get('waiting_at_loss')} waiting, intents in flight "
        f"{r.get('in_flight_at_loss')}",
        f"recover           : {recovered.get('restored')} restored, {recovered.get('woken')} woken, "
        f"failed {recovered.get('failed')} in {r.get('recover_s')} s; a second run restored "
        f"{r.get('second_run_restored')}",
        f"refused while running: {r.get('refused_while_running', 'n/a (fresh)')}",
        f"deadlines kept    : {r.get('deadlines_kept')} ({r.get('still_waiting')} still waiting); timer "
        f"index kept: {r.get('timers_kept')}; in flight after recover: {r.get('in_flight_after')}",
    ]
    if "lost" in r:
        lines += chaos.render({**r, "kills": 0, "killed": {}, "seconds": 0}).splitlines()[1:]
    return "\n".join(lines)
