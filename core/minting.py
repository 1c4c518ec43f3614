"""Per-step credentials (D120), the executor's side: the credential a step was minted, handed to
its tool's call alone (sdk `credential()`), and the client that asks the minter for one.

The minter is a process of its own (consumers/minter), the one holder of the right to make Redis
users, so that a tool persuaded to misbehave in the executor's process cannot make itself one.
The two speak over a Unix socket in a directory only this user may enter: one JSON line a request,
one a reply. `end` has no reply: the step does not wait for its credential's removal. Ends go on
a connection of their own, opened with ENDS_HELLO, which the minter reads when its reaper passes,
not when a line comes: a step's end wakes no process.

A credential's secret is never logged, stored, traced or returned: its repr hides it, and a tool's
result or error that carries it fails the step (consumers/executor/guarding.py).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import BinaryIO

import orjson

from wakeful.core.grants import Grant

SOCKET_ENV = "WAKEFUL_MINTER_SOCKET"  # set by the executor for the minter it starts: where it listens
TIMEOUT_S = 5.0  # a mint the minter has not answered by then fails the step's attempt (retried later)
ENDS_HELLO = b'{"op": "ends"}\n'  # the first line of the connection that carries ends


class MintRefused(Exception):
    """The minter would not, or could not, mint: the step's call is not made."""


@dataclass(frozen=True)
class Credential:
    """One step's credential: a Redis user made for it, its password, and when it ends at the latest
    (epoch milliseconds). Its repr names the user only."""

    user: str
    password: str = field(repr=False)
    expires_ms: int
    tool: str = ""  # the tool whose run it was minted for
    # a Kafka downstream's: the cluster its delegation token logs in to (D123; producers/kafka_tokens.login)
    bootstrap: str = ""
    security: str = ""


_current: ContextVar[Credential | None] = ContextVar("wakeful_credential", default=None)


def credential() -> Credential:
    """The credential minted for the step this tool's call, lookup or undo runs for (its tool declares
    `credential = "<downstream>"`). Use it for this call and drop it: it ends with the step."""
    found = _current.get()
    if found is None:
        raise LookupError(
            "no credential was minted for this step: call credential() inside a tool's call, lookup or "
            'undo, of a tool that declares `credential = "<downstream>"`'
        )
    return found


@contextlib.contextmanager
def handed(made: Credential) -> Iterator[Credential]:
    """`made` is the credential of the code run inside, and no longer after."""
    token = _current.set(made)
    try:
        yield made
    finally:
        _current.reset(token)


def request(grant: Grant) -> bytes:
    fields = {k: getattr(grant, k) for k in ("scope", "tool", "task_id", "op_key", "fence", "effect")}
    return orjson.dumps({"op": "mint", **fields}) + b"\n"


def ending(users: list[str]) -> bytes:
    return orjson.dumps({"op": "end", "users": users}) + b"\n"


class Minter:
    """The executor's client of its minter at `path`: one connection per thread, so that steps on
    different threads never wait for each other's mint; `restart` brings the minter back when it
    is gone (the executor's child died) and returns once it listens again."""

    def __init__(self, path: str, restart: Callable[[], None]) -> None:
        self.path, self.restart = path, restart
        self._own = threading.local()
        self._ends: socket.socket | None = None  # shared by every thread, behind the lock
        self._lock = threading.Lock()

    def mint(self, grant: Grant) -> Credential:
        try:
            reply = self._ask(request(grant))
        except OSError:
            self._drop()
            self.restart()
            try:
                reply = self._ask(request(grant))
            except OSError as exc:
                self._drop()
                raise MintRefused(f"the minter at {self.path} does not answer: {exc}") from exc
        if not isinstance(reply, dict) or not reply.get("ok"):
            said = reply.get("error") if isinstance(reply, dict) else None
            raise MintRefused(str(said or "the minter's reply is unreadable"))
        return Credential(
            str(reply["user"]),
            str(reply["password"]),
            int(reply["expires_ms"]),
            grant.tool,
            str(reply.get("bootstrap", "")),
            str(reply.get("security", "")),
        )

    def end(self, user: str) -> None:
        """Say the step's credential may be removed; the reaper removes it anyway once due. Never
        waits: an end the minter's socket has no room for is left to the reaper."""
        with self._lock:
            try:
                if self._ends is None:
                    self._ends = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    self._ends.settimeout(TIMEOUT_S)
                    self._ends.connect(self.path)
                    self._ends.sendall(ENDS_HELLO)
                self._ends.send(ending([user]), socket.MSG_DONTWAIT)
            except OSError:  # gone, or full: a minter that is gone removed what it made
                if self._ends is not None:
                    self._ends.close()
                self._ends = None

    def _ask(self, line: bytes) -> object:
        sock, reader = self._connected()
        sock.sendall(line)
        raw = reader.readline()
        if not raw:
            raise ConnectionResetError("the minter closed the connection")
        return orjson.loads(raw)

    def _connected(self) -> tuple[socket.socket, BinaryIO]:
        held: tuple[socket.socket, BinaryIO] | None = getattr(self._own, "conn", None)
        if held is None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(TIMEOUT_S)
            sock.connect(self.path)
            held = self._own.conn = (sock, sock.makefile("rb"))
        return held

    def _drop(self) -> None:
        held = getattr(self._own, "conn", None)
        self._own.conn = None
        for each in reversed(held or ()):
            with contextlib.suppress(OSError):
                each.close()
