"""The minter (D120): it alone may make Redis users, and it makes one per step of a tool that
declares `credential = "<downstream>"`, only for a step that is really running (core/grants.py
judges: the task's lease at the grant's fence, an effect's intent in flight under its op key).

The executor starts it as a child (consumers/executor/credentials.py) and asks over a Unix socket
in a directory only this user may enter; it stops when the executor does, however the executor
ends, and then removes every credential it made. Its reaper removes each credential whose lifetime
(WAKEFUL_CREDENTIAL_TTL_S) is past, and at start every minted user no record names: a credential
whose step never ended lives until its minter stops, and at most its lifetime and a reaper pass.
It logs each credential it makes and removes by user, task and op key: never its secret.
"""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import socket
import threading
import time

import orjson
import redis

from wakeful.core import grants
from wakeful.core.grants import Grant
from wakeful.core.log import Log
from wakeful.core.minting import SOCKET_ENV
from wakeful.core.settings import Settings
from wakeful.sdk.app import load_app
from wakeful.state import acl, minted

REAP_EVERY_S = 1.0  # how often credentials past their lifetime are looked for
ENDED_EVERY_S = 0.05  # how often the users of ended steps are removed, all at once
MAX_LINE = 4096  # a grant is a few hundred bytes: a longer line is no request
_LOG = Log(role="minter")


class Minter:
    """The minter's rules and its store: which tool may have which downstream's credential, each
    downstream's rights, the lifetime, and the Redis it makes users in."""

    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        app = load_app(settings.app)
        self.client, self.ttl_ms = client, settings.credential_ttl_s * 1000
        self.scopes = {t.name: t.credential for t in app.tools if t.credential}
        self.rights = {d.user: minted.rules_of(d) for d in acl.downstreams_of(settings)}
        self.ended: queue.Queue[str] = queue.Queue()
        self.mine: set[str] = set()  # the users this process made and has not removed
        self.count = 0  # credentials handed out, for its stop record beside its CPU (the cost per step)

    def answer(self, line: bytes) -> bytes | None:
        """The reply to one request line (None for `end`, which has none)."""
        try:
            asked = orjson.loads(line)
            if not isinstance(asked, dict):
                raise ValueError("a request is a JSON object")
            if asked.get("op") == "end":
                self.ended.put(str(asked.get("user", "")))
                return None
            grant = Grant(
                str(asked["scope"]), str(asked["tool"]), str(asked["task_id"]),
                str(asked["op_key"]), int(asked["fence"]), bool(asked.get("effect", True)),
            )  # fmt: skip
        except (orjson.JSONDecodeError, ValueError, KeyError, TypeError) as exc:
            return _reply({"ok": False, "error": f"unreadable request: {exc}"})
        try:
            return _reply(self.mint(grant))
        except redis.RedisError as exc:
            return _reply({"ok": False, "error": f"Redis: {exc}"})

    def mint(self, grant: Grant) -> dict[str, object]:
        rights = self.rights.get(grant.scope)
        if rights is None:
            return {"ok": False, "error": f"{grant.scope!r} is no downstream of this stack"}
        if said := grants.unfit(grant, self.scopes):  # before anything is made or read
            return self._refused(grant, said)
        user, password = grants.PREFIX + secrets.token_hex(12), secrets.token_urlsafe(24)
        expires_ms = int(time.time() * 1000) + self.ttl_ms
        self.mine.add(user)  # removed when this process stops, even if nothing below returns
        try:
            lease, intent = minted.make(self.client, grant, (user, password), rights, expires_ms)
        except redis.RedisError:
            self.ended.put(user)  # made in part (its record without a due time, say): the reaper ends it
            raise
        if said := grants.running(grant, lease, intent):  # unfit() was asked above
            self.ended.put(user)  # made with the reads, in one round trip: undone at once by the reaper
            return self._refused(grant, said)
        self.count += 1
        _LOG("minter.minted", user=user, task_id=grant.task_id, op_key=grant.op_key, tool=grant.tool)
        return {"ok": True, "user": user, "password": password, "expires_ms": expires_ms}

    def _refused(self, grant: Grant, said: str) -> dict[str, object]:
        _LOG(
            "minter.refused",
            task_id=grant.task_id[:80],
            op_key=grant.op_key[:80],
            tool=grant.tool,
            reason=said,
        )
        return {"ok": False, "error": f"no credential for {grant.tool}: {said}"}

    def reap(self, stop: threading.Event) -> None:
        """Remove what the steps ended and what is past its lifetime, until `stop`."""
        with contextlib.suppress(redis.RedisError):
            if stray := minted.strays(self.client) + minted.undue(self.client):
                minted.end(self.client, stray)
                _LOG("minter.strays_removed", users=stray[:20], count=len(stray))
        due_at = 0.0
        while not stop.wait(ENDED_EVERY_S):
            users: list[str] = []
            with contextlib.suppress(queue.Empty):
                while len(users) < 5000:
                    users.append(self.ended.get_nowait())
            late: list[str] = []
            try:
                if time.monotonic() >= due_at:
                    late, due_at = (
                        minted.due(self.client, int(time.time() * 1000)),
                        time.monotonic() + REAP_EVERY_S,
                    )
                if users or late:
                    minted.end(self.client, [*users, *late])
                    self.mine.difference_update([*users, *late])
            except redis.RedisError as exc:  # the next pass tries again; due ones stay due
                _LOG("minter.reap_failed", error=str(exc)[:200])
                for user in users:
                    self.ended.put(user)
                stop.wait(REAP_EVERY_S)
                continue
            if late:
                _LOG("minter.expired", users=late[:20], count=len(late))


def _reply(said: dict[str, object]) -> bytes:
    return orjson.dumps(said) + b"\n"


def serve(minter: Minter, conn: socket.socket) -> None:
    """Answer one connection's requests in order; a line past MAX_LINE ends the connection."""
    with conn, conn.makefile("rb") as lines:
        while line := lines.readline(MAX_LINE + 1):
            if len(line) > MAX_LINE:
                conn.sendall(_reply({"ok": False, "error": f"a request is at most {MAX_LINE} bytes"}))
                return
            if reply := minter.answer(line):
                conn.sendall(reply)


def main(settings: Settings, stop: threading.Event) -> None:
    """Serve the executor that started this process (SOCKET_ENV names where) until `stop`."""
    path = os.environ[SOCKET_ENV]
    minter = Minter(settings, acl.connect(settings, "minter", timeout=10))
    threading.Thread(target=minter.reap, args=(stop,), name="minter-reap", daemon=True).start()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(16)
    server.settimeout(REAP_EVERY_S)
    _LOG("minter.ready", socket=path, scopes=sorted(set(minter.scopes.values())))
    while not stop.is_set():
        try:
            conn, _ = server.accept()
        except TimeoutError:
            continue
        conn.settimeout(None)
        threading.Thread(target=serve, args=(minter, conn), name="minter-conn", daemon=True).start()
    # Stopping (its executor stopped, or died: the kernel's SIGTERM): no step it minted for goes on.
    left = sorted(minter.mine)
    with contextlib.suppress(redis.RedisError):
        minted.end(minter.client, left)
        _LOG("minter.stopped", removed=len(left), minted=minter.count, cpu_s=round(time.process_time(), 3))
