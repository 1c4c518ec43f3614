"""A runner that keeps reading while slow messages are in flight, for a role whose handler waits on
something slow (the proposer, on a model).

The plain Runner handles a batch and stores its offsets before it polls again, so one model call
of S seconds holds every message behind it, on every partition the process owns, for up to S:
a wave waits for its slowest message, and the next batch for the whole batch. Here each message
is handed to the pool as soon as it is read, behind the message in flight for the same task if
there is one (one message in flight per task, in offset order), and the role goes on polling. Per
partition, the offset stored is the end of the prefix that is done, once the output of that
prefix is acknowledged by Kafka (DESIGN.md section 8): never ahead of the work it covers.

A refused delivery that can pass makes everything not yet stored run again, as the plain Runner
reruns its batch: the role lets the messages in flight finish, forgets what it had read, and reads
again from the lowest offset it has not stored. At most `max_pending` messages are read and not
yet stored; above that the role pauses its partitions (and keeps polling, so it stays in its group).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from confluent_kafka import KafkaException, Message, TopicPartition

from wakeful.consumers.kafka.runner import Runner
from wakeful.core.faults import fault

Where = tuple[str, int]  # topic, partition


class OverlapRunner(Runner):
    def __init__(self, *args: Any, max_pending: int = 1000, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_pending = max_pending
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._read: dict[Where, dict[int, bool]] = {}  # offset -> done, not yet stored
        self._behind: dict[bytes, deque[Message]] = {}  # per task: read, waiting for the one in flight
        self._busy: set[bytes] = set()  # tasks with a message in flight
        self._failed: BaseException | None = None  # Stopping or KafkaClientFailed, from a pool thread
        self._paused = False
        self._stop: threading.Event | None = None

    def _next_batch(self) -> list[Message]:
        if self._stop is not None:
            self._store_done(self._stop)
        self._pace()
        return super()._next_batch()

    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        super().run(stop)

    def run_batch(self, msgs: list[Message], stop: threading.Event) -> None:
        """Hand each message to the pool, or queue it behind its task's message in flight."""
        self._before(msgs)
        for m in msgs:
            key = m.key() or b""
            with self._lock:
                self._read.setdefault(_where(m), {})[m.offset() or 0] = False
                if key in self._busy:
                    self._behind.setdefault(key, deque()).append(m)
                    continue
                self._busy.add(key)
            self.pool.submit(self._chain, m, stop)

    def _chain(self, msg: Message, stop: threading.Event) -> None:
        """Handle msg, then each message read behind it for the same task, in offset order."""
        key = msg.key() or b""
        current: Message | None = msg
        while current is not None:
            try:
                self._handle(current, stop)
            except BaseException as exc:  # the role is stopping or its Kafka client is finished
                with self._lock:
                    self._failed = self._failed or exc
                    self._busy.discard(key)
                    self._idle.notify_all()
                return
            with self._lock:
                self._read.setdefault(_where(current), {})[current.offset() or 0] = True
                queue = self._behind.get(key)
                current = queue.popleft() if queue else None
                if queue is not None and not queue:
                    del self._behind[key]
                if current is None:
                    self._busy.discard(key)
                    self._idle.notify_all()

    def _store_done(self, stop: threading.Event) -> None:
        """Store, per partition, the end of the done prefix, once its output is durable."""
        with self._lock:
            if self._failed is not None:
                raise self._failed
            prefix = {where: _done_prefix(offsets) for where, offsets in self._read.items()}
        done = {where: n for where, n in prefix.items() if n}
        if not done:
            return
        if not self._settle(stop):
            return self._rewind()
        if self.after_batch is not None:
            self._retrying(self.after_batch, stop, "after_batch")
        with self._lock:
            stored = []
            for where, n in done.items():
                offsets = self._read[where]
                finished = sorted(offsets)[:n]
                for offset in finished:
                    del offsets[offset]
                stored.append(TopicPartition(where[0], where[1], finished[-1] + 1))
        fault(f"{self.role}.before_offsets")
        try:
            self.consumer.store_offsets(offsets=stored)
        except KafkaException as exc:  # a partition taken away meanwhile: its new owner redoes it
            self.log("runner.offsets_not_stored", role=self.role, error=repr(exc))
        self.counters.batches += 1
        self.counters.messages += sum(done.values())

    def _rewind(self) -> None:
        """Read again from the lowest offset not stored, once what is in flight has finished."""
        for tp in self._forget():
            self.consumer.seek(tp)

    def _forget(self) -> list[TopicPartition]:
        """Let what is in flight finish, then forget what was read; returns, per partition, the
        lowest offset read and not stored."""
        with self._idle:
            while self._busy and self._failed is None:
                self._idle.wait(0.5)
            starts = [TopicPartition(w[0], w[1], min(o)) for w, o in self._read.items() if o]
            self._read.clear()
            self._behind.clear()
        return starts

    def _replace_client(self) -> None:
        """Replace the client once what is in flight has finished. What was read and not stored is
        forgotten: its partitions were lost or its client ended, and their next owner reads it again."""
        self._forget()
        self._paused = False
        super()._replace_client()

    def _pace(self) -> None:
        """Pause reading while max_pending messages wait to be stored; resume below it."""
        with self._lock:
            pending = sum(len(o) for o in self._read.values())
        full = pending >= self.max_pending
        if full != self._paused:
            assigned = self.consumer.assignment()
            (self.consumer.pause if full else self.consumer.resume)(assigned)
            self._paused = full


def _where(msg: Message) -> Where:
    return (msg.topic() or "", msg.partition() or 0)


def _done_prefix(offsets: dict[int, bool]) -> int:
    """How many of the lowest offsets are done, without a gap of one that is not."""
    n = 0
    for offset in sorted(offsets):
        if not offsets[offset]:
            break
        n += 1
    return n
