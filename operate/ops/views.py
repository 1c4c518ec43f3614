"""The ops page's pages (D76): each reads in a worker thread (the Redis and Kafka clients are
synchronous) and renders with operate/ops/pages.py and panels.py. The plumbing (sessions, CSRF,
errors) is operate/ops/app.py's; a handler here runs only for a logged-in person."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from wakeful.authority.switches import field_of
from wakeful.core import ids
from wakeful.operate import kill
from wakeful.operate.ops import auth as ops_auth
from wakeful.operate.ops import log as ops_log
from wakeful.operate.ops import pages as ops_pages
from wakeful.operate.ops import panels as ops_panels
from wakeful.operate.ops import switches as ops_switches
from wakeful.operate.ops.render import HEADERS, Html, confirm_text, join, svg_chart, tag
from wakeful.sdk.tools import published
from wakeful.workflow.stuck import STUCK_AFTER_S

if TYPE_CHECKING:
    from wakeful.operate.ops.app import Ops


class Views:
    def __init__(self, ops: Ops) -> None:
        self.ops, self.html, self.csrf, self.log = ops, ops.html, ops.csrf, ops.log
        self.client, self.reader, self.sweep, self.tail = ops.client, ops.reader, ops.sweep, ops.tail

    def log_problem(self) -> str:
        return self.tail.error or self.sweep.also_error

    async def overview(self, request: Request, session: ops_auth.Session) -> Response:
        def read() -> Html:
            problem = self.log_problem()
            counts = self.reader.counts()
            finished = self.reader.finished_per_minute()
            latency = ops_log.per_minute_median(self.tail.activity.effects, datetime.now(UTC))
            frozen = self.client.authority.frozen()
            return join(
                [
                    ops_pages.swept_line(self.sweep.found),
                    tag("p", f"The last read of wakeful.log failed: {problem}", class_="warn")
                    if problem
                    else "",
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
        picker = ops_pages.stage_picker(self.sweep.found.stages, self.reader.stages(), tenant, stage, app)
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
        return self.html("Dead letters", ops_panels.dlq(letters), session)

    async def activity(self, request: Request, session: ops_auth.Session) -> Response:
        def read() -> Html:
            found, skipped = self.tail.activity, self.tail.skipped
            chart = svg_chart(
                ops_log.per_minute_median(found.approvals, datetime.now(UTC)),
                title="Approval latency, median per minute, last hour",
                unit="ms",
                bars=False,
            )
            return ops_panels.activity(found, skipped, chart, self.log_problem())

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
            return ops_panels.switches(
                authority.frozen(),
                log=authority.switch_log(),
                tools=rows,
                app=app.name,
                live=taken.done + taken.pending,
                csrf=self.csrf(session),
            )

        return self.html("Kill path", await run_in_threadpool(read), session)

    # ---- the kill path ---------------------------------------------------------------------------

    async def confirm(self, request: Request, session: ops_auth.Session) -> Response:
        switch, fields = ops_switches.asked(request.state.form, session.operator, self.client)
        ops_switches.needs_reason(switch)
        body = ops_panels.confirm(confirm_text(switch), fields, self.csrf(session))
        return self.html("Confirm", body, session)

    async def apply(self, request: Request, session: ops_auth.Session) -> Response:
        form = request.state.form
        if form.get("confirmed") != "yes":
            raise ValueError("a switch is thrown only from its confirmation page")
        switch, _ = ops_switches.asked(form, session.operator, self.client)
        said = await run_in_threadpool(ops_switches.throw, self.client, switch, self.ops.on_change)
        self.log("ops.switch", action=switch.action, target=switch.target, by=switch.by, reason=switch.reason)
        after = [tag("p", said, class_="ok", id="done")]
        if switch.target.startswith("task:"):
            task_id = switch.target.removeprefix("task:")
            after.append(tag("p", ops_pages.task_link(task_id)))
        after.append(tag("p", tag("a", "Back to the kill path", href="/switches")))
        return self.html("Done", join(after), session)
