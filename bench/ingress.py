"""`wakeful bench-ingress`: N tasks posted over HTTP to `wakeful ingress`, with the whole pipeline
behind it, beside the same N tasks published straight to Kafka by the publisher SDK.

Both paths send the very same kind of signed events (the app's traffic, bench/traffic.py), each
task's events in order, from `--concurrency` senders at once, each sender waiting for its answer
(a 202 once Kafka acknowledged; or the broker's acknowledgement) before it sends the next. For each
path it prints requests/s while sending, the p50/p99 of an answer, the CPU the door spent per
request, and tasks/s to the last effect. The door runs with limits no run reaches: this measures
the door, not its rate limit.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import psutil

from wakeful.bench.pipeline import wait_effects
from wakeful.bench.traffic import Plan, Traffic, load_traffic, signed, split, warm_up
from wakeful.consumers.kafka.supervisor import INGRESS, spawn
from wakeful.core.errors import StackError
from wakeful.core.process import Say, wait_until
from wakeful.core.settings import Settings
from wakeful.devstack import stack
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.schemas.events import SignedEvent
from wakeful.sdk.app import ENV, load_app

START_S = 60.0
JSON = {"Content-Type": "application/json"}


def run(
    settings: Settings, tasks: int, approval_ratio: float, *, concurrency: int, port: int, say: Say
) -> dict[str, Any]:
    traffic = load_traffic(load_app(settings.app))
    stack.up(settings, say)
    client = Client(settings)
    env = {**os.environ, "WAKEFUL_MODEL": "rules"} | ({ENV: settings.app} if settings.app else {})
    fleet = Fleet(env)
    say(f"starting {len(fleet.members)} role processes and the door on port {port} ...")
    fleet.start()
    door_env = env | {"WAKEFUL_INGRESS_RATE": "1000000000", "WAKEFUL_INGRESS_BURST": "1000000000"}
    log = (fleet.dir / "ingress.log").open("ab")
    door = spawn(INGRESS, [], env=door_env, output=log, ingress_port=port)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_health(url, door)
        client.reset_authority()
        warm_up(client, traffic)
        paths = split(tasks, approval_ratio)
        say(f"posting {tasks} {client.app.name} tasks to {url}/v1/events ({concurrency} at once) ...")
        posted: Sender = lambda sends: _post_all(url, sends, concurrency)  # noqa: E731
        http = _path(client, traffic, paths, "h", posted, door=door, say=say)
        say(f"publishing {tasks} tasks straight to Kafka ({concurrency} at once) ...")
        published: Sender = lambda sends: _publish_all(client, sends, concurrency)  # noqa: E731
        direct = _path(client, traffic, paths, "k", published, door=None, say=say)
    finally:
        door.terminate()
        door.wait(timeout=20)
        log.close()
        fleet.stop()
        client.close()
    return {"app": client.app.name, "tasks": tasks, "concurrency": concurrency, "http": http, "kafka": direct}


Sender = Callable[[list[list[SignedEvent]]], list[float]]


def _path(
    client: Client,
    traffic: Traffic,
    paths: list[bool],
    prefix: str,
    send: Sender,
    *,
    door: subprocess.Popen[bytes] | None,
    say: Say,
) -> dict[str, Any]:
    rng, signer = random.Random(0), functools.cache(client.signer)
    plans: dict[str, Plan] = {}
    sends: list[list[SignedEvent]] = []
    for second in paths:
        task_id = f"{prefix}-{uuid.uuid4().hex[:12]}"
        plan = traffic.plan(task_id, rng, second)
        if plan.arrange is not None:
            plan.arrange(client.admin)
        plans[task_id] = plan
        sends.append(signed(plan, task_id, signer))
    mark = traffic.mark(client.admin)
    cpu = _cpu(door)
    started = time.time()
    latencies = sorted(send(sends))
    sent_s = time.time() - started
    door_cpu = _cpu(door) - cpu
    effects = wait_effects(client, traffic, mark, plans, timeout=max(120.0, len(paths) / 20), say=say)
    finished = max(effects.values(), default=time.time())
    requests = sum(len(s) for s in sends)
    return {
        "requests": requests,
        "requests_per_s": round(requests / max(1e-9, sent_s), 1),
        "answer_ms": {f"p{p}": round(_pct(latencies, p), 2) for p in (50, 99)},
        "door_cpu_ms_per_request": round(door_cpu * 1000 / requests, 3) if door is not None else None,
        "completed": len(effects),
        "tasks_per_s": round(len(effects) / max(1e-9, finished - started), 1),
    }


def _post_all(url: str, sends: list[list[SignedEvent]], concurrency: int) -> list[float]:
    async def main() -> list[float]:
        latencies: list[float] = []
        queue = iter(sends)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as http:

            async def sender() -> None:
                for task in queue:
                    for event in task:
                        began = time.perf_counter()
                        answer = await http.post("/v1/events", content=event.encode(), headers=JSON)
                        latencies.append((time.perf_counter() - began) * 1000)
                        if answer.status_code != 202:
                            raise StackError(
                                "ingress", f"it answered {answer.status_code}: {answer.text[:300]}"
                            )

            await asyncio.gather(*(sender() for _ in range(concurrency)))
        return latencies

    return asyncio.run(main())


def _publish_all(client: Client, sends: list[list[SignedEvent]], concurrency: int) -> list[float]:
    latencies: list[float] = []
    lock = threading.Lock()
    queue = iter(sends)

    def sender() -> None:
        while True:
            with lock:
                task = next(queue, None)
            if task is None:
                return
            for event in task:
                began = time.perf_counter()
                client.publisher.publish(event, timeout=30)
                with lock:
                    latencies.append((time.perf_counter() - began) * 1000)

    threads = [threading.Thread(target=sender) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def _wait_health(url: str, door: subprocess.Popen[bytes]) -> None:
    def answers() -> bool:
        try:
            return httpx.get(f"{url}/v1/health", timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(lambda: door.poll() is not None or answers(), START_S, interval=0.1)
    if door.poll() is not None:
        raise StackError("ingress", f"it exited with {door.returncode} before it answered: see its log")
    if not answers():
        raise StackError("ingress", f"{url} did not answer its health check in {START_S:.0f}s")


def _cpu(proc: subprocess.Popen[bytes] | None) -> float:
    if proc is None:
        return 0.0
    times = psutil.Process(proc.pid).cpu_times()
    return float(times.user + times.system)


def _pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p / 100))] if values else 0.0


def render(r: dict[str, Any]) -> str:
    lines = [f"{r['tasks']} {r['app']} tasks, {r['concurrency']} senders at once"]
    for name, title in (("http", "over HTTP (wakeful ingress)"), ("kafka", "straight to Kafka")):
        f = r[name]
        door = (
            f" | door CPU {f['door_cpu_ms_per_request']} ms/request" if f["door_cpu_ms_per_request"] else ""
        )
        lines.append(
            f"  {title}: {f['requests_per_s']} requests/s | answer p50 {f['answer_ms']['p50']} ms, "
            f"p99 {f['answer_ms']['p99']} ms{door} | {f['completed']}/{r['tasks']} tasks done, "
            f"{f['tasks_per_s']} tasks/s to the last effect"
        )
    return "\n".join(lines)
