"""Rate limits at the HTTP door, as pure code: a token bucket per name, on a clock it is given.

The door keeps two: one per signer key, taken only once a request's signature verifies (so nobody
can spend another key's allowance by naming it), and one per client address, taken by every request
the door refuses (so a flood of forgeries costs its sender, not the door's CPU). A bucket holds
`burst` tokens and refills at `rate` per second; a request that finds none is answered 429 with
Retry-After: the seconds until a token is back.

Each door process keeps its own buckets: N doors behind a balancer allow N times the rate
(docs/ingress.md). At most `size` names are kept; the one untouched longest goes first, and a name
that comes back starts full (the bound is on memory, never on fairness to a key that keeps sending).

A client address is counted by `address()`: an IPv4 address as it is, an IPv6 one by its /64, the
smallest block a network hands one subscriber (RFC 6177), so that a sender cannot start a fresh
bucket for each of the 2**64 addresses it holds.
"""

from __future__ import annotations

import ipaddress
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    rate: float  # tokens per second
    burst: int  # tokens a bucket holds

    def __post_init__(self) -> None:
        if not (self.rate > 0 and self.burst >= 1):
            raise ValueError(f"a rate limit needs a rate above 0 and a burst of 1 or more, got {self}")


class Buckets:
    """Token buckets by name. Not thread-safe: the door calls it from its event loop only."""

    def __init__(self, limit: Limit, clock: Callable[[], float], size: int = 100_000) -> None:
        self.limit = limit
        self.clock = clock
        self.size = size
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # name -> (tokens, at)

    def waiting(self, name: str) -> float:
        """The seconds until `name` has a token, taking none: 0.0 if it has one now."""
        now = self.clock()
        tokens, at = self._buckets.get(name, (float(self.limit.burst), now))
        tokens = min(float(self.limit.burst), tokens + max(0.0, now - at) * self.limit.rate)
        return 0.0 if tokens >= 1.0 else (1.0 - tokens) / self.limit.rate

    def take(self, name: str) -> float:
        """Take one token for `name`: 0.0 if there was one, else the seconds until there is."""
        now = self.clock()
        tokens, at = self._buckets.pop(name, (float(self.limit.burst), now))
        tokens = min(float(self.limit.burst), tokens + max(0.0, now - at) * self.limit.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.limit.rate
        self._buckets[name] = (tokens, now)
        if len(self._buckets) > self.size:
            self._buckets.popitem(last=False)
        return wait


def address(host: str) -> str:
    """The name a client address's bucket goes by: an IPv4 address (or one mapped into IPv6) as it
    is, an IPv6 address by its /64 network, anything else (no address at all) as it is."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


def retry_after(wait: float) -> str:
    """The Retry-After header for a wait: whole seconds, rounded up, at least 1."""
    return str(max(1, math.ceil(wait)))
