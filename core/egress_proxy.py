"""The executor's outbound proxy: how a process a tool starts is held to the tool's egress (D116).

An HTTP proxy on 127.0.0.1 that the executor starts with the guard (core/egress_guard.py). A tool
starts a process with `outbound_env()`: every proxy variable names this proxy, with the call's own
token as its password, so the proxy knows whose run a request is, and what that run may reach.
It tunnels `CONNECT host:port` (HTTPS, or any TCP a client sends through a proxy) and forwards
plain `http://` requests, to a declared endpoint only; anything else gets 403, or 407 without a
live token, and never a connection. A token lives as long as its call.

A process that ignores its proxy variables is not held by this: a deployment's network policy is
(docs/security.md, "Egress").
"""

from __future__ import annotations

import base64
import contextlib
import selectors
import socket
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

HEAD_MAX = 16 * 1024
IDLE_S = 300.0  # a tunnel with nothing sent either way for this long is closed
CONNECT_S = 10.0


@dataclass(frozen=True)
class Asked:
    """A request's head, read: its method, target host and port, and what to send on for a plain
    HTTP request (the head in origin form, less the proxy's own headers)."""

    method: str
    host: str
    port: int
    token: str
    forward: bytes = b""


class Proxy:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self._server = socket.create_server((host, 0))
        self.port = self._server.getsockname()[1]
        self._runs: dict[str, Any] = {}  # token -> egress_guard.Confinement
        self._lock = threading.Lock()

    def start(self) -> Proxy:
        threading.Thread(target=self._serve, name="egress-proxy", daemon=True).start()
        return self

    def admit(self, run: Any) -> str:
        """Let `run` (a Confinement) use the proxy while it lasts: its proxy URL."""
        with self._lock:
            self._runs[run.token] = run
        return f"http://wakeful:{run.token}@127.0.0.1:{self.port}"

    def drop(self, run: Any) -> None:
        with self._lock:
            self._runs.pop(run.token, None)

    def _serve(self) -> None:
        while True:  # ends with the process: the proxy lives as long as its executor
            conn, _ = self._server.accept()
            threading.Thread(target=self._one, args=(conn,), name="egress-proxy-conn", daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(CONNECT_S)
            try:
                head, rest = _read_head(conn)
                asked = parse(head)
            except (OSError, ValueError) as exc:
                return _answer(conn, 400, f"not a proxy request: {exc}")
            with self._lock:
                run = self._runs.get(asked.token)
            if run is None:
                return _answer(conn, 407, "no live call holds this token", auth=True)
            if not run.allowed.permits(asked.host, asked.port):
                where = f"{asked.host}:{asked.port}"
                run.refused.append(where)
                if not run.report:  # reporting only: noted, and tunnelled as asked
                    return _answer(conn, 403, run.allowed.refusal(where))
            try:
                upstream = socket.create_connection((asked.host, asked.port), timeout=CONNECT_S)
            except OSError as exc:
                return _answer(conn, 502, f"{asked.host}:{asked.port}: {exc}")
            with upstream:
                if asked.method == "CONNECT":
                    conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                else:
                    upstream.sendall(asked.forward)
                if rest:
                    upstream.sendall(rest)
                _pipe(conn, upstream)
        return None


def parse(head: bytes) -> Asked:
    """A proxy request's head: CONNECT host:port, or an absolute http:// URL; with the token of its
    Proxy-Authorization (Basic, any user)."""
    lines = head.decode("latin-1").split("\r\n")
    method, target, version = lines[0].split(" ", 2)
    headers = [line for line in lines[1:] if line]
    token = ""
    for line in headers:
        name, _, value = line.partition(":")
        if name.strip().lower() == "proxy-authorization":
            kind, _, encoded = value.strip().partition(" ")
            if kind.lower() == "basic":
                token = base64.b64decode(encoded, validate=True).decode().partition(":")[2]
    if method == "CONNECT":
        host, _, port = target.rpartition(":")
        return Asked(method, host.strip("[]"), int(port), token)
    url = urlsplit(target)
    if url.scheme != "http" or not url.hostname:
        raise ValueError(f"{target[:80]!r} is not an absolute http:// URL")
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    kept = [line for line in headers if not line.lower().startswith("proxy-")]
    forward = "\r\n".join([f"{method} {path} {version}", *kept, "", ""]).encode("latin-1")
    return Asked(method, url.hostname, url.port or 80, token, forward)


def _read_head(conn: socket.socket) -> tuple[bytes, bytes]:
    data = b""
    while b"\r\n\r\n" not in data:
        got = conn.recv(4096)
        if not got or len(data) > HEAD_MAX:
            raise ValueError("the request's head did not end")
        data += got
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _answer(conn: socket.socket, status: int, why: str, *, auth: bool = False) -> None:
    words = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required", 502: "Bad Gateway"}
    body = (why + "\n").encode()
    extra = 'Proxy-Authenticate: Basic realm="wakeful"\r\n' if auth else ""
    head = f"HTTP/1.1 {status} {words[status]}\r\n{extra}Content-Length: {len(body)}\r\n"
    with contextlib.suppress(OSError):  # the client went away: nothing to tell it
        conn.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy each way until either side closes or the tunnel idles IDLE_S."""
    with selectors.DefaultSelector() as sel:
        sel.register(a, selectors.EVENT_READ, b)
        sel.register(b, selectors.EVENT_READ, a)
        while True:  # ends: a side closes, an error, or IDLE_S without a byte
            ready = sel.select(IDLE_S)
            if not ready:
                return
            for key, _ in ready:
                source: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = source.recv(65536)
                    if not data:
                        return
                    key.data.sendall(data)
                except OSError:
                    return
