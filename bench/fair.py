"""`wakeful bench-fair`: one tenant's flood and another tenant's trickle through the whole pipeline
at once, with the flood's tenant held to an in-flight limit (D108), or with none to compare.

Two tenants of their own (FLOOD and STEADY), each with its own signers for the traffic's first path
(bench/traffic.py), registered by the bench. The flood's creates are published flat out or at
`--rate`; the steady tenant's are spread evenly among them, so each of them lands behind a share of
the flood. It prints each tenant's wake-to-effect p50/p95/p99 (from a create's signed time to its
downstream's record of the task's last effect, one clock), the flood's throughput, the most of its
creates held and of its tasks in flight at once, and what a held create costs Redis in memory.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from wakeful.authority.limit_store import scope_of
from wakeful.bench import box as bench_box
from wakeful.bench.pipeline import pct, wait_effects
from wakeful.bench.traffic import Plan, Traffic, load_traffic, signed, warm_up
from wakeful.core import ids
from wakeful.core.errors import ConfigError, WakefulError
from wakeful.core.process import Say
from wakeful.core.settings import Settings
from wakeful.devstack import stack
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.operate.dev_signers import DEV_SIGNERS
from wakeful.schemas import events
from wakeful.sdk.app import load_app
from wakeful.state import keys

FLOOD, STEADY = "bench-flood", "bench-steady"
OPERATOR = next(p for p, kinds in DEV_SIGNERS.items() if events.REOPEN in kinds)  # sets the limit
SAMPLE_S = 0.25  # how often the flood's held creates, tasks in flight and Redis's memory are read
CHUNK = 200  # events per publish
SAMPLED = 20  # held lists read for what a held create costs
CLOSED_BYTES = 5_000  # what a closed task keeps in Redis, about (docs/retention.md)
HELD_BYTES = 1_600  # what a held create costs until it starts, about (docs/limits.md)


@dataclass(frozen=True)
class Sent:
    tenant: str
    plan: Plan
    woken: float  # when its last event was signed


def interleaved(flood: int, steady: int) -> Iterator[str]:
    """The order the tenants' creates go out: the flood's, with the steady tenant's spread evenly
    among them (the j-th after about (j + 1/2) * flood / steady of the flood's), all of both."""
    at = [(j + 0.5) * flood / steady for j in range(steady)] if steady else []
    k = 0
    for i in range(flood):
        while k < len(at) and at[k] <= i:
            yield STEADY
            k += 1
        yield FLOOD
    yield from [STEADY] * (len(at) - k)


def run(
    settings: Settings, flood: int, steady: int, *, limit: int | None, rate: float | None, say: Say
) -> dict[str, Any]:
    traffic = load_traffic(load_app(settings.app))
    stack.up(settings, say)
    client = Client(settings)
    room(client, flood + steady)  # before anything starts: a Redis that would fill is one line
    fleet = Fleet(bench_box.fleet_env(settings, os.environ))
    say(f"starting {len(fleet.members)} processes ...")
    fleet.start()
    sampler, limited = Sampler(client), False
    try:
        client.reset_authority()  # no default limit: the bench sets the one it measures
        warm_up(client, traffic)
        signer = _tenants(client, traffic)
        for tenant in (FLOOD, STEADY):
            with contextlib.suppress(ConfigError):  # one an earlier run left, if it was stopped
                client.limits.unset(scope_of(tenant), by=OPERATOR, reason="wakeful bench-fair starts")
            client.admin.delete(keys.fair_flight(tenant), keys.fair_queue(tenant))
            _warm(client, traffic, tenant, signer)
        if limit is not None:
            client.limits.set(scope_of(FLOOD), limit, by=OPERATOR, reason="wakeful bench-fair")
            limited = True
        mark = traffic.mark(client.admin)
        sampler.start()
        started = time.time()
        sent = _publish(client, traffic, signer, interleaved(flood, steady), rate)
        took = time.time() - started
        say(f"published {flood} + {steady} creates in {took:.1f}s; waiting for the effects ...")
        plans = {t: s.plan for t, s in sent.items()}
        effects = wait_effects(client, traffic, mark, plans, timeout=max(120.0, flood / 20), say=say)
    finally:
        sampler.stop()
        if limited:
            client.limits.unset(scope_of(FLOOD), by=OPERATOR, reason="wakeful bench-fair is done")
        fleet.stop()
        client.close()
    return _figures(sent, effects, started, sampler) | {"limit": limit, "target_rate": rate}


def room(client: Client, tasks: int) -> None:
    """A WakefulError that says what to do if `tasks` closed tasks, each held before it started,
    would take Redis past 90% of its maxmemory (it then refuses writes, and the run stalls)."""
    info: dict[str, Any] = client.admin.info("memory")
    used, most = int(info["used_memory"]), int(info.get("maxmemory") or 0)
    need = tasks * (CLOSED_BYTES + HELD_BYTES)
    if most and used + need > most * 0.9:
        mb = 2**20
        raise WakefulError(
            f"Redis holds {used // mb} MB of its {most // mb} MB and this run needs about {need // mb} MB "
            f"more (a closed task keeps about {CLOSED_BYTES // 1000} KB, a held create "
            f"{HELD_BYTES / 1000:.1f} KB until it starts): purge closed tasks (`wakeful task purge`), "
            "raise WAKEFUL_REDIS_MAXMEMORY and run `wakeful dev up`, or send fewer (--flood)"
        )


def _tenants(client: Client, traffic: Traffic) -> Callable[[str, str], Any]:
    """Register each tenant's own signer for every principal of the traffic's first path, with the
    kinds that principal sends; the signer of (tenant, principal)."""
    sample = traffic.plan("bench-sample", random.Random(0), second=False)
    kinds: dict[str, set[str]] = {}
    for send in sample.sends:
        kinds.setdefault(send.principal, set()).add(send.kind)
    for tenant in (FLOOD, STEADY):
        for principal, sent in kinds.items():
            client.add_signer(f"{tenant}-{principal}", tuple(sorted(sent)), tenant=tenant)
    return functools.cache(lambda tenant, principal: client.signer(f"{tenant}-{principal}"))


def _warm(client: Client, traffic: Traffic, tenant: str, signer: Callable[[str, str], Any]) -> None:
    """One task of `tenant` all the way through, or a WakefulError that says why the app's first
    path does not run as a tenant's own signers."""
    outside = f"w-{uuid.uuid4().hex[:12]}"
    task_id = ids.task_in(tenant, outside)
    plan = traffic.plan(task_id, random.Random(0), second=False)
    if plan.arrange is not None:
        plan.arrange(client.admin)
    client.publisher.publish_many(signed(plan, outside, functools.partial(signer, tenant)), timeout=60)
    try:
        shown = client.wait_settled(task_id, 120)
    except WakefulError as exc:
        shown = {"stage": f"nowhere ({exc})"}
    if shown.get("stage") != plan.settles:
        refused = f": {shown['last_refusal']}" if shown.get("last_refusal") else ""
        raise WakefulError(
            f"a task of tenant {tenant}, sent by signers of the tenant's own, settled at "
            f"{shown.get('stage')} where the app's first path ends at {plan.settles}{refused}. This "
            "bench needs an app whose first path any signer of a tenant may send; one whose "
            "workflow names its signers (principal:<name>) can run in one tenant only"
        )


def _publish(
    client: Client,
    traffic: Traffic,
    signer: Callable[[str, str], Any],
    order: Iterator[str],
    rate: float | None,
) -> dict[str, Sent]:
    """Each create in `order` signed by its tenant's signers and published, the flood's at `rate`
    a second or flat out; what was sent, by the runtime's task id."""
    rng = random.Random(0)
    sent: dict[str, Sent] = {}
    batch: list[events.SignedEvent] = []
    floods, started = 0, time.time()
    for tenant in order:
        outside = f"{'f' if tenant == FLOOD else 's'}-{uuid.uuid4().hex[:12]}"
        task_id = ids.task_in(tenant, outside)
        plan = traffic.plan(task_id, rng, second=False)
        if plan.arrange is not None:
            plan.arrange(client.admin)
        signed_events = signed(plan, outside, functools.partial(signer, tenant))
        batch += signed_events
        sent[task_id] = Sent(tenant, plan, signed_events[-1].issued_at.timestamp())
        floods += tenant == FLOOD
        if len(batch) >= (max(1, int(rate / 100)) if rate else CHUNK):
            client.publisher.publish_many(batch, timeout=60)
            batch = []
        if rate and (ahead := started + floods / rate - time.time()) > 0:
            time.sleep(ahead)
    if batch:
        client.publisher.publish_many(batch, timeout=60)
    return sent


class Sampler:
    """The flood's held creates and tasks in flight, and Redis's memory, read every SAMPLE_S on a
    thread of its own; the most of each."""

    def __init__(self, client: Client) -> None:
        self.client, self.halt = client, threading.Event()
        self.queued = self.flight = 0
        self.held_bytes = 0  # Redis memory per held create, read when the most were held
        self.thread = threading.Thread(target=self._loop, name="bench-fair-sampler", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.halt.set()
        if self.thread.is_alive():
            self.thread.join(timeout=10)

    def _loop(self) -> None:
        while not self.halt.wait(SAMPLE_S):
            pipe = self.client.admin.pipeline(transaction=False)
            pipe.zcard(keys.fair_queue(FLOOD))
            pipe.zcard(keys.fair_flight(FLOOD))
            queued, flight = (int(n) for n in pipe.execute())
            if queued > self.queued:
                self.held_bytes = self._held_bytes(queued) or self.held_bytes
            self.queued, self.flight = max(self.queued, queued), max(self.flight, flight)

    def _held_bytes(self, queued: int) -> int:
        """What a held create costs Redis: its share of the tenant's queue, and its wake kept on its
        task's held list (the mean of up to SAMPLED of them); 0 if the queue emptied meanwhile."""
        admin = self.client.admin
        first: Any = admin.zrange(keys.fair_queue(FLOOD), 0, SAMPLED - 1)
        tasks = [t.decode() for t in first]
        lists = [admin.memory_usage(keys.held(t)) or 0 for t in tasks]
        queue = admin.memory_usage(keys.fair_queue(FLOOD)) or 0
        return round(queue / queued + sum(lists) / len(lists)) if lists else 0


def _figures(
    sent: dict[str, Sent], effects: dict[str, float], started: float, sampler: Sampler
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tenant, name in ((FLOOD, "flood"), (STEADY, "steady")):
        mine = [t for t, s in sent.items() if s.tenant == tenant]
        done = [t for t in mine if t in effects]
        lat = sorted((effects[t] - sent[t].woken) * 1000 for t in done)
        finished = max((effects[t] for t in done), default=started)
        out[name] = {
            "tenant": tenant,
            "tasks": len(mine),
            "completed": len(done),
            "tasks_per_s": round(len(done) / max(1e-9, finished - started), 1),
            "wake_to_effect_ms": {f"p{p}": round(pct(lat, p), 1) for p in (50, 95, 99)}
            | {"max": round(lat[-1], 1) if lat else float("nan")},
        }
    out["flood"] |= {"most_held": sampler.queued, "most_in_flight": sampler.flight}
    out["redis_bytes_per_held_create"] = sampler.held_bytes
    return out


def render(r: dict[str, Any]) -> str:
    flood = r["flood"]
    held = f"limit {r['limit']} in flight" if r["limit"] is not None else "no limit"
    offered = f"at {r['target_rate']}/s" if r["target_rate"] else "flat out"
    lines = [f"flood           : {flood['tasks']} creates of {flood['tenant']} ({held}), offered {offered}"]
    for name in ("steady", "flood"):
        t, lat = r[name], r[name]["wake_to_effect_ms"]
        lines.append(
            f"{name:<16}: {t['completed']}/{t['tasks']} with their effects, {t['tasks_per_s']} tasks/s; "
            f"wake-to-effect p50 {lat['p50']}, p95 {lat['p95']}, p99 {lat['p99']}, max {lat['max']} ms"
        )
    lines.append(
        f"held            : at most {flood['most_held']} creates held and {flood['most_in_flight']} "
        f"tasks in flight; a held create costs Redis {r['redis_bytes_per_held_create']} bytes"
    )
    return "\n".join(lines)
