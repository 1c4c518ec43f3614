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
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
from confluent_kafka import Consumer, KafkaError, Message, Producer

from wakeful.bench import box as bench_box
from wakeful.bench.pipeline import pct
from wakeful.consumers.kafka.consuming import consumer_config
from wakeful.consumers.kafka.producing import producer_config
from wakeful.consumers.kafka.runner import BATCH, POLL_S
from wakeful.core import kafka_auth
from wakeful.core.errors import WakefulError
from wakeful.core.process import Say, wait_until
from wakeful.core.settings import Settings
from wakeful.operate import topics as topic_admin
from wakeful.state import acl

PAYLOAD_BYTES = 600  # about a wake's signed envelope
STATS = ("stats_cb", "statistics.interval.ms")  # the roles' metrics hook: wakeful's, not the engine's
TRIP_TTL_MS = 60_000  # a trip's key expires: the chain leaves nothing behind in Redis
FLUSH_S = 10.0  # the longest a hop waits for the broker to acknowledge a batch's outputs
STALL_S = 60.0  # how long the last hop may take nothing more before the run is called stuck


def _config(settings: Settings, built: Mapping[str, Any]) -> dict[str, Any]:
    """A role's client settings, logged in as the admin (the chain's topics are scratch topics no
    role may touch), without the roles' metrics hook."""
    return {k: v for k, v in built.items() if k not in STATS} | kafka_auth.client_config(
        settings, kafka_auth.ADMIN
    )


def hop(settings: Settings, source: str, target: str | None, trips: int, out: Path) -> int:
    """One link of the chain, until SIGTERM or its parent goes: take from `source`, make `trips`
    round trips, produce to `target` and store the offsets once the broker has the outputs; the
    last link (`target` None) writes each message's age to `out`. Every link marks `out`'s marker
    once its clients are built. Returns 1 if the broker refused an output (its offset not stored)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # on Ctrl-C the driver stops the chain (SIGTERM)
    stop, parent, refused = threading.Event(), os.getppid(), list[str]()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def delivered(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            refused.append(err.str())

    consumer = Consumer(_config(settings, consumer_config(settings, "gate", _group(source))))
    producer = Producer(_config(settings, producer_config(settings, "gate")))
    redis = acl.connect(settings, "admin")
    ages = out.open("a", buffering=1) if target is None else None
    try:
        consumer.subscribe([source])
        _marker(out).touch()
        while os.getppid() == parent and not stop.is_set():
            first = consumer.poll(POLL_S)
            batch = [m for m in ([first, *consumer.consume(BATCH - 1, 0)] if first else []) if not m.error()]
            for msg in batch:
                key, value = msg.key() or b"", msg.value() or b""
                for i in range(trips):
                    redis.set(f"wk:bench:hops:{{{key.hex()}}}:{i}", value[:16], px=TRIP_TTL_MS)
                if target is not None:
                    producer.produce(target, key=key, value=value, on_delivery=delivered)
            if target is not None and batch and (producer.flush(FLUSH_S) or refused):
                print(f"bench-hops: {source} -> {target}: not acknowledged: {refused}", file=sys.stderr)
                return 1
            for msg in batch:
                consumer.store_offsets(msg)
            if ages is not None and batch:
                ages.write("".join(f"{_age(m.value() or b'', time.time())}\n" for m in batch))
    finally:
        consumer.close()
    return 0


def run(
    settings: Settings, say: Say, *, hops: int, trips: int, tasks: int, rate: float | None
) -> dict[str, Any]:
    """The chain's CPU per task, each link's, the servers', and the first hop to the last's latency."""
    tag = uuid.uuid4().hex[:8]
    names = [f"wakeful.bench.hops.{tag}.{i}" for i in range(hops)]
    with tempfile.TemporaryDirectory(prefix="wakeful-bench-hops-") as work:
        ages = Path(work) / "ages"
        outs = [Path(work) / f"hop{i}" for i in range(hops - 1)] + [ages]
        links: list[subprocess.Popen[bytes]] = []

        def up() -> bool:
            return all(p.poll() is not None or _marker(o).exists() for p, o in zip(links, outs, strict=True))

        try:
            topic_admin.ensure_topics(settings, names=names)
            links += [
                _start(names[i], names[i + 1] if i + 1 < hops else None, trips, outs[i]) for i in range(hops)
            ]
            if not wait_until(up, 60, 0.1) or any(p.poll() is not None for p in links):
                raise WakefulError(
                    "the chain's processes did not all start within 60 s: their errors are above"
                )
            producer = Producer(_config(settings, producer_config(settings, "gate")))
            warm = min(tasks, 500)
            say(f"{hops} hops, {trips} Redis round trips each: warming up with {warm} tasks ...")
            taken = _Ages(ages)
            _drive(producer, names[0], taken, warm, rate=None, links=links)
            say(f"measuring {tasks} tasks, {f'at {rate:.1f}/s' if rate else 'flat out'} ...")
            before = _cpu(links), bench_box.server_cpu(settings)
            started = time.monotonic()
            seen = sorted(_drive(producer, names[0], taken, tasks, rate=rate, links=links))
            elapsed = time.monotonic() - started
            spent = {f"hop{i}": s - before[0][i] for i, s in enumerate(_cpu(links))}
            servers = bench_box.server_cpu(settings, before[1])
        finally:
            _stop(links)
            for failed in topic_admin.drop_scratch(settings, names, [_group(n) for n in names]):
                say(f"left behind: {failed}")
    per = {name: round(1000 * s / tasks, 3) for name, s in spent.items()}
    return {
        "hops": hops,
        "redis_trips_per_hop": trips,
        "tasks": tasks,
        "rate": rate,
        "topics": names,
        "tasks_per_s": round(tasks / elapsed, 1),
        "box_cpu_ms_per_task": bench_box.box(
            sum(per.values()), {k: 1000 * v / tasks for k, v in servers.items()}
        ),
        "cpu_ms_per_task": per,
        "latency_ms": {f"p{p}": round(1000 * pct(seen, p), 2) for p in (50, 99)},
    }


def _stop(links: list[subprocess.Popen[bytes]]) -> None:
    for p in links:
        p.send_signal(signal.SIGTERM)
    for p in links:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


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
    args = [sys.executable, "-m", "wakeful.bench.hops", source, target or "-", str(trips), str(out)]
    return subprocess.Popen(args, stdin=subprocess.DEVNULL)


def _marker(out: Path) -> Path:
    """The file a link makes once its clients are built."""
    return out.with_name(out.name + ".ready")


def _cpu(links: list[subprocess.Popen[bytes]]) -> list[float]:
    times = [psutil.Process(p.pid).cpu_times() for p in links]
    return [t.user + t.system for t in times]


def _drive(
    producer: Producer,
    topic: str,
    ages: _Ages,
    tasks: int,
    *,
    rate: float | None,
    links: list[subprocess.Popen[bytes]],
) -> list[float]:
    """Publish `tasks` messages (at `rate` a second, or flat out), each stamped with its send time,
    and return the age at which the last hop took each; a hop that exits, or a chain that stops
    taking messages for STALL_S, ends the run with the reason."""
    had = len(ages.take())
    started = time.monotonic()
    filler = b"x" * PAYLOAD_BYTES
    for i in range(tasks):
        if rate:
            while (wait := started + i / rate - time.monotonic()) > 0:
                producer.poll(min(wait, 0.005))
        producer.produce(topic, key=uuid.uuid4().hex.encode(), value=f"{time.time()}|".encode() + filler)
        producer.poll(0)
    if producer.flush(FLUSH_S):
        raise WakefulError(
            f"the broker did not take the chain's input within {FLUSH_S:.0f} s: `wakeful dev status`"
        )
    got, moved = 0, time.monotonic()
    while (now := len(ages.take()) - had) < tasks:
        dead = next((i for i, p in enumerate(links) if p.poll() is not None), None)
        if dead is not None:
            raise WakefulError(f"hop{dead} exited with status {links[dead].returncode}: its error is above")
        if now > got:
            got, moved = now, time.monotonic()
        elif time.monotonic() - moved > STALL_S:
            raise WakefulError(f"the last hop took {got} of {tasks} and no more in {STALL_S:.0f} s")
        time.sleep(0.05)
    return ages.seen[had : had + tasks]


class _Ages:
    """The last hop's ages as its file grows, each look reading only what was written since the
    one before (the driver looks every 50 ms on the box it measures)."""

    def __init__(self, path: Path) -> None:
        self.path, self.read, self.tail, self.seen = path, 0, b"", list[float]()

    def take(self) -> list[float]:
        if self.path.exists():
            with self.path.open("rb") as f:
                f.seek(self.read)
                text = f.read()
            self.read += len(text)
            *lines, self.tail = (self.tail + text).split(b"\n")
            self.seen += [float(x) for x in lines if x and not x.startswith(b"-")]
        return self.seen


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
    sys.exit(
        hop(
            Settings.from_env(),
            sys.argv[1],
            None if sys.argv[2] == "-" else sys.argv[2],
            int(sys.argv[3]),
            Path(sys.argv[4]),
        )
    )
