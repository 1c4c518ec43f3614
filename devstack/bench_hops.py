"""`wakeful dev bench-hops`: what a task's hops cost this box with no wakeful code between them.

A chain of N processes, each a group consumer that takes a message from one scratch topic and
produces it to the next, with the roles' own client settings (consuming.consumer_config,
producing.producer_config: acks=all, idempotent, offsets stored by hand after the produce is
acknowledged, the same fetch wait and commit interval) and the roles' way of taking a batch (wait
for one message, then take what is already fetched). Each message also makes `trips` Redis round
trips (a SET that expires). The last process takes the message and stores its offset. By default
four processes, as the four roles a task's messages cross (inbound, gate, proposer, executor), and
three trips each, about the round trips a task of the bundled app makes.

It reads the CPU of the chain, the broker and Redis, as `wakeful bench` reads the roles', the broker
and Redis: the floor under what a task can cost on this box while the design's hops stay, at an
offered rate (`--rate`) or flat out. The driver that publishes is not counted, as the bench's
publisher is not.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, Producer

from wakeful.consumers.consuming import consumer_config
from wakeful.consumers.producing import producer_config
from wakeful.core import kafka_auth
from wakeful.core.process import Say, wait_until
from wakeful.core.settings import Settings
from wakeful.devstack import bench_box, topic_admin
from wakeful.state import acl

PAYLOAD_BYTES = 600  # about a wake's signed envelope
BATCH = 100  # the most a hop takes at once, after the first message (consumers/runner.py)
POLL_S = 0.2  # how long a hop waits for a first message, as a role's run loop does
STATS = ("stats_cb", "statistics.interval.ms")  # the roles' metrics hook: wakeful's, not the engine's
TRIP_TTL_MS = 60_000  # a trip's key expires: the chain leaves nothing behind in Redis
DONE_S = 60.0  # the longest to wait for the last hop to take every message


def _config(settings: Settings, built: Mapping[str, Any]) -> dict[str, Any]:
    """A role's client settings, logged in as the admin (the chain's topics are scratch topics no
    role may touch), without the roles' metrics hook."""
    return {k: v for k, v in built.items() if k not in STATS} | kafka_auth.client_config(
        settings, kafka_auth.ADMIN
    )


def hop(settings: Settings, source: str, target: str | None, trips: int, out: Path) -> None:
    """One link of the chain, until SIGTERM or its parent goes: take from `source`, make `trips`
    round trips, produce to `target`; the last link (`target` None) writes each message's age to
    `out`. Every link marks `out`'s marker once its clients are built."""
    parent, stopping = os.getppid(), [False]
    signal.signal(signal.SIGTERM, lambda *_: stopping.__setitem__(0, True))
    consumer = Consumer(_config(settings, consumer_config(settings, "gate", _group(source))))
    consumer.subscribe([source])
    onward = (Producer(_config(settings, producer_config(settings, "gate"))), target) if target else None
    redis = acl.connect(settings, "admin")
    ages = out.open("a", buffering=1) if target is None else None
    _marker(out).touch()
    while os.getppid() == parent and not stopping[0]:
        first = consumer.poll(POLL_S)
        batch = [m for m in ([first, *consumer.consume(BATCH - 1, 0)] if first else []) if m.error() is None]
        for msg in batch:
            key, value = msg.key() or b"", msg.value() or b""
            for i in range(trips):
                redis.set(f"wk:bench:hops:{{{key.hex()}}}:{i}", value[:16], px=TRIP_TTL_MS)
            if onward is not None:
                onward[0].produce(onward[1], key=key, value=value)
        if onward is not None and batch:
            onward[0].flush(10)  # offsets only after the broker has the output, as a role stores them
        for msg in batch:
            consumer.store_offsets(msg)
        if ages is not None and batch:
            ages.write("".join(f"{_age(m.value() or b'', time.time())}\n" for m in batch))
    consumer.close()


def run(
    settings: Settings, say: Say, *, hops: int, trips: int, tasks: int, rate: float | None
) -> dict[str, Any]:
    """The chain's CPU per task, each link's, the servers', and the first hop to the last's latency."""
    tag = uuid.uuid4().hex[:8]
    names = [f"wakeful.bench.hops.{tag}.{i}" for i in range(hops)]
    topic_admin.ensure_topics(settings, names=names)
    with tempfile.TemporaryDirectory(prefix="wakeful-bench-hops-") as work:
        ages = Path(work) / "ages"
        outs = [Path(work) / f"hop{i}" for i in range(hops - 1)] + [ages]
        links = [
            _start(names[i], names[i + 1] if i + 1 < hops else None, trips, outs[i]) for i in range(hops)
        ]

        def up() -> bool:
            return all(p.poll() is not None or _marker(o).exists() for p, o in zip(links, outs, strict=True))

        try:
            if not wait_until(up, 60, 0.1) or any(p.poll() is not None for p in links):
                raise RuntimeError(
                    "the chain's processes did not all start within 60 s; their stderr says why"
                )
            producer = Producer(_config(settings, producer_config(settings, "gate")))
            warm = min(tasks, 500)
            say(f"{hops} hops, {trips} Redis round trips each: warming up with {warm} tasks ...")
            _drive(producer, names[0], ages, warm, None)
            say(f"measuring {tasks} tasks, {f'at {rate:.1f}/s' if rate else 'flat out'} ...")
            before = _cpu(links), bench_box.server_cpu(settings)
            started = time.monotonic()
            seen = _drive(producer, names[0], ages, tasks, rate)
            elapsed = time.monotonic() - started
            spent = {f"hop{i}": s - before[0][i] for i, s in enumerate(_cpu(links))}
            servers = bench_box.server_cpu(settings, before[1])
        finally:
            for p in links:
                p.send_signal(signal.SIGTERM)
            for p in links:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
            for failed in topic_admin.drop_scratch(settings, names, [_group(n) for n in names]):
                say(f"left behind: {failed}")
    per = {name: round(1000 * s / tasks, 3) for name, s in spent.items()}
    seen.sort()
    return {
        "hops": hops,
        "redis_trips_per_hop": trips,
        "tasks": tasks,
        "rate": rate,
        "tasks_per_s": round(tasks / elapsed, 1),
        "box_cpu_ms_per_task": bench_box.box(
            sum(per.values()), {k: 1000 * v / tasks for k, v in servers.items()}
        ),
        "cpu_ms_per_task": per,
        "latency_ms": {
            "p50": round(1000 * seen[len(seen) // 2], 2),
            "p99": round(1000 * seen[max(0, int(len(seen) * 0.99) - 1)], 2),
        },
    }


def _age(value: bytes, now: float) -> float:
    """Seconds since the send time a message's value starts with (`<time>|...`); -1 for a value
    the driver did not write, which the figures then leave out."""
    try:
        return now - float(value.split(b"|", 1)[0])
    except ValueError:
        return -1.0


def _group(topic: str) -> str:
    return f"wk-bench-hops-{topic}"


def _start(source: str, target: str | None, trips: int, out: Path) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "wakeful.devstack.bench_hops", source, target or "-", str(trips), str(out)]
    return subprocess.Popen(args, stdin=subprocess.DEVNULL)


def _marker(out: Path) -> Path:
    """The file a link makes once its clients are built."""
    return out.with_name(out.name + ".ready")


def _cpu(links: list[subprocess.Popen[bytes]]) -> list[float]:
    times = [psutil.Process(p.pid).cpu_times() for p in links]
    return [t.user + t.system for t in times]


def _drive(producer: Producer, topic: str, ages: Path, tasks: int, rate: float | None) -> list[float]:
    """Publish `tasks` messages (at `rate` a second, or flat out), each stamped with its send time,
    and return the age at which the last hop took each."""
    had = _ages(ages)
    started = time.monotonic()
    filler = b"x" * PAYLOAD_BYTES
    for i in range(tasks):
        if rate:
            while (wait := started + i / rate - time.monotonic()) > 0:
                producer.poll(min(wait, 0.005))
        producer.produce(topic, key=uuid.uuid4().hex.encode(), value=f"{time.time()}|".encode() + filler)
        producer.poll(0)
    producer.flush(30)
    if not wait_until(lambda: len(_ages(ages)) >= len(had) + tasks, DONE_S, 0.05):
        raise RuntimeError(f"the last hop took {len(_ages(ages)) - len(had)} of {tasks} in {DONE_S:.0f} s")
    return _ages(ages)[len(had) : len(had) + tasks]


def _ages(ages: Path) -> list[float]:
    return [float(x) for x in ages.read_text().split() if not x.startswith("-")] if ages.exists() else []


def render(r: Mapping[str, Any]) -> str:
    each = ", ".join(f"{k} {v}" for k, v in r["cpu_ms_per_task"].items())
    offered = f"offered at {r['rate']}/s" if r["rate"] else "flat out"
    return "\n".join(
        [
            f"chain           : {r['hops']} hops, {r['redis_trips_per_hop']} Redis round trips each, "
            f"no wakeful code between them; {r['tasks']} tasks {offered}",
            bench_box.render_box(r["box_cpu_ms_per_task"]).replace("(roles", "(chain", 1),
            f"throughput      : {r['tasks_per_s']} tasks/s",
            f"first to last   : p50 {r['latency_ms']['p50']} ms, p99 {r['latency_ms']['p99']} ms",
            f"CPU ms per task : {each}",
        ]
    )


if __name__ == "__main__":
    hop(
        Settings.from_env(),
        sys.argv[1],
        None if sys.argv[2] == "-" else sys.argv[2],
        int(sys.argv[3]),
        Path(sys.argv[4]),
    )
