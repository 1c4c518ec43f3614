"""The egress guard: a tool's code reaches only the endpoints its `egress` declares (D116).

The executor installs it once (`install`), with what each of its app's tools may reach
(core/egress.py). From then on, while a tool runs (`confined`: its connect, and each call, undo and
lookup), Python's audit hooks check, BEFORE they happen, in the tool's thread and every thread it
starts:

- name look-ups (getaddrinfo, gethostbyname, gethostbyaddr): the name must be declared, so not even
  a DNS query leaks a refused name;
- connects and datagrams: the address must be a declared endpoint, or what a declared name (or one
  looked up under the guard) resolves to; a Unix socket must be declared by its path;
- new processes: only with an environment that routes through the executor's outbound proxy under
  this call's own token (`outbound_env`, core/egress_proxy.py), which holds them to the same list.

What is refused raises EgressRefused (an OSError, so a client library fails as if refused by the
network) and is remembered on the confinement, so a tool that swallows the error still fails its
step: the executor reads `refused` after the call. Installed to `report` (WAKEFUL_EGRESS_MODE=report,
for a rollout), nothing is stopped: what a run tried outside its egress is only remembered.

What it cannot stop: a C extension's own sockets (librdkafka, a gRPC core), raw `_thread` threads,
and work handed to a thread the runtime started before the call. A deployment adds a network policy
for those (docs/security.md, "Egress").
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from wakeful.core.egress import Allowed

ATTR = "_wakeful_egress"
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
_LOOKUPS = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"}
_SENDS = {"socket.connect", "socket.sendto", "socket.sendmsg"}
# Each event that starts a process, and where its arguments carry the environment (None: nowhere).
_SPAWNS: dict[str, int | None] = {
    "subprocess.Popen": 3,
    "os.posix_spawn": 2,
    "os.spawn": 3,
    "os.exec": 2,
    "os.system": None,
}
WATCHED = frozenset({*_LOOKUPS, *_SENDS, *_SPAWNS})
RESOLVED_S = 30.0  # how long a declared name's addresses are kept between look-ups


class EgressRefused(PermissionError):
    """A tool tried to reach what its egress does not declare; nothing left the process."""


@dataclass
class Confinement:
    """One tool's run under the guard: what it may reach, the token its processes show the proxy,
    and what it tried and was refused."""

    allowed: Allowed
    app: str = ""
    token: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    proxy: str | None = None  # the outbound proxy's URL for this run, with its token
    refused: list[str] = field(default_factory=list)
    names: set[str] = field(default_factory=set)  # names looked up under the guard, and permitted

    report: bool = False  # WAKEFUL_EGRESS_MODE=report: remembered, never stopped

    def deny(self, where: str) -> None:
        """Remember what was tried outside the egress; stop it unless only reporting."""
        self.refused.append(where)
        if not self.report:
            raise EgressRefused(self.allowed.refusal(where))


@dataclass
class _Installed:
    app: str
    tools: dict[str, Allowed]
    proxy: Any = None  # core.egress_proxy.Proxy, when tools may start processes
    report: bool = False


_installed: _Installed | None = None
_local = threading.local()  # `resolving`: the guard's own look-ups, never checked
_resolved: dict[str, tuple[float, frozenset[str]]] = {}


def install(app: str, tools: Mapping[str, Allowed], proxy: Any = None, *, report: bool = False) -> None:
    """Confine every later run of the app's tools to `tools` (by name); with `report`, only note
    what a run tries outside them (a rollout's first step). Once per process: the audit hook
    cannot be taken back; a second install replaces what it enforces."""
    global _installed  # noqa: PLW0603 - one guard per process, as its audit hook is
    first = _installed is None
    _installed = _Installed(app, dict(tools), proxy, report)
    if first:
        sys.addaudithook(_hook)
        threading.Thread.start = _start_confined  # type: ignore[method-assign]


def installed() -> bool:
    return _installed is not None


def uninstall() -> None:
    """Lift what the guard enforces: a process that ran an executor's main() for a look and goes
    on with other work (a test's probe). The hook stays, inert: audit hooks cannot be removed."""
    global _installed  # noqa: PLW0603 - see install()
    _installed = None


@contextmanager
def confined(tool: str) -> Iterator[Confinement | None]:
    """Run the body as `tool`: held to its egress (None, unguarded, where no guard is installed)."""
    setup = _installed
    if setup is None:
        yield None
        return
    run = Confinement(setup.tools.get(tool) or Allowed(tool), setup.app, report=setup.report)
    if setup.proxy is not None:
        run.proxy = setup.proxy.admit(run)
    thread = threading.current_thread()
    before = getattr(thread, ATTR, None)
    setattr(thread, ATTR, run)
    try:
        yield run
    finally:
        setattr(thread, ATTR, before)
        if setup.proxy is not None:
            setup.proxy.drop(run)


def current() -> Confinement | None:
    found: Confinement | None = getattr(threading.current_thread(), ATTR, None)
    return found


def outbound_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a tool gives a process it starts: `base` (default: this one's), with every
    proxy variable naming the executor's outbound proxy under this call's token. Only inside a
    tool's run in the executor."""
    run = current()
    if run is None or run.proxy is None:
        raise RuntimeError("outbound_env() is for a tool's call in the executor, whose proxy holds it")
    env = dict(base if base is not None else os.environ)
    env.update(dict.fromkeys(PROXY_VARS, run.proxy))
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    return env


_START = threading.Thread.start


def _start_confined(self: threading.Thread) -> None:
    """Thread.start, with a thread started by a confined tool confined to the same for its life."""
    run = current()
    if run is not None and getattr(self, ATTR, None) is None:
        setattr(self, ATTR, run)
    _START(self)


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event not in WATCHED or _installed is None:
        return
    run = current()
    if run is None or getattr(_local, "resolving", False):
        return
    if event in _LOOKUPS:
        _look_up(run, args)
    elif event in _SENDS:
        _send(run, args)
    else:
        _spawn(run, event, args)


def _look_up(run: Confinement, args: tuple[Any, ...]) -> None:
    host = _text(args[0]) if args[0] is not None else "127.0.0.1"
    port = _port(args[1]) if len(args) > 1 else None
    if not run.allowed.permits(host, port):
        return run.deny(host if port is None else f"{host}:{port}")
    run.names.add(host)
    return None


def _send(run: Confinement, args: tuple[Any, ...]) -> None:
    sock, address = args[0], args[1]
    if address is None:  # a send on a connected socket: checked at its connect
        return
    if isinstance(address, str | bytes):
        path = _text(address)
        if not run.allowed.permits_path(path):
            run.deny(f"unix:{path or '(abstract)'}")
        return
    if sock.family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(address, tuple):
        return run.deny(f"a socket of family {sock.family!r}")
    host, port = str(address[0]), int(address[1])
    if not (run.allowed.permits(host, port) or host in _addresses(run, port)):
        run.deny(f"{host}:{port}")
    return None


def _spawn(run: Confinement, event: str, args: tuple[Any, ...]) -> None:
    where = _SPAWNS[event]
    env = args[where] if where is not None and len(args) > where else None
    if run.proxy is None or not isinstance(env, Mapping):
        return run.deny(f"a process ({event}) not started with outbound_env()")
    shown = {_text(k): _text(v) for k, v in env.items() if _text(k) in PROXY_VARS}
    if any(shown.get(name) != run.proxy for name in PROXY_VARS):
        run.deny(f"a process ({event}) not started with outbound_env()")
    return None


def _addresses(run: Confinement, port: int) -> frozenset[str]:
    """What the names the run may reach on `port` resolve to now (kept RESOLVED_S)."""
    names = {
        e.host for e in run.allowed.endpoints if not e.path and not e.is_address and e.lo <= port <= e.hi
    }
    names |= {n for n in run.names if run.allowed.permits(n, port)}
    found: set[str] = set()
    for name in names:
        if name.startswith("*."):
            continue
        kept = _resolved.get(name)
        if kept is None or kept[0] < time.monotonic():
            kept = (time.monotonic() + RESOLVED_S, _resolve(name))
            _resolved[name] = kept
        found |= kept[1]
    return frozenset(found)


def _resolve(name: str) -> frozenset[str]:
    _local.resolving = True
    try:
        return frozenset(str(info[4][0]) for info in socket.getaddrinfo(name, None))
    except OSError:
        return frozenset()
    finally:
        _local.resolving = False


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _port(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    text = _text(value)
    if text.isdigit():
        return int(text)
    try:
        _local.resolving = True
        return socket.getservbyname(text)
    except OSError:
        return -1  # a service nobody knows: matches no declared port
    finally:
        _local.resolving = False
