"""`wakeful bench [--app X]`: N tasks of the app's traffic (bench/traffic.py) through the whole
pipeline with every role as its own process.

A mix of tasks, spread evenly: the first path, and `--approval-ratio` of them on the traffic's
second path (for the bundled example: above the approval limit, the approval sent right behind the
create on the same key). It prints throughput, wake-to-effect latency (from the signed timestamp of a
task's last event to the downstream's record of its last effect, one clock), Redis round trips and
Kafka messages per task, the peak memory of each role, and the CPU per task of each role and (when
this machine runs them) of the Kafka broker and the Redis server, all from the first task published
to the last effect; what the roles spent before the first task is reported apart. `with_approval`
counts the second path (the key keeps its name so figures compare with older runs).
"""

from __future__ import annotations

import functools
import os
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from wakeful.bench import box as bench_box
from wakeful.bench import log as bench_log
from wakeful.bench import plot as bench_plot
from wakeful.bench import policy as bench_policy
from wakeful.bench import tracing as bench_tracing
from wakeful.bench.traffic import Plan, Traffic, load_traffic, signed, split, warm_up
from wakeful.consumers.kafka.supervisor import role_of_member
from wakeful.core import kafka_auth, topics
from wakeful.core.log import librdkafka_config
from wakeful.core.process import Say
from wakeful.core.settings import Settings
from wakeful.devstack import stack
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.sdk.app import load_app
from wakeful.state import budget

PROGRESS_S = 5.0  # seconds between progress lines while the effects come in
COUNTED_TOPICS = (topics.EVENTS, topics.WAKE, topics.PROPOSALS_REQUEST, topics.PROPOSALS, topics.LOG)


def _offsets(settings: Settings) -> int:
    admin = kafka_auth.client_config(settings, kafka_auth.ADMIN)
    consumer = Consumer(admin | {"group.id": "bench-offsets"} | librdkafka_config())
    total = 0
    for topic in COUNTED_TOPICS:
        for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            total += consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
    consumer.close()
    return total


def run(
    settings: Settings,
    tasks: int,
    approval_ratio: float,
    rate: float | None,
    say: Say,
    *,
    replicas: Mapping[str, int] | None = None,
    plot: Path | None = None,
    tracing: bool = False,
) -> dict[str, Any]:
    traffic = load_traffic(load_app(settings.app))  # before anything starts: a missing one is one line
    stack.up(settings, say)
    client = Client(settings)
    spans = bench_tracing.receiver(tracing)  # the roles export to it, or trace nothing (D75)
    fleet = Fleet(bench_box.fleet_env(settings, bench_tracing.env(os.environ, spans)), replicas=replicas)
    say(f"starting {len(fleet.members)} processes ({', '.join(fleet.members)}) ...")
    fleet.start()  # first: refused while another fleet runs, before anything is changed
    try:
        client.reset_authority()
        warm_up(client, traffic)
        say(f"warm; publishing the {client.app.name} tasks ...")
        mark = traffic.mark(client.admin)  # first: a traffic may arrange the store (bench_memory)
        before = (
            _offsets(settings),
            bench_box.redis_commands(client),
            bench_box.server_cpu(settings),
            fleet.cpu_now(),
        )
        log_since = bench_log.marks(settings)  # the log's own figures: after the run, once drained
        started = time.time()
        plans, woken = _publish(client, traffic, split(tasks, approval_ratio), rate)
        say(f"published {tasks} tasks in {time.time() - started:.1f}s; waiting for the effects ...")
        effects = wait_effects(client, traffic, mark, plans, timeout=max(120.0, tasks / 20), say=say)
        finished = max((b for b in effects.values()), default=time.time())
        latencies = sorted((effects[t] - woken[t]) * 1000 for t in effects)
        servers, cpu = (
            bench_box.server_cpu(settings, before[2]),
            by_role(fleet.roles, fleet.cpu_now(), before[3]),
        )
        kafka_msgs = _offsets(settings) - before[0]
        redis_cmds = bench_box.redis_commands(client) - before[1]
        tokens = _model_tokens(client, list(effects))
        log = bench_log.cost(settings, client.admin, log_since, len(effects))
    finally:
        stats = fleet.stop()
        client.close()
    done = len(effects)
    traced = bench_tracing.figures(spans, done)
    rtts = sum(int(s.get("redis_round_trips", 0)) for s in stats.values())
    result = {
        "plot": str(plot) if plot is not None else None,
        "app": client.app.name,
        "tasks": tasks,
        "completed": done,
        "with_approval": sum(1 for s in split(tasks, approval_ratio) if s),  # on the second path
        "second_path": traffic.second_path,
        "target_rate": rate,
        "tasks_per_s": round(done / max(1e-9, finished - started), 1),
        "wake_to_effect_ms": {f"p{p}": round(pct(latencies, p), 1) for p in (50, 95, 99)},
        "redis_round_trips_per_task": round(rtts / max(1, done), 1),
        "redis_commands_per_task": round(redis_cmds / max(1, done), 1),
        "kafka_messages_per_task": round(kafka_msgs / max(1, done), 2),
        # wakeful.log's share: what a Redis is rebuilt from and an audit reads (D70).
        "log_per_task": log,
        "model_tokens_per_task": round(tokens / max(1, done), 1),
        "processes": dict(Counter(role_of_member(m) for m in fleet.members)),
        "peak_rss_mb": {role: round(b / 2**20, 1) for role, b in fleet.peak_by_role().items()},
        "cpu_s": {role: round(c, 1) for role, c in cpu.items()},
        # What each role spent before the first task: starting, importing, connecting, warming up.
        "startup_cpu_s": {role: round(c, 1) for role, c in by_role(fleet.roles, before[3]).items()},
        "cpu_ms_per_task": {role: round(c * 1000 / max(1, done), 2) for role, c in cpu.items()}
        | {"total": round(sum(cpu.values()) * 1000 / max(1, done), 2)},
        # The engines' share, from the first task published to the last effect: {} when remote.
        "server_cpu_ms_per_task": {
            name: round(c * 1000 / max(1, done), 2) for name, c in servers.items() if name != bench_box.JIT
        },
        # The headline: everything on the box, roles and servers together, per task.
        "box_cpu_ms_per_task": bench_box.box(
            sum(cpu.values()) * 1000 / max(1, done), {n: c * 1000 / max(1, done) for n, c in servers.items()}
        ),
        # One authorization decision in process (the app's own policy, parsed once): per action.
        "policy_decision_us": bench_policy.decision_us(client.app, rounds=500),
        "tracing": traced,
        "tracing_us_per_message": bench_tracing.per_message_us(),
    }
    _draw(plot, result, list(effects.values()), started, latencies, say=say)
    return result


def _publish(
    client: Client, traffic: Any, paths: list[bool], rate: float | None
) -> tuple[dict[str, Plan], dict[str, float]]:
    """Sign and publish a task per path (True: the traffic's second path), at `rate` tasks a second
    or flat out; the plans, and when each task's last event was issued (it wakes it to its effects)."""
    rng, signer = random.Random(0), functools.cache(client.signer)
    plans: dict[str, Plan] = {}
    batch: list[events.SignedEvent] = []
    woken: dict[str, float] = {}
    chunk = max(1, int(rate / 100)) if rate else 200  # with a rate, send every ~10 ms
    started = time.time()
    for i, second in enumerate(paths):
        task_id = f"b-{uuid.uuid4().hex[:12]}"
        plan = traffic.plan(task_id, rng, second)
        if plan.arrange is not None:
            plan.arrange(client.admin)
        sent = signed(plan, task_id, signer)
        batch += sent
        woken[task_id] = sent[-1].issued_at.timestamp()
        plans[task_id] = plan
        if len(batch) >= chunk or i == len(paths) - 1:
            client.publisher.publish_many(batch, timeout=60)
            batch = []
        if rate:
            ahead = started + (i + 1) / rate - time.time()
            if ahead > 0:
                time.sleep(ahead)
    return plans, woken


def _draw(
    plot: Path | None,
    r: dict[str, Any],
    done_at: list[float],
    started: float,
    latencies: list[float],
    *,
    say: Say,
) -> None:
    """The run's picture, with the figures it printed (bench_plot)."""
    if plot is not None:
        what = f"{r['completed']} {r['app']} tasks, {r['cpu_ms_per_task']['total']} CPU ms/task"
        drawn = bench_plot.draw(
            plot, done_at, started, latencies, f"wakeful bench: {what}", marks=r["wake_to_effect_ms"]
        )
        say(f"plot: {drawn}")


def by_role(
    roles: Iterable[str], cpu: Mapping[str, float], since: Mapping[str, float] | None = None
) -> dict[str, float]:
    """CPU seconds per role, its processes (`gate`, `gate#2`, ...) summed, less what each had used
    by `since` (a process started after `since` is charged all of its own)."""
    spent = {m: c - (since or {}).get(m, 0.0) for m, c in cpu.items()}
    return {r: sum(c for m, c in spent.items() if role_of_member(m) == r) for r in roles}


def wait_effects(
    client: Client, traffic: Traffic, mark: str, plans: dict[str, Plan], *, timeout: float, say: Say
) -> dict[str, float]:
    """task id -> when its downstream recorded its last effect (epoch seconds, the downstream's
    clock), for each task whose effects have all landed. Reads only what is new at each poll."""
    seen: Counter[str] = Counter()
    last: dict[str, float] = {}
    cursor, deadline = mark, time.monotonic() + timeout
    told, finished = time.monotonic(), 0
    while time.monotonic() < deadline:
        found, cursor = traffic.effects(client.admin, cursor)
        for effect in found:
            if effect.task_id in plans:
                seen[effect.task_id] += 1
                last[effect.task_id] = max(last.get(effect.task_id, 0.0), effect.at.timestamp())
        complete = sum(1 for t, plan in plans.items() if seen[t] >= plan.effects)
        if complete == len(plans):
            break
        if time.monotonic() - told >= PROGRESS_S:  # a long run says how far it has got
            now = time.monotonic()
            pace = (complete - finished) / (now - told)
            say(f"  {complete}/{len(plans)} tasks have their effects ({pace:.0f}/s)")
            told, finished = now, complete
        time.sleep(0.2)
    return {t: last[t] for t, plan in plans.items() if seen[t] >= plan.effects}


def _model_tokens(client: Client, task_ids: list[str]) -> int:
    """The model tokens the tasks' proposals used, as the proposer counted them (one round trip)."""
    return sum(n or 0 for n in budget.tasks_tokens(client.admin, task_ids))


def pct(values: list[float], p: float) -> float:
    """The p-th percentile of sorted `values` (nan for none), the rank rule the bench's figures use."""
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))]


def render(r: dict[str, Any]) -> str:
    lat = r["wake_to_effect_ms"]
    mem = ", ".join(f"{k} {v}" for k, v in r["peak_rss_mb"].items())
    offered = f"offered at {r['target_rate']}/s" if r["target_rate"] else "offered as fast as possible"
    return "\n".join(
        [
            f"tasks           : {r['completed']}/{r['tasks']} {r['app']} tasks with their effects "
            f"({r['with_approval']} {r['second_path']}), {offered}",
            bench_box.render_box(r["box_cpu_ms_per_task"]),
            f"throughput      : {r['tasks_per_s']} tasks/s",
            f"wake-to-effect  : p50 {lat['p50']} ms, p95 {lat['p95']} ms, p99 {lat['p99']} ms",
            f"redis per task  : {r['redis_round_trips_per_task']} round trips "
            f"({r['redis_commands_per_task']} commands)",
            f"kafka per task  : {r['kafka_messages_per_task']} messages",
            *(
                [
                    f"log per task    : {log['bytes']} bytes in {log['messages']} messages "
                    f"({log['changes']} changes, {log['action_records']} action records)"
                ]
                if (log := r.get("log_per_task"))
                else []
            ),
            # The built-in models report none; a model behind an API reports its usage.
            *(
                [f"model per task  : {r['model_tokens_per_task']} tokens"]
                if r["model_tokens_per_task"]
                else []
            ),
            f"peak RSS (MiB)  : {mem}",
            f"CPU ms per task : {', '.join(f'{k} {v}' for k, v in r['cpu_ms_per_task'].items())}",
            f"start-up CPU s  : {', '.join(f'{k} {v}' for k, v in r['startup_cpu_s'].items())} "
            "(before the first task; not in the figures per task)",
            *(
                [f"servers per task: {', '.join(f'{k} {v}' for k, v in servers.items())} CPU ms"]
                if (servers := r.get("server_cpu_ms_per_task"))
                else []
            ),
            f"processes       : {', '.join(f'{k} {v}' for k, v in r['processes'].items())}",
            *bench_tracing.render(r.get("tracing"), r.get("tracing_us_per_message")),
            *(
                [f"policy decision : {', '.join(f'{k} {v}' for k, v in decided.items())} µs (in process)"]
                if (decided := r.get("policy_decision_us"))
                else []
            ),
        ]
    )
