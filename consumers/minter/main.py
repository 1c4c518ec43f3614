"""The minter (D120): it alone may make Redis users, and it makes one per step of a tool that
declares `credential = "<downstream>"`, only for a step that is really running (core/grants.py
judges: the task's lease at the grant's fence, an effect's intent in flight under its op key).

The executor starts it as a child (consumers/executor/credentials.py) and asks over a Unix socket
in a directory only this user may enter. One thread serves every connection: the mints asked for
at once are made in one round trip, and the reaper's passes run between. It stops when the
executor does, however the executor ends, and then removes every credential it made. Its reaper
removes the users of ended steps every ENDED_EVERY_S, each credential whose lifetime
(WAKEFUL_CREDENTIAL_TTL_S) is past, and at start every minted user no record names: a credential
whose step never ended lives until its minter stops, and at most its lifetime and a reaper pass.
It logs each credential it makes and removes by user, task and op key: never its secret.
"""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import selectors
import socket
import threading
import time

import orjson
import redis

from wakeful.consumers.minter.kafka_lane import KafkaLane
from wakeful.consumers.minter.kafka_provider import KafkaProvider
from wakeful.core import grants
from wakeful.core.grants import Grant
from wakeful.core.log import Log
from wakeful.core.minting import ENDS_HELLO, SOCKET_ENV
from wakeful.core.settings import Settings
from wakeful.sdk.app import load_app
from wakeful.state import acl, downstreams, minted

REAP_EVERY_S = 1.0  # how often credentials past their lifetime are looked for
ENDED_EVERY_S = 1.0  # ended steps' users go all at once, with the late ones: one wake a second
MAX_LINE = 4096  # a grant is a few hundred bytes: a longer line is no request
_LOG = Log(role="minter")


class Minter:
    """The minter's rules and its store: which tool may have which downstream's credential, each
    downstream's rights, the lifetime, and the Redis it makes users in. One thread uses it."""

    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        app = load_app(settings.app)
        self.client, self.ttl_ms = client, settings.credential_ttl_s * 1000
        self.scopes = {t.name: t.credential for t in app.tools if t.credential}
        self.rights = {d.user: minted.rules_of(d) for d in acl.downstreams_of(settings)}
        owners = {d.name: d.owner for d in downstreams.kafka(settings.downstreams)}
        self.kafka = KafkaProvider(settings, owners, self.ttl_ms)  # tokens for Kafka downstreams (D123)
        # the broker's calls on a thread of their own: a slow broker holds up no Redis user's mint
        self.lane = KafkaLane(self.kafka, self.mint, client) if owners else None
        self._counting = threading.Lock()  # the lane counts the tokens it hands out too
        self.ended: list[str] = []  # users whose step said it ended, removed at the next pass
        self.mine: set[str] = set()  # the users this process made and has not removed
        self.count = 0  # credentials handed out, for its stop record beside its CPU (the cost per step)
        self._passed = self._due_at = 0.0  # when the last pass removed ended users; the next due look

    def answer(self, line: bytes) -> bytes | None:  # None for `end`, which has no reply
        return self.answer_all([line])[0]

    def answer_all(self, lines: list[bytes]) -> list[bytes | None]:
        """The replies to request lines read together, in their order: every mint among them is
        made in one round trip to Redis."""
        return self.answer_read([self.read(line) for line in lines])

    def answer_read(self, asked: list[Grant | bytes | None]) -> list[bytes | None]:
        """The replies to requests read (read()), in their order."""
        grant_of = [a for a in asked if isinstance(a, Grant)]
        made = iter(self.mint_all(grant_of))
        return [_reply(next(made)) if isinstance(a, Grant) else a for a in asked]

    def read(self, line: bytes) -> Grant | bytes | None:
        """A request line: the grant it asks for, the reply to a line that asks nothing well, or
        None for an end (noted, for the next pass)."""
        try:
            asked = orjson.loads(line)
            if not isinstance(asked, dict):
                raise ValueError("a request is a JSON object")
            if asked.get("op") == "end":
                users = asked.get("users", [asked.get("user", "")])
                self.ended += [str(u) for u in users] if isinstance(users, list) else []
                return None
            return Grant(
                str(asked["scope"]), str(asked["tool"]), str(asked["task_id"]),
                str(asked["op_key"]), int(asked["fence"]), bool(asked.get("effect", True)),
            )  # fmt: skip
        except (orjson.JSONDecodeError, ValueError, KeyError, TypeError) as exc:
            return _reply({"ok": False, "error": f"unreadable request: {exc}"})

    def mint(self, grant: Grant) -> dict[str, object]:
        return self.mint_all([grant])[0]

    def mint_all(self, asked: list[Grant]) -> list[dict[str, object]]:
        """Each grant's answer: a credential made for it, or why not."""
        said: list[dict[str, object] | None] = [self._unfit(g) for g in asked]
        tokens = [(i, g) for i, g in enumerate(asked) if said[i] is None and g.scope in self.kafka.owners]
        answers = self.kafka.make(self.client, [g for _, g in tokens]) if tokens else []
        for (i, grant), answer in zip(tokens, answers, strict=True):
            said[i] = self._refused(grant, str(answer["refused"])) if "refused" in answer else answer
            with self._counting:
                self.count += bool(answer.get("ok"))
        fit = [(i, g) for i, g in enumerate(asked) if said[i] is None]
        expires_ms = int(time.time() * 1000) + self.ttl_ms
        made = [(g, *_fresh()) for _, g in fit]
        self.mine.update(user for _, user, _ in made)  # removed when this process stops, whatever follows
        try:
            reads = minted.make(
                self.client, [(g, u, p, self.rights[g.scope], expires_ms) for g, u, p in made]
            )
        except redis.RedisError as exc:  # made in part, perhaps: the reaper ends them
            self.ended += [user for _, user, _ in made]
            return [s or {"ok": False, "error": f"Redis: {exc}"} for s in said]
        minted_now: list[dict[str, object]] = []
        for (i, grant), (_, user, password), read in zip(fit, made, reads, strict=True):
            why = f"Redis: {read}" if isinstance(read, Exception) else grants.running(grant, *read)
            if why is not None:  # made with the reads, in one round trip: undone at the next pass
                self.ended.append(user)
                said[i] = (
                    self._refused(grant, why)
                    if not isinstance(read, Exception)
                    else {"ok": False, "error": why}
                )
                continue
            with self._counting:
                self.count += 1
            minted_now.append(
                {"user": user, "task_id": grant.task_id, "op_key": grant.op_key, "tool": grant.tool}
            )
            said[i] = {"ok": True, "user": user, "password": password, "expires_ms": expires_ms}
        _LOG.each("minter.minted", minted_now)  # one line each, in one write
        return [s if s is not None else {"ok": False, "error": "not answered"} for s in said]

    def aside(self, asked: Grant | bytes | None, peer: object) -> bool:
        """Whether `asked` is a Kafka token, then the lane's to answer (to `peer`, through serve)."""
        if self.lane is None or not isinstance(asked, Grant) or asked.scope not in self.kafka.owners:
            return False
        self.lane.mint(asked, peer)
        return True

    def _unfit(self, grant: Grant) -> dict[str, object] | None:
        if grant.scope not in self.rights and grant.scope not in self.kafka.owners:
            return {"ok": False, "error": f"{grant.scope!r} is no downstream of this stack"}
        if said := grants.unfit(grant, self.scopes):  # before anything is made or read
            return self._refused(grant, said)
        return None

    def _refused(self, grant: Grant, said: str) -> dict[str, object]:
        _LOG(
            "minter.refused",
            task_id=grant.task_id[:80],
            op_key=grant.op_key[:80],
            tool=grant.tool,
            reason=said,
        )
        return {"ok": False, "error": f"no credential for {grant.tool}: {said}"}

    def clear_strays(self) -> None:
        """At start: remove minted users no record names, and records no pass would reach."""
        with contextlib.suppress(redis.RedisError):
            if stray := minted.strays(self.client) + minted.undue(self.client):
                minted.end(self.client, stray, minted.tokens_among(stray))
                _LOG("minter.strays_removed", users=stray[:20], count=len(stray))

    def reap(self, now: float, enders: list[_Peer]) -> None:
        """Read the ends the executor sent (`enders`, its connections that carry them: whenever
        this process is awake, so they never pile up), and, when it is time, remove the users of
        ended steps (every ENDED_EVERY_S) and those past their lifetime (every REAP_EVERY_S). A pass
        Redis fails is tried again."""
        for peer in list(enders):
            while (lines := peer.lines()) is not None and lines:
                for line in lines:  # ends only: a mint asked here would have no one to answer
                    self.read(line)
            if lines is None:
                enders.remove(peer)
                peer.close()
        late_due = now >= self._due_at
        if not late_due and (not self.ended or now - self._passed < ENDED_EVERY_S):
            return
        users, self.ended, self._passed = self.ended[:5000], self.ended[5000:], now
        tokens = set(minted.tokens_among(users))
        if self.lane is not None:  # the tokens among them expire now, then their records go (the lane's)
            self.lane.end(sorted(tokens))
            if late_due:  # and those whose record a revoke removed
                self.lane.check_revoked()
        users = [u for u in users if u not in tokens]
        try:
            late = minted.due(self.client, int(time.time() * 1000)) if late_due else []
            if late_due:
                self._due_at = now + REAP_EVERY_S
            if users or late:
                minted.end(self.client, [*users, *late], minted.tokens_among(late))
                self.mine.difference_update([*users, *late])
        except redis.RedisError as exc:  # the next pass tries again; due ones stay due
            _LOG("minter.reap_failed", error=str(exc)[:200])
            self.ended[:0] = users
            self._passed = self._due_at = now + REAP_EVERY_S  # and waits a while
            return
        if late:
            _LOG("minter.expired", users=late[:20], count=len(late))


def _fresh() -> tuple[str, str]:
    """A new user's name (96 random bits) and password (192), from one read of the OS's randomness."""
    raw = secrets.token_bytes(36)
    return grants.PREFIX + raw[:12].hex(), base64.urlsafe_b64encode(raw[12:]).decode()


def _reply(said: dict[str, object]) -> bytes:
    return orjson.dumps(said) + b"\n"


class _Peer:
    """One executor thread's connection: what it sent that is not yet a whole line."""

    def __init__(self, conn: socket.socket) -> None:
        self.conn, self.partial, self.closed = conn, b"", False

    def send(self, data: bytes) -> bool:
        """Whether `data` went out (not: the peer is gone, or not reading; its next read fails)."""
        if self.closed:
            return False
        try:
            self.conn.send(data)
        except OSError:
            return False
        return True

    def close(self) -> None:
        self.closed = True
        self.conn.close()

    def lines(self) -> list[bytes] | None:
        """The whole lines now readable (None: the peer is gone, or sent a line past MAX_LINE)."""
        try:
            chunk = self.conn.recv(65536)
        except BlockingIOError:
            return []
        except OSError:
            return None
        if not chunk:
            return None
        *whole, self.partial = (self.partial + chunk).split(b"\n")
        if len(self.partial) > MAX_LINE or any(len(line) > MAX_LINE for line in whole):
            with contextlib.suppress(OSError):
                self.conn.send(_reply({"ok": False, "error": f"a request is at most {MAX_LINE} bytes"}))
            return None
        return [line for line in whole if line.strip()]


def serve(minter: Minter, server: socket.socket, stop: threading.Event) -> None:
    """Answer every executor thread's requests, in one thread, until `stop`: what all of them
    asked for at once is minted in one round trip; the reaper's passes run between. A connection
    that says ENDS_HELLO carries ends only: it is read at the reaper's passes, so an end wakes no
    one (at a few tasks a second, each wake costs more CPU than the work it does)."""
    enders: list[_Peer] = []
    lane = minter.lane
    with selectors.DefaultSelector() as ready:
        ready.register(server, selectors.EVENT_READ, None)
        if lane is not None:  # its answers: this thread alone writes to and closes the peers
            ready.register(lane.wake, selectors.EVENT_READ, lane)
        while not stop.is_set():
            asked: list[tuple[_Peer, Grant | bytes | None]] = []
            for key, _ in ready.select(ENDED_EVERY_S if minter.mine else REAP_EVERY_S):
                if key.data is None:
                    conn, _ = server.accept()
                    conn.setblocking(False)
                    ready.register(conn, selectors.EVENT_READ, _Peer(conn))
                    continue
                if key.data is lane:
                    continue  # sent below
                peer: _Peer = key.data
                if (lines := peer.lines()) is None:
                    ready.unregister(peer.conn)
                    peer.close()
                    continue
                if lines[:1] == [ENDS_HELLO.strip()]:
                    ready.unregister(peer.conn)
                    enders.append(peer)
                    lines = lines[1:]
                read = [(peer, minter.read(line)) for line in lines]
                asked += [(peer, said) for peer, said in read if not minter.aside(said, peer)]
            for (peer, _), reply in zip(asked, minter.answer_read([a for _, a in asked]), strict=True):
                if reply is not None:
                    peer.send(reply)
            for peer, said in lane.answered() if lane is not None else ():
                if not peer.send(_reply(said)) and said.get("ok"):  # nobody holds it: ended now
                    minter.ended.append(str(said["user"]))
            minter.reap(time.monotonic(), enders)


def main(settings: Settings, stop: threading.Event) -> None:
    """Serve the executor that started this process (SOCKET_ENV names where) until `stop`."""
    path = os.environ[SOCKET_ENV]
    minter = Minter(settings, acl.connect(settings, "minter", timeout=10))
    minter.clear_strays()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(64)
    server.setblocking(False)
    _LOG("minter.ready", socket=path, scopes=sorted(set(minter.scopes.values())))
    serve(minter, server, stop)
    # Stopping (its executor stopped, or died: the kernel's SIGTERM): no step it minted for goes on.
    # Its Redis users first, so that no broker call stands before their removal; then the lane expires
    # its tokens and removes their records (a broker that does not answer: they end at their lifetime).
    left = sorted(minter.mine)
    with contextlib.suppress(redis.RedisError):
        minted.end(minter.client, left)
    tokens_ended = minter.lane.stop() if minter.lane is not None else True
    cpu_s = round(time.process_time(), 3)
    _LOG("minter.stopped", removed=len(left), minted=minter.count, tokens_ended=tokens_ended, cpu_s=cpu_s)
