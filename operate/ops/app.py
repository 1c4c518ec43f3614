"""`wakeful ops`: the ops web page (D76), a Starlette app rendered on the server.

Every page but the login asks for a live session (a signed cookie, operate/ops/auth.py, whose
session the server still holds, operate/ops/sessions.py) and redirects to /login without one.
Every POST but the login's carries the session's CSRF token. Reads go to Redis and Kafka in a
worker thread (the clients are synchronous); bad input (an odd task id, a forged cookie, a missing
token) is answered with a page that says what is wrong, never a crash.

The kill path's switches are thrown in two steps: /switches/confirm says exactly what will
happen, and only its form (confirmed, with the token) reaches /switches/apply, which calls what
the CLI calls (operate/kill.py, the tool store) and then `on_change`: the CLI's own step that
puts a copy of the changed authority on wakeful.authority.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets as random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, quote

import redis
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from wakeful.core.errors import ConfigError, WakefulError
from wakeful.core.log import Log
from wakeful.operate.client import Client
from wakeful.operate.ops import auth as ops_auth
from wakeful.operate.ops import log as ops_log
from wakeful.operate.ops import switches as ops_switches
from wakeful.operate.ops.data import Reader
from wakeful.operate.ops.render import HEADERS, Html, esc, join, page, tag
from wakeful.operate.ops.sessions import Limits, Sessions
from wakeful.operate.ops.sweep import Sweep
from wakeful.operate.ops.views import Views

FORM_BYTES = 16_384
LOGIN_NONCE = "wakeful_ops_login"
Handler = Callable[[Request, ops_auth.Session], Awaitable[Response]]


class Ops:
    def __init__(
        self,
        client: Client,
        login: ops_auth.Login,
        *,
        on_change: Callable[[], object],
        secure: bool,
        limits: Limits,
        proxies: tuple[ops_auth.Network, ...],
    ) -> None:
        self.client, self.login, self.on_change, self.secure = client, login, on_change, secure
        self.limits, self.proxies = limits, proxies
        self.sessions = Sessions(client.admin, limits)
        self.tail = ops_log.LogTail(client.settings)
        self.sweep = Sweep(client.admin, also=self.tail.refresh)
        self.reader = Reader(client, self.sweep)
        self.failures = ops_auth.Failures()
        self.log = Log(role="ops")

    # ---- plumbing --------------------------------------------------------------------------------

    def html(
        self, title: str, body: Html, session: ops_auth.Session | None, status: int = 200
    ) -> HTMLResponse:
        csrf = ops_auth.csrf_token(self.login.session_key, session) if session else None
        return HTMLResponse(
            page(title, body, operator=session.operator if session else None, csrf=csrf), status, HEADERS
        )

    def csrf(self, session: ops_auth.Session) -> str:
        return ops_auth.csrf_token(self.login.session_key, session)

    async def session(self, request: Request) -> ops_auth.Session | None:
        """The request's session if its cookie is signed and the server still holds it (renewed)."""
        signed = ops_auth.verify(
            self.login.session_key, request.cookies.get(ops_auth.COOKIE), int(time.time())
        )
        if signed is None or not await run_in_threadpool(self.sessions.touch, signed):
            return None
        return signed

    def who(self, request: Request) -> str:
        peer = request.client.host if request.client else None
        return ops_auth.client_address(peer, request.headers.get("x-forwarded-for"), self.proxies)

    def guarded(self, handler: Handler, *, post: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                session = await self.session(request)
            except redis.RedisError as exc:  # no session can be checked: none is let in
                said = f"Redis did not answer ({type(exc).__name__}): sessions cannot be checked."
                return self.html("Redis is away", tag("p", said, class_="warn"), None, 503)
            if session is None:
                if post:
                    return self.html(
                        "Log in first", tag("p", "Your session has ended: log in again."), None, 403
                    )
                wanted = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(wanted, safe='')}", 303, HEADERS)
            if post:
                form = await _form(request)
                if form is None or not ops_auth.csrf_ok(self.login.session_key, session, form.get("csrf")):
                    return self.html(
                        "Refused",
                        tag("p", "The form carried no valid CSRF token: nothing was done."),
                        session,
                        403,
                    )
                request.state.form = form
            try:
                return await handler(request, session)
            except (ValueError, ConfigError) as exc:
                return self.html("Bad request", tag("p", str(exc), class_="warn"), session, 400)
            except WakefulError as exc:
                return self.html("Could not do it", tag("p", str(exc), class_="warn"), session, 503)
            except redis.RedisError as exc:  # the server went away mid-read: say so, and how to look
                said = f"Redis did not answer ({type(exc).__name__}): `wakeful dev status` shows what runs."
                return self.html("Redis is away", tag("p", said, class_="warn"), session, 503)

        return endpoint

    def routes(self) -> list[Route]:
        g, v = self.guarded, Views(self)
        return [
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login_post, methods=["POST"]),
            Route("/logout", g(self.logout, post=True), methods=["POST"]),
            Route("/", g(v.overview)),
            Route("/tasks", g(v.tasks)),
            Route("/task", g(v.find)),
            Route("/task/{task_id}", g(v.task)),
            Route("/waits", g(v.waits)),
            Route("/stuck", g(v.stuck)),
            Route("/parked", g(v.parked)),
            Route("/dlq", g(v.dlq)),
            Route("/activity", g(v.activity)),
            Route("/switches", g(v.switches)),
            Route("/switches/confirm", g(v.confirm, post=True), methods=["POST"]),
            Route("/switches/apply", g(v.apply, post=True), methods=["POST"]),
        ]

    # ---- login -----------------------------------------------------------------------------------

    async def login_form(self, request: Request, said: str = "", status: int = 200) -> Response:
        nonce = random.token_hex(16)
        wanted = request.query_params.get("next", "/")
        fields = Html(
            f'<input type="hidden" name="nonce" value="{nonce}">'
            f'<input type="hidden" name="next" value="{esc(wanted)}">'
            '<p><label>operator <input name="operator" autocomplete="username" required></label></p>'
            '<p><label>password <input name="password" type="password" '
            'autocomplete="current-password" required></label></p>'
            '<button type="submit">Log in</button>'
        )
        body = join(
            [
                tag("p", said, class_="warn") if said else "",
                Html(f'<form method="post" action="/login">{fields}</form>'),
            ]
        )
        response = self.html("Log in", body, None, status)
        response.set_cookie(
            LOGIN_NONCE,
            nonce,
            max_age=900,
            httponly=True,
            samesite="strict",
            secure=self.secure,
            path="/login",
        )
        return response

    async def login_post(self, request: Request) -> Response:
        form = await _form(request)
        nonce = request.cookies.get(LOGIN_NONCE, "")
        if form is None or not nonce or not random.compare_digest(nonce, form.get("nonce", "")):
            return await self.login_form(request, "The login form had expired: try again.", 400)
        who = self.who(request)
        operator, password = form.get("operator", ""), form.get("password", "")
        known = await run_in_threadpool(self._operators)
        named = ops_auth.OPERATOR_RE.fullmatch(operator) is not None and operator in known
        if not (ops_auth.password_ok(password, self.login.password) and named):
            before = self.failures.add(who, time.monotonic())
            self.log("ops.login_failed", client=who, operator=operator[:64], failures=before + 1)
            await asyncio.sleep(ops_auth.delay_after(before))
            return await self.login_form(request, "Wrong operator name or password.", 401)
        now = int(time.time())
        cookie = ops_auth.sign(self.login.session_key, operator, now, lasts=self.limits.max_s)
        session = ops_auth.verify(self.login.session_key, cookie, now)
        assert session is not None  # just signed with this key, ending after now
        await run_in_threadpool(self.sessions.start, session, who, now)
        self.log("ops.login", client=who, operator=operator)
        wanted = form.get("next", "/")
        target = (
            wanted if wanted.startswith("/") and not wanted.startswith("//") and "\\" not in wanted else "/"
        )
        response = RedirectResponse(target, 303, HEADERS)
        response.set_cookie(
            ops_auth.COOKIE,
            cookie,
            max_age=self.limits.max_s,
            httponly=True,
            samesite="strict",
            secure=self.secure,
            path="/",
        )
        response.delete_cookie(LOGIN_NONCE, path="/login")
        return response

    def _operators(self) -> dict[str, frozenset[str]]:
        return ops_switches.operators(self.client)

    async def logout(self, request: Request, session: ops_auth.Session) -> Response:
        await run_in_threadpool(self.sessions.end, session)  # the cookie, wherever copied, opens nothing now
        self.log("ops.logout", client=self.who(request), operator=session.operator)
        response = RedirectResponse("/login", 303, HEADERS)
        response.delete_cookie(ops_auth.COOKIE, path="/")
        return response


async def _form(request: Request) -> dict[str, str] | None:
    """A urlencoded form's fields (the first value of each), or None for anything else or too much."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_BYTES:
            return None
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=50)
    except (UnicodeDecodeError, ValueError):
        return None
    return {k: v[0] for k, v in parsed.items()}


def build(
    client: Client,
    login: ops_auth.Login,
    *,
    on_change: Callable[[], object],
    secure: bool = False,
    limits: Limits | None = None,
    proxies: tuple[ops_auth.Network, ...] = (),
) -> Starlette:
    ops = Ops(client, login, on_change=on_change, secure=secure, limits=limits or Limits(), proxies=proxies)

    async def not_found(request: Request, exc: Exception) -> Response:
        try:
            session = await ops.session(request)
        except redis.RedisError:
            session = None
        return ops.html("Not found", tag("p", "No such page."), session, 404)

    async def failed(request: Request, exc: Exception) -> Response:
        ops.log("ops.failed", path=request.url.path, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return ops.html(
            "Something failed", tag("p", "The page could not be made; the server log says why."), None, 500
        )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        ops.sweep.start()  # one sweep before the first request, then its thread
        try:
            yield
        finally:
            ops.sweep.stop()

    handlers: dict[Any, Any] = {404: not_found, 500: failed, Exception: failed}
    app = Starlette(routes=ops.routes(), exception_handlers=handlers, lifespan=lifespan)
    app.state.ops = ops
    return app
