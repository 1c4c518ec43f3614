"""`wakeful bench`: N tasks through the whole pipeline with every role as its own process.

A mix of tasks: some under the approval limit (create -> refund), some above it (create, then an
approval sent right behind it on the same key). It prints throughput, wake-to-effect latency (from
the waking event's signed timestamp to the bank's booking time, one clock), Redis round trips and
Kafka messages per task, and the peak memory of each role.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from wakeful.bank.ledger import LedgerEntry
from wakeful.cli.client import REQUESTER, Client
from wakeful.core import kafka_auth, topics
from wakeful.core.log import librdkafka_config
from wakeful.core.settings import Settings
from wakeful.devstack import stack
from wakeful.devstack.fleet import Fleet
from wakeful.devstack.process import Say
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.state import keys

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
    settings: Settings, tasks: int, approval_ratio: float, rate: float | None, say: Say
) -> dict[str, Any]:
    stack.up(settings, say)
    client = Client(settings)
    fleet = Fleet({**os.environ, "WAKEFUL_MODEL": "rules"})
    say(f"starting one process per role ({', '.join(fleet.roles)}) ...")
    fleet.start()  # first: refused while another fleet runs, before anything is changed
    try:
        client.reset_authority()
        warm, _ = client.new_task(10)
        client.wait_settled(warm, 60)
        say("warm; publishing the tasks ...")
        kafka_before, redis_before = _offsets(settings), _redis_commands(client)
        requester, approver = client.signer(REQUESTER), client.signer("alice")
        plan: list[tuple[str, bool]] = []
        batch: list[events.SignedEvent] = []
        woken: dict[str, float] = {}
        chunk = max(1, int(rate / 100)) if rate else 200  # with a rate, send every ~10 ms
        started = time.time()
        for i in range(tasks):
            task_id = f"b-{uuid.uuid4().hex[:12]}"
            needs = int((i + 1) * approval_ratio) > int(i * approval_ratio)  # spread evenly
            amount = 2500 if needs else 300
            create = sign_event(
                requester, events.CREATE, {"amount": amount, "currency": "EUR"}, task_id=task_id
            )
            batch.append(create)
            waking = create
            if needs:
                waking = sign_event(approver, events.APPROVE, {"version": 1}, task_id=task_id)
                batch.append(waking)
            woken[task_id] = waking.issued_at.timestamp()
            plan.append((task_id, needs))
            if len(batch) >= chunk or i == tasks - 1:
                client.publisher.publish_many(batch, timeout=60)
                batch = []
            if rate:
                ahead = started + (i + 1) / rate - time.time()
                if ahead > 0:
                    time.sleep(ahead)
        say(f"published {tasks} tasks in {time.time() - started:.1f}s; waiting for the effects ...")
        effects = _wait_effects(client, [t for t, _ in plan], timeout=max(120.0, tasks / 20))
        finished = max((b for b in effects.values()), default=time.time())
        latencies = sorted((effects[t] - woken[t]) * 1000 for t in effects)
        kafka_msgs = _offsets(settings) - kafka_before
        redis_cmds = _redis_commands(client) - redis_before
    finally:
        stats = fleet.stop()
        client.close()
    done = len(effects)
    rtts = sum(int(s.get("redis_round_trips", 0)) for s in stats.values())
    return {
        "tasks": tasks,
        "completed": done,
        "with_approval": sum(1 for _, n in plan if n),
        "target_rate": rate,
        "tasks_per_s": round(done / max(1e-9, finished - started), 1),
        "wake_to_effect_ms": {
            "p50": round(_pct(latencies, 50), 1),
            "p95": round(_pct(latencies, 95), 1),
            "p99": round(_pct(latencies, 99), 1),
        },
        "redis_round_trips_per_task": round(rtts / max(1, done), 1),
        "redis_commands_per_task": round(redis_cmds / max(1, done), 1),
        "kafka_messages_per_task": round(kafka_msgs / max(1, done), 2),
        "peak_rss_mb": {role: round(b / 2**20, 1) for role, b in fleet.peak.items()},
        "cpu_s": {role: round(c, 1) for role, c in fleet.cpu.items()},
    }


def _wait_effects(client: Client, task_ids: list[str], timeout: float) -> dict[str, float]:
    """task id -> the bank's booking time (epoch seconds) for each task that got its refund."""
    pending, found = list(task_ids), {}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        pipe = client.admin.pipeline(transaction=False)
        for task_id in pending:
            pipe.get(keys.bank_entry(f"REFUND:{task_id}:v1"))
        for task_id, raw in zip(pending, pipe.execute(), strict=True):
            if raw:
                found[task_id] = LedgerEntry.decode(raw).booked_at.timestamp()
        pending = [t for t in pending if t not in found]
        if pending:
            time.sleep(0.2)
    return found


def _redis_commands(client: Client) -> int:
    info: dict[str, Any] = client.admin.info("stats")
    return int(info["total_commands_processed"])


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))]


def render(r: dict[str, Any]) -> str:
    lat = r["wake_to_effect_ms"]
    mem = ", ".join(f"{k} {v}" for k, v in r["peak_rss_mb"].items())
    offered = f"offered at {r['target_rate']}/s" if r["target_rate"] else "offered as fast as possible"
    return "\n".join(
        [
            f"tasks           : {r['completed']}/{r['tasks']} refunded "
            f"({r['with_approval']} through an approval), {offered}",
            f"throughput      : {r['tasks_per_s']} tasks/s",
            f"wake-to-effect  : p50 {lat['p50']} ms, p95 {lat['p95']} ms, p99 {lat['p99']} ms",
            f"redis per task  : {r['redis_round_trips_per_task']} round trips "
            f"({r['redis_commands_per_task']} commands)",
            f"kafka per task  : {r['kafka_messages_per_task']} messages",
            f"peak RSS (MiB)  : {mem}",
            f"CPU seconds     : {', '.join(f'{k} {v}' for k, v in r['cpu_s'].items())}",
        ]
    )
