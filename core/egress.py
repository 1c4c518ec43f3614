"""Where a tool may reach: its `egress` entries resolved to endpoints, and the rule that says whether
a host and port is one of them (the guard that enforces it: core/egress_guard.py; D116).

A tool's `egress` names what it reaches. Each entry is either an endpoint written out:

    host:port          api.bank.example:443, 10.0.0.5:6379, [::1]:8080
    host:lo-hi         a range of ports: 10.0.0.5:7000-7005
    *.suffix:port      any name under suffix (not suffix itself): *.bank.example:443
    unix:/path         a Unix socket

or a name (`bank`) that the deployment maps to endpoints: WAKEFUL_EGRESS, as
`bank=10.0.0.5:6379,10.0.0.6:6379;shop=api.shop.example:443`, or, for a downstream that keeps its
records in the stack's own Redis (state/downstreams.py), that Redis. A name mapped nowhere lets the
tool reach no network at all (a tool that writes a file needs none).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from wakeful.core.errors import ConfigError

ENV = "WAKEFUL_EGRESS"
MODE_ENV = "WAKEFUL_EGRESS_MODE"  # enforce (the default), or report: note, never stop (a rollout)
MODES = ("enforce", "report")
NAME = re.compile(r"[a-z][a-z0-9_-]{0,62}")
_HOST = re.compile(r"(\*\.)?[A-Za-z0-9_]([A-Za-z0-9_.-]{0,252})")
_PORTS = re.compile(r"(\d{1,5})(?:-(\d{1,5}))?")


@dataclass(frozen=True)
class Endpoint:
    """One place a tool may connect to: a host (a name, an address, or `*.suffix`) on ports
    lo..hi; or a Unix socket's path (`host` "unix", `path` set)."""

    host: str
    lo: int = 0
    hi: int = 0
    path: str = ""

    def matches(self, host: str, port: int | None) -> bool:
        """Whether `host` (as a caller wrote it: a name or an address) on `port` is this endpoint;
        `port` None for a name looked up without one (its connect is checked again, with its port)."""
        if self.path or (port is not None and not self.lo <= port <= self.hi):
            return False
        wanted, asked = self.host.lower(), host.lower().rstrip(".")
        if wanted.startswith("*."):
            return asked.endswith(wanted[1:]) and len(asked) > len(wanted) - 1
        return asked == wanted or _same_address(asked, wanted)

    @property
    def is_address(self) -> bool:
        return _address(self.host) is not None

    def __str__(self) -> str:
        if self.path:
            return f"unix:{self.path}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.lo}" if self.lo == self.hi else f"{host}:{self.lo}-{self.hi}"


@dataclass(frozen=True)
class Allowed:
    """The endpoints one tool may reach, and the entries they came from (for what a refusal says)."""

    tool: str
    endpoints: tuple[Endpoint, ...] = ()
    declared: tuple[str, ...] = ()

    def permits(self, host: str, port: int | None) -> bool:
        return any(e.matches(host, port) for e in self.endpoints)

    def permits_path(self, path: str) -> bool:
        return any(e.path and e.path == path for e in self.endpoints)

    def refusal(self, where: str) -> str:
        """The receipt's words: which tool tried what, and what it declared."""
        said = ", ".join(self.declared) or "nothing"
        return f"egress refused: {self.tool} tried {where}, outside its declared egress ({said})"


def endpoint(text: str) -> Endpoint | None:
    """An entry written as an endpoint (see the module's grammar), or None for a name or nonsense."""
    if text.startswith("unix:/"):
        return Endpoint("unix", path=text[len("unix:") :])
    if text.startswith("["):  # [v6]:port
        host, close, rest = text[1:].partition("]")
        if not close or not rest.startswith(":") or _address(host) is None:
            return None
        ports = rest[1:]
    else:
        host, colon, ports = text.rpartition(":")
        if not colon or not _HOST.fullmatch(host):
            return None
    found = _PORTS.fullmatch(ports)
    if found is None:
        return None
    lo = int(found[1])
    hi = int(found[2]) if found[2] else lo
    return Endpoint(host, lo, hi) if 0 < lo <= hi <= 65535 else None


def parse_map(text: str) -> dict[str, tuple[Endpoint, ...]]:
    """WAKEFUL_EGRESS's value: `name=endpoint,endpoint;name=...`. Every problem is named at once."""
    table: dict[str, tuple[Endpoint, ...]] = {}
    problems: list[str] = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, eq, listed = part.partition("=")
        name = name.strip()
        if not eq or not NAME.fullmatch(name):
            problems.append(f"{part!r} is not name=host:port[,host:port...] (a name: a-z 0-9 _ -)")
            continue
        found = [(entry, endpoint(entry)) for entry in filter(None, (e.strip() for e in listed.split(",")))]
        problems += [
            f"{name}: {entry!r} is not host:port, host:lo-hi or unix:/path" for entry, e in found if e is None
        ]
        table[name] = table.get(name, ()) + tuple(e for _, e in found if e is not None)
    if problems:
        raise ConfigError(ENV, "; ".join(problems))
    return table


def resolve(tool: str, declared: Iterable[str], table: Mapping[str, tuple[Endpoint, ...]]) -> Allowed:
    """What `tool` may reach: each declared entry written out as an endpoint, or looked up by name."""
    entries = tuple(declared)
    endpoints: list[Endpoint] = []
    for entry in entries:
        written = endpoint(entry)
        endpoints += [written] if written is not None else list(table.get(entry, ()))
    return Allowed(tool, tuple(dict.fromkeys(endpoints)), entries)


def unmapped(declared: Iterable[str], table: Mapping[str, tuple[Endpoint, ...]]) -> list[str]:
    """The declared names that lead nowhere: the tool may reach no network through them."""
    return [e for e in declared if endpoint(e) is None and not table.get(e)]


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _same_address(a: str, b: str) -> bool:
    """Two spellings of one address (`::1` and `0:0::1`, an IPv4-mapped v6 and its v4)."""
    first, second = _address(a), _address(b)
    if first is None or second is None:
        return False
    first = getattr(first, "ipv4_mapped", None) or first
    second = getattr(second, "ipv4_mapped", None) or second
    return first == second
