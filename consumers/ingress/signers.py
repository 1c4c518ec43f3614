"""The door's view of the signer registry: each key's record as Redis held it at most TTL_S ago.

A post costs the door one signature check, and without this one Redis read as well, on a thread
(the client is synchronous), for a record that changes a few times a year. So the door keeps what
it read for a second. A key registered, changed or revoked reaches the door within TTL_S; it
reaches inbound and the gate at once, since both read the registry for every event. So the door
never lets anything be applied that the registry refuses: at worst, for a second, it answers 202
to an event that inbound then refuses, with a receipt that says why. A key id nobody registered is
remembered too, so a stream of forgeries under one made-up id costs one read a second. At most
SIZE ids are kept; the one read longest ago goes first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

TTL_S = 1.0
SIZE = 10_000
K = TypeVar("K")
T = TypeVar("T")


class Cached(Generic[K, T]):
    """What was put under a key, for `ttl` seconds after it was put; at most `size` keys, the one
    put longest ago going first. The door keeps two: the signers' records (TTL_S), and the
    identities it published, for the max age (consumers/ingress/events.py)."""

    def __init__(self, clock: Callable[[], float], ttl: float = TTL_S, size: int = SIZE) -> None:
        self.clock = clock
        self.ttl = ttl
        self.size = size
        self._read: OrderedDict[K, tuple[float, T]] = OrderedDict()  # key -> (put at, value)

    def get(self, key: K) -> tuple[bool, T | None]:
        """(True, what was put) if it was put less than `ttl` ago, else (False, None)."""
        found = self._read.get(key)
        if found is None or self.clock() - found[0] >= self.ttl:
            return False, None
        return True, found[1]

    def put(self, key: K, value: T) -> None:
        self._read.pop(key, None)
        self._read[key] = (self.clock(), value)
        while len(self._read) > self.size:
            self._read.popitem(last=False)
