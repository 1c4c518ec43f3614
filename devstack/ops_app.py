"""`wakeful ops`: the ops web page (D76), a Starlette app rendered on the server.

Every page but the login asks for a session (devstack/ops_auth.py) and redirects to /login without
one. Every POST but the login's carries the session's CSRF token. Reads go to Redis and Kafka in
a worker thread (the clients are synchronous); bad input (an odd task id, a forged cookie, a
missing token) is answered with a page that says what is wrong, never a crash.

The kill path's switches are thrown in two steps: /switches/confirm says exactly what will
happen, and only its form (confirmed, with the token) reaches /switches/apply, which calls what
the CLI calls (devstack/kill.py, the tool store) and then `on_change`: the CLI's own step that
puts a copy of the changed authority on wakeful.authority.
"""

from __future__ import annotations

import asyncio
import secrets as random
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from wakeful.authority import freezes
from wakeful.authority.switches import field_of
from wakeful.core import ids
from wakeful.core.errors import ConfigError, WakefulError
from wakeful.core.log import Log
from wakeful.devstack import kill, ops_auth, ops_log, ops_pages, release_task
from wakeful.devstack.client import Client
from wakeful.devstack.ops_data import Reader, Sweep
from wakeful.devstack.ops_render import Html, Switch, confirm_text, esc, join, page, svg_chart, tag
from wakeful.sdk.tools import published

FREEZE_WAIT_S = 5.0  # as `wakeful freeze`'s default --wait-s
THAW_WAIT_S = 5.0
FORM_BYTES = 16_384
LOGIN_NONCE = "wakeful_ops_login"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
Handler = Callable[[Request, ops_auth.Session], Awaitable[Response]]


class Ops:
    def __init__(
        self, client: Client, login: ops_auth.Login, *, on_change: Callable[[], object], secure: bool
    ) -> None:
        self.client, self.login, self.on_change, self.secure = client, login, on_change, secure
        self.sweep = Sweep(client.admin)
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

    def session(self, request: Request) -> ops_auth.Session | None:
        return ops_auth.verify(self.login.session_key, request.cookies.get(ops_auth.COOKIE), int(time.time()))

    def guarded(self, handler: Handler, *, post: bool = False) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            session = self.session(request)
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

        return endpoint

    def routes(self) -> list[Route]:
        g = self.guarded
        return [
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login_post, methods=["POST"]),
            Route("/logout", g(self.logout, post=True), methods=["POST"]),
            Route("/", g(self.overview)),
            Route("/tasks", g(self.tasks)),
            Route("/task", g(self.find)),
            Route("/task/{task_id}", g(self.task)),
            Route("/waits", g(self.waits)),
            Route("/stuck", g(self.stuck)),
            Route("/parked", g(self.parked)),
            Route("/dlq", g(self.dlq)),
            Route("/activity", g(self.activity)),
            Route("/switches", g(self.switches)),
            Route("/switches/confirm", g(self.confirm, post=True), methods=["POST"]),
            Route("/switches/apply", g(self.apply, post=True), methods=["POST"]),
        ]

    # ---- login -----------------------------------------------------------------------------------

    async def login_form(self, request: Request, said: str = "", status: int = 200) -> Response:
        nonce = random.token_hex(16)
        wanted = request.query_params.get("next", "/")
        fields = Html(
            f'<input type="hidden" name="nonce" value="{nonce}"><input type="hidden" name="next" value="{esc(wanted)}">'
            '<p><label>operator <input name="operator" autocomplete="username" required></label></p>'
            '<p><label>password <input name="password" type="password" autocomplete="current-password" required></label></p>'
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
        who = request.client.host if request.client else "?"
        operator, password = form.get("operator", ""), form.get("password", "")
        known = await run_in_threadpool(self._operators)
        named = ops_auth.OPERATOR_RE.fullmatch(operator) is not None and operator in known
        if not (ops_auth.password_ok(password, self.login.password) and named):
            before = self.failures.add(who, time.monotonic())
            self.log("ops.login_failed", client=who, operator=operator[:64], failures=before + 1)
            await asyncio.sleep(ops_auth.delay_after(before))
            return await self.login_form(request, "Wrong operator name or password.", 401)
        cookie = ops_auth.sign(self.login.session_key, operator, int(time.time()))
        self.log("ops.login", client=who, operator=operator)
        wanted = form.get("next", "/")
        target = (
            wanted if wanted.startswith("/") and not wanted.startswith("//") and "\\" not in wanted else "/"
        )
        response = RedirectResponse(target, 303, HEADERS)
        response.set_cookie(
            ops_auth.COOKIE,
            cookie,
            max_age=ops_auth.SESSION_S,
            httponly=True,
            samesite="strict",
            secure=self.secure,
            path="/",
        )
        response.delete_cookie(LOGIN_NONCE, path="/login")
        return response

    def _operators(self) -> dict[str, frozenset[str]]:
        return release_task.operators(self.client.authority.snapshot(with_signers=True))

    async def logout(self, request: Request, session: ops_auth.Session) -> Response:
        response = RedirectResponse("/login", 303, HEADERS)
        response.delete_cookie(ops_auth.COOKIE, path="/")
        return response

    # ---- pages -----------------------------------------------------------------------------------

    async def overview(self, request: Request, session: ops_auth.Session) -> Response:
        def read() -> Html:
            counts = self.reader.counts()
            finished = self.reader.finished_per_minute()
            items, _ = ops_log.log_tail(self.client.settings)
            found = ops_log.activity(items)
            latency = ops_log.per_minute_median(found.effects, _now())
            frozen = self.client.authority.frozen()
            return join(
                [
                    ops_pages.swept_line(self.sweep.found),
                    tag(
                        "p",
                        f"Frozen now: {', '.join(frozen) or 'nothing'}.",
                        class_="frozen" if frozen else None,
                    ),
                    svg_chart(finished, title="Tasks finished per minute, last hour", unit="tasks"),
                    svg_chart(
                        latency, title="Wake to effect, median per minute, last hour", unit="ms", bars=False
                    ),
                    tag("h2", "Tasks by tenant and stage"),
                    ops_pages.counts(counts, self.client.app.name),
                ]
            )

        return self.html("Overview", await run_in_threadpool(read), session)

    async def tasks(self, request: Request, session: ops_auth.Session) -> Response:
        q = request.query_params
        tenant, stage, app = q.get("tenant", ids.DEFAULT_TENANT), q.get("stage", ""), q.get("app", "")
        after = int(q.get("after", "0") or 0)
        picker = ops_pages.stage_picker(self.sweep.found.stages, tenant, stage, app)
        if not stage:
            return self.html("Tasks", join([picker, tag("p", "Pick a tenant and a stage.")]), session)
        rows, more = await run_in_threadpool(self.reader.listed, tenant, stage, max(0, after), app)
        body = [
            picker,
            tag("h2", f"Tenant {tenant}, stage {stage}"),
            ops_pages.task_rows(rows, tenant, self.reader.app_of),
        ]
        if more is not None:
            href = f"/tasks?tenant={quote(tenant)}&stage={quote(stage)}&app={quote(app)}&after={more}"
            body.append(tag("p", tag("a", "next page", href=href)))
        return self.html("Tasks", join(body), session)

    async def find(self, request: Request, session: ops_auth.Session) -> Response:
        task_id = request.query_params.get("id", "").strip()
        ids.checked(ids.TASK_ID_RE, task_id, "task id")
        return RedirectResponse(f"/task/{quote(task_id, safe='')}", 303, HEADERS)

    async def task(self, request: Request, session: ops_auth.Session) -> Response:
        task_id = request.path_params["task_id"]
        shown = await run_in_threadpool(self.reader.task, task_id)
        status = 404 if shown.get("missing") else 200
        return self.html(f"Task {task_id}", ops_pages.task_page(shown, self.csrf(session)), session, status)

    async def waits(self, request: Request, session: ops_auth.Session) -> Response:
        def read() -> Html:
            return ops_pages.waits(self.reader.waiting(), self.reader.deadlines())

        return self.html("Waits and deadlines", await run_in_threadpool(read), session)

    async def stuck(self, request: Request, session: ops_auth.Session) -> Response:
        from wakeful.workflow.stuck import STUCK_AFTER_S

        older = int(request.query_params.get("older_than", STUCK_AFTER_S))
        rows = await run_in_threadpool(self.reader.stuck, max(0, older))
        return self.html("Stuck tasks", ops_pages.stuck(rows, older), session)

    async def parked(self, request: Request, session: ops_auth.Session) -> Response:
        review = await run_in_threadpool(self.reader.review)
        body = join(
            [ops_pages.swept_line(self.sweep.found), ops_pages.parked(self.sweep.found.quarantined, review)]
        )
        return self.html("Quarantined and review", body, session)

    async def dlq(self, request: Request, session: ops_auth.Session) -> Response:
        letters = await run_in_threadpool(ops_log.dead_letters, self.client.settings)
        return self.html("Dead letters", ops_pages.dlq(letters), session)

    async def activity(self, request: Request, session: ops_auth.Session) -> Response:
        def read() -> Html:
            items, skipped = ops_log.log_tail(self.client.settings)
            found = ops_log.activity(items)
            chart = svg_chart(
                ops_log.per_minute_median(found.approvals, _now()),
                title="Approval latency, median per minute, last hour",
                unit="ms",
                bars=False,
            )
            return ops_pages.activity(found, skipped, chart)

        return self.html("Retries and approvals", await run_in_threadpool(read), session)

    async def switches(self, request: Request, session: ops_auth.Session) -> Response:
        def read() -> Html:
            authority, tools, app = self.client.authority, self.client.tools, self.client.app
            offs = tools.switches()
            rows = [
                {
                    **t,
                    "switch": offs[field_of(app.name, t["name"])].__dict__
                    if field_of(app.name, t["name"]) in offs
                    else None,
                }
                for t in published(app.tools)
            ]
            taken = kill.taken_in(authority, authority.switched(), 0)
            return ops_pages.switches(
                authority.frozen(),
                authority.switch_log(),
                rows,
                app.name,
                taken.done + taken.pending,
                self.csrf(session),
            )

        return self.html("Kill path", await run_in_threadpool(read), session)

    # ---- the kill path ---------------------------------------------------------------------------

    def _switch(self, form: dict[str, str], session: ops_auth.Session) -> tuple[Switch, dict[str, str]]:
        """The switch a form asks for, checked (ValueError or ConfigError says what is wrong), and the
        fields that name it again on the confirmation's form."""
        action, reason = form.get("action", ""), form.get("reason", "").strip()[:500]
        if action in ("freeze", "thaw"):
            kind, name = form.get("kind", ""), form.get("name", "").strip()
            scope = freezes.scope(kind, name)
            fields = {"action": action, "kind": kind, "name": name, "reason": reason}
            return Switch(action, scope, reason, session.operator), fields
        if action in ("disable", "enable"):
            tool = form.get("tool", "")
            if tool not in self.client.tool_names():
                raise ValueError(f"app {self.client.app.name} has no tool {tool[:64]!r}")
            fields = {"action": action, "tool": tool, "reason": reason}
            return Switch(action, tool, reason, session.operator, self.client.app.name), fields
        raise ValueError(f"no such switch: {action[:20]!r}")

    async def confirm(self, request: Request, session: ops_auth.Session) -> Response:
        switch, fields = self._switch(request.state.form, session)
        if switch.action in ("freeze", "disable") and not switch.reason:
            raise ValueError("say why: the reason is recorded and shown to whoever meets the switch")
        body = ops_pages.confirm(confirm_text(switch), fields, self.csrf(session))
        return self.html("Confirm", body, session)

    async def apply(self, request: Request, session: ops_auth.Session) -> Response:
        form = request.state.form
        if form.get("confirmed") != "yes":
            raise ValueError("a switch is thrown only from its confirmation page")
        switch, _ = self._switch(form, session)
        said = await run_in_threadpool(self._throw, switch)
        self.log("ops.switch", action=switch.action, target=switch.target, by=switch.by, reason=switch.reason)
        after = [tag("p", said, class_="ok", id="done")]
        if switch.target.startswith("task:"):
            task_id = switch.target.removeprefix("task:")
            after.append(tag("p", ops_pages.task_link(task_id)))
        after.append(tag("p", tag("a", "Back to the kill path", href="/switches")))
        return self.html("Done", join(after), session)

    def _throw(self, s: Switch) -> str:
        if s.by not in self._operators():
            raise ConfigError(
                "operator", f"{s.by!r} is no longer an operator: no signer key of theirs may send task.reopen"
            )
        authority, tools = self.client.authority, self.client.tools
        try:
            if s.action == "freeze":
                taken = kill.freeze(authority, s.target, s.by, s.reason, FREEZE_WAIT_S)
                if taken.pending:
                    return f"frozen {s.target}, but not yet taken in by {', '.join(taken.pending)}: `wakeful frozen` shows them"
                return (
                    f"frozen {s.target}; taken in by {len(taken.done)} live roles in {taken.waited_ms:.0f} ms"
                )
            if s.action == "thaw":
                was, woken, _ = kill.thaw(authority, s.target, s.by, s.reason or "thawed", THAW_WAIT_S)
                return (
                    f"thawed {s.target}; woke {len(woken)} tasks with held work"
                    if was
                    else f"{s.target} was not frozen"
                )
            known = self.client.tool_names()
            if s.action == "disable":
                done = tools.disable(s.app, s.target, by=s.by, reason=s.reason, known=known)
                return (
                    f"tool {s.target} of app {s.app} is disabled"
                    if done
                    else f"tool {s.target} was disabled already"
                )
            had = tools.enable(s.app, s.target, by=s.by, reason=s.reason, known=known)
            return (
                f"tool {s.target} of app {s.app} is enabled"
                if had
                else f"tool {s.target} was enabled already"
            )
        finally:
            self.on_change()  # the CLI's own step: a sealed copy of authority on wakeful.authority


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


def _now() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC)


def build(
    client: Client, login: ops_auth.Login, *, on_change: Callable[[], object], secure: bool = False
) -> Starlette:
    ops = Ops(client, login, on_change=on_change, secure=secure)

    async def not_found(request: Request, exc: Exception) -> Response:
        return ops.html("Not found", tag("p", "No such page."), ops.session(request), 404)

    async def failed(request: Request, exc: Exception) -> Response:
        ops.log("ops.failed", path=request.url.path, error=f"{type(exc).__name__}: {str(exc)[:300]}")
        return ops.html(
            "Something failed", tag("p", "The page could not be made; the server log says why."), None, 500
        )

    app = Starlette(routes=ops.routes(), exception_handlers={404: not_found, 500: failed, Exception: failed})
    ops.sweep.start()
    app.state.ops = ops
    return app
