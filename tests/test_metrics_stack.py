"""Every role process of a fleet started with a metrics port serves GET /metrics on its own port,
and a task run through the real pipeline moves the counters of each role it passes; a dead letter
is counted by its reason's class, and the relay reads the task gauges from Redis. The rules
without servers: tests/unit/test_metrics.py."""

from __future__ import annotations

import re
import time
from typing import Any

import httpx
import orjson
import redis
from confluent_kafka import Producer
from helpers import BankClient, kafka_as, metrics_urls
from prometheus_client import REGISTRY

from wakeful.consumers.kafka import task_gauges
from wakeful.core import topics
from wakeful.core.kafka_rights import UPSTREAM
from wakeful.core.metrics import ALL
from wakeful.core.settings import Settings
from wakeful.state import acl, keys
from wakeful.workflow.stuck import STUCK_AFTER_S

SAMPLE = re.compile(r"^(wakeful_[a-z0-9_]+)(\{[^}]*\})? (\S+)$", re.MULTILINE)


def scrape(url: str) -> tuple[str, dict[str, float]]:
    body = httpx.get(url, timeout=5).text
    return body, {name + (labels or ""): float(value) for name, labels, value in SAMPLE.findall(body)}


def total(samples: dict[str, float], name: str, *labels: str) -> float:
    """The sum of `name`'s series (`name{` or `name` alone) that carry every one of `labels`."""
    return sum(
        v for k, v in samples.items() if k.partition("{")[0] == name and all(label in k for label in labels)
    )


def test_each_role_serves_its_metrics_and_a_task_moves_the_counters_of_every_role_it_passes(
    shared_fleet: Any, client: BankClient, settings: Settings
) -> None:
    urls = metrics_urls(shared_fleet)
    assert len(set(urls.values())) == len(urls), "two processes share a port"
    before = {m: scrape(u)[1] for m, u in urls.items()}

    task_id, _ = client.new_task(10)
    assert client.wait_settled(task_id, 60)["stage"] == "closed"
    producer = Producer(kafka_as(settings.kafka_bootstrap, UPSTREAM, settings) | {"acks": "all"})
    producer.produce(topics.EVENTS, key=b"metrics-garbage", value=b"\xff not an event")
    assert producer.flush(30) == 0

    handled = "wakeful_messages_handled_total"
    moved: dict[str, list[tuple[str, ...]]] = {
        "inbound": [(handled, 'topic="wakeful.events"')],
        "gate": [(handled, 'topic="wakeful.wake"'), ("wakeful_transitions_total", 'workflow="refund"')],
        "proposer": [(handled, 'topic="wakeful.proposals.request"'), ("wakeful_model_calls_total",)],
        "executor": [
            (handled, 'topic="wakeful.proposals"'),
            ("wakeful_tool_calls_total", 'outcome="ok"'),
            ("wakeful_tool_call_seconds_count",),
            ("wakeful_wake_to_effect_seconds_count",),
        ],
        "relay": [("wakeful_relay_records_total",)],
    }
    letter = ("wakeful_messages_dead_lettered_total", 'role="inbound"', 'reason="malformed"')
    deadline = time.monotonic() + 25
    while True:
        after = {m: scrape(u) for m, u in urls.items()}
        still = [
            f"{m}: {' '.join(p)}"
            for m, wanted in moved.items()
            for p in wanted
            if total(after[m][1], *p) <= total(before[m], *p)
        ]
        letters = total(after["inbound"][1], *letter) - total(before["inbound"], *letter)
        gauges = total(after["relay"][1], "wakeful_tasks", 'stage="closed"')
        # librdkafka's statistics come every 5 s: a role's first may still be on its way.
        lag = [k for _, (_, s) in after.items() for k in s if k.startswith("wakeful_consumer_lag{")]
        if (not still and letters > 0 and gauges > 0 and lag) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not still, f"counters that did not move: {still}"
    assert letters > 0, "the garbage event was not counted as a malformed dead letter"
    assert gauges > 0, "the relay never read the task gauges from Redis"

    # A counter's family is exposed as its name with _total.
    names = [m._name + ("_total" if m._type == "counter" else "") for m in ALL]
    for member, (body, _) in after.items():
        missing = [n for n in names if f"# TYPE {n} " not in body]
        assert not missing, f"{member} does not expose {missing}"
    assert lag, "no role reported its consumer lag"
    relay = after["relay"][1]
    assert all(f'wakeful_waits_due{{within="{w}"}}' in relay for w in ("overdue", "1m", "1h"))


def test_the_relay_counts_a_task_stuck_at_a_stage_it_can_leave_and_not_one_that_waits(
    settings: Settings, redis_client: redis.Redis, unique: str
) -> None:
    tenant = f"metrics{unique[:8]}"
    long_ago = int((time.time() - STUCK_AFTER_S - 60) * 1000)
    tasks, ready = keys.index_tasks(tenant), keys.index_stage(tenant, "ready")
    waiting = {"wait_for": "approval", "deadline": "2099-01-01T00:00:00+00:00", "correlation_id": "c"}

    def stuck_now() -> float:
        gauges = task_gauges.TaskGauges(acl.connect(settings, "relay"), frozenset({"ready"}))
        gauges.refresh()  # as the relay's own user: its ACL must allow every read
        return REGISTRY.get_sample_value("wakeful_tasks_stuck", {"stage": "ready"}) or 0.0

    before = stuck_now()
    try:
        for task_id, waits in (("t-stuck", []), ("t-waits", [waiting])):
            summary = {"task_id": task_id, "workflow": "refund", "stage": "ready", "waits": waits}
            redis_client.hset(tasks, task_id, orjson.dumps(summary))
            redis_client.zadd(ready, {task_id: long_ago})
        assert stuck_now() == before + 1
    finally:
        redis_client.delete(tasks, ready)
