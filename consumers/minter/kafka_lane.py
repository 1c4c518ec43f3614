"""The minter's Kafka provider on a thread of its own (D123): a broker that is slow or down holds up
the steps that wait for a token, never the Redis users the minter makes on its main thread.

Every call that reaches the broker goes through this lane, one at a time (the token client is one
connection): making a step's token, expiring the tokens of ended steps (and only then removing
their records, so a token the broker still honours stays listed and revocable), and expiring those
whose record `wakeful authority credentials revoke` removed.

The lane never touches an executor's connection: its answers go back to the minter's main thread
(`answered()`, woken through `wake`), which alone writes to and closes those sockets; an answer
whose connection closed meanwhile is ended there. A mint asked longer ago than the executor waits
(core/minting.TIMEOUT_S) is not made: nobody would hold it. Stopping drops the mints still queued,
runs the ends, then expires every token made here and removes their records.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import redis

from wakeful.consumers.minter.kafka_provider import KafkaProvider
from wakeful.core.grants import Grant
from wakeful.core.log import Log
from wakeful.core.minting import TIMEOUT_S
from wakeful.state import minted

STOP_S = 10.0  # how long stopping waits for the broker calls under way and queued ends
_LOG = Log(role="minter")

Mint = Callable[[Grant], dict[str, object]]
Answer = tuple[Any, dict[str, object]]  # (the asking connection, as the main thread knows it; the answer)


class KafkaLane:
    """Runs `mint(grant)` (the minter's own, which answers a Kafka grant through `provider`) and the
    provider's broker calls on one thread, in the order they were asked."""

    def __init__(self, provider: KafkaProvider, mint: Mint, client: redis.Redis | None) -> None:
        self.provider, self._mint, self._client = provider, mint, client
        self._jobs: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self._answers: queue.SimpleQueue[Answer] = queue.SimpleQueue()
        self.wake, self._waker = socket.socketpair()  # readable when an answer waits (the main thread's)
        for end in (self.wake, self._waker):
            end.setblocking(False)
        self._stopping, self._revoking = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="wakeful-minter-kafka", daemon=True)
        self._thread.start()

    def mint(self, grant: Grant, peer: object, asked_at: float | None = None) -> None:
        """Make `grant`'s token; its answer comes back through answered(), with `peer`. `asked_at`:
        when the step asked (time.monotonic(); default now)."""
        self._jobs.put(("mint", (grant, peer, time.monotonic() if asked_at is None else asked_at)))

    def end(self, token_ids: Sequence[str]) -> None:
        if token_ids:
            self._jobs.put(("end", list(token_ids)))

    def check_revoked(self) -> None:
        if not self._revoking.is_set():  # one check queued at a time, however long the broker takes
            self._revoking.set()
            self._jobs.put(("revoked", None))

    def answered(self) -> list[Answer]:
        """The answers ready (the main thread's: it empties `wake` too)."""
        with contextlib.suppress(OSError):
            while self.wake.recv(4096):
                pass
        found = []
        with contextlib.suppress(queue.Empty):
            while True:
                found.append(self._answers.get_nowait())
        return found

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> bool:
        """Drop the mints still queued, run the ends, then expire every token made here and remove
        their records; whether that finished within STOP_S (else the broker ends them by themselves)."""
        self._stopping.set()
        self._jobs.put(None)
        self._thread.join(STOP_S)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            kind, what = job
            try:
                if kind == "mint":
                    self._answer(what)
                elif kind == "end":
                    self._ended(self.provider.end(what))
                else:
                    self._revoking.clear()
                    if self._client is not None and (revoked := self.provider.revoked(self._client)):
                        _LOG("minter.tokens_revoked", tokens=revoked[:20], count=len(revoked))
            except Exception as exc:  # a job's fault is its own: the lane serves the next one
                _LOG("minter.kafka_lane_failed", job=kind, error=str(exc)[:200])
                if kind == "mint":
                    self._send(what[1], {"ok": False, "error": f"the minter failed: {str(exc)[:200]}"})
        left = sorted(self.provider.hmacs)
        self.provider.close()  # every token made here and not ended yet, expired
        self._ended(left)

    def _answer(self, asked: tuple[Grant, object, float]) -> None:
        grant, peer, asked_at = asked
        if self._stopping.is_set():
            said: dict[str, object] = {"ok": False, "error": "the minter is stopping"}
        elif time.monotonic() - asked_at > TIMEOUT_S:  # the step has stopped waiting: nobody would hold it
            said = {"ok": False, "error": f"asked {TIMEOUT_S:.0f} s ago or more: not made"}
        else:
            said = self._mint(grant)
        self._send(peer, said)

    def _send(self, peer: object, said: dict[str, object]) -> None:
        self._answers.put((peer, said))
        with contextlib.suppress(OSError):  # full: a wake is already pending
            self._waker.send(b"!")

    def _ended(self, token_ids: Sequence[str]) -> None:
        """Remove the records of tokens the broker was asked to expire."""
        if token_ids and self._client is not None:
            try:
                minted.end(self._client, [], token_ids)
            except redis.RedisError as exc:  # past their lifetime, any minter's reaper removes them
                _LOG("minter.records_left", tokens=list(token_ids)[:20], error=str(exc)[:200])
