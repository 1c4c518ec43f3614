"""The minter's Kafka provider on a thread of its own (D123): a broker that is slow or down holds up
the steps that wait for a token, never the Redis users the minter makes on its main thread.

Every call that reaches the broker goes through this lane, one at a time (the token client is
one connection): making a step's token, expiring the tokens of ended steps, and expiring those
whose record `wakeful authority credentials revoke` removed. A step's answer is sent to its
executor thread from here; each of those threads has one request outstanding at most, so no
reply can overtake another on its connection. A token made here is in the provider's memory
alone; stopping the lane expires every one left.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis

from wakeful.consumers.minter.kafka_provider import KafkaProvider
from wakeful.core.grants import Grant
from wakeful.core.log import Log

STOP_S = 10.0  # how long stopping waits for a broker call under way
_LOG = Log(role="minter")

Mint = Callable[[Grant], dict[str, object]]
Job = tuple[str, Any, Any]  # ("mint", grant, connection) | ("end", token ids, None) | ("revoked", None, None)


class KafkaLane:
    """Runs `mint(grant)` (the minter's own, which answers a Kafka grant through `provider`) and the
    provider's broker calls on one thread, in the order they were asked."""

    def __init__(self, provider: KafkaProvider, mint: Mint, client: redis.Redis) -> None:
        self.provider, self._mint, self._client = provider, mint, client
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="wakeful-minter-kafka", daemon=True)
        self._thread.start()

    def mint(self, grant: Grant, conn: socket.socket, reply: Callable[[dict[str, object]], bytes]) -> None:
        """Answer `grant` on `conn` once the broker has (reply: the answer's line)."""
        self._jobs.put(("mint", grant, (conn, reply)))

    def end(self, token_ids: Sequence[str]) -> None:
        if token_ids:
            self._jobs.put(("end", list(token_ids), None))

    def check_revoked(self) -> None:
        self._jobs.put(("revoked", None, None))

    def stop(self) -> None:
        """Stop taking work, once the broker call under way (if any) has ended or STOP_S passed."""
        self._jobs.put(None)
        self._thread.join(STOP_S)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            kind, what, where = job
            try:
                if kind == "mint":
                    conn, reply = where
                    answer = self._mint(what)
                    with contextlib.suppress(OSError):  # gone, or not reading: its next read fails
                        conn.send(reply(answer))
                elif kind == "end":
                    self.provider.end(what)
                elif revoked := self.provider.revoked(self._client):
                    _LOG("minter.tokens_revoked", tokens=revoked[:20], count=len(revoked))
            except Exception as exc:  # a job's fault is its own: the lane serves the next one
                _LOG("minter.kafka_lane_failed", job=kind, error=str(exc)[:200])
