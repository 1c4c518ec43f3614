"""The ops page's sections as HTML, from what operate/ops/data.py and log.py read (D76). Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from wakeful.authority.freezes import Freeze
from wakeful.core import ids
from wakeful.operate.ops.render import Html, esc, form, hidden, join, link, table, tag
from wakeful.operate.ops.sweep import Swept


def task_link(task_id: str) -> Html:
    return link(f"/task/{quote(task_id, safe='')}", task_id)


def swept_line(swept: Swept) -> Html:
    at = swept.at.strftime("%H:%M:%S UTC") if swept.at else "not yet"
    said = f"Tenants, stages and quarantine markers as found by the last sweep: {at}."
    return join(
        [tag("p", said), tag("p", f"sweep failed: {swept.error}", class_="warn") if swept.error else ""]
    )


def counts(found: dict[str, dict[str, int]], app: str) -> Html:
    rows = []
    for tenant, stages in found.items():
        for stage, n in sorted(stages.items()):
            href = "/tasks?" + urlencode({"tenant": tenant, "stage": stage})
            rows.append([tenant, link(href, stage), n])
    return join(
        [
            tag("p", f"App loaded here: {app}."),
            table(["tenant", "stage", "tasks"], rows, "no tasks in the index"),
        ]
    )


def task_rows(rows: list[dict[str, Any]], tenant: str, app_of: Any) -> Html:
    from wakeful.operate.ops.data import runtime_id

    body = []
    for r in rows:
        waits = "; ".join(f"{w.get('wait_for')} until {w.get('deadline')}" for w in r.get("waits", ()))
        body.append(
            [
                task_link(runtime_id(tenant, r)),
                r.get("workflow", ""),
                app_of(str(r.get("workflow", ""))) or "-",
                r.get("stage", ""),
                r.get("task_version", ""),
                r.get("updated_at", ""),
                waits,
            ]
        )
    return table(["task", "workflow", "app", "stage", "version", "last change", "waits"], body, "no tasks")


def stage_picker(tenants: dict[str, set[str]], known: set[str], tenant: str, stage: str, app: str) -> Html:
    """Tenants and stages to pick from: those the sweep found, the default tenant and the `known`
    stages (the app's), so a stage is there before the sweep has seen a task at it."""
    names = sorted({*tenants, ids.DEFAULT_TENANT})
    options_t = join(tag("option", t, value=t, selected="selected" if t == tenant else None) for t in names)
    stages = sorted({s for ss in tenants.values() for s in ss} | known)
    options_s = join(tag("option", s, value=s, selected="selected" if s == stage else None) for s in stages)
    return Html(
        '<form method="get" action="/tasks">'
        f'<label>tenant <select name="tenant">{options_t}</select></label> '
        f'<label>stage <select name="stage">{options_s}</select></label> '
        f'<label>app <input name="app" value="{esc(app)}" size="12"></label> '
        '<button type="submit">Show</button></form>'
    )


def task_page(shown: dict[str, Any], csrf: str) -> Html:
    task_id = shown["id"]
    if shown.get("missing"):
        return tag("p", f"No task {task_id}: neither the index nor the store knows it.", class_="warn")
    parts: list[object] = []
    freeze: Freeze | None = shown.get("freeze")
    if freeze is not None:
        parts.append(
            tag(
                "p",
                f"FROZEN ({freeze.scope}) by {freeze.by} at {freeze.at}: {freeze.reason}",
                class_="frozen",
            )
        )
    if shown.get("held"):
        parts.append(tag("p", "It has held work: a thaw replays it."))
    if shown.get("quarantine"):
        q = shown["quarantine"]
        parts.append(
            tag("p", f"QUARANTINED: {q.get('reason')}: {q.get('detail')} (at {q.get('at')})", class_="warn")
        )
    cp = shown.get("checkpoint") or {}
    summary = shown.get("summary") or {}
    facts = [
        ["tenant", shown["tenant"]],
        ["app", shown.get("app") or "-"],
        ["workflow", cp.get("workflow", summary.get("workflow", ""))],
        ["stage", cp.get("stage", summary.get("stage", ""))],
        ["task version", cp.get("version", summary.get("task_version", ""))],
        ["state version", cp.get("state_version", summary.get("state_version", ""))],
        ["last change", cp.get("updated_at", summary.get("updated_at", ""))],
        ["last refusal", cp.get("last_refusal") or ""],
        ["proposals refused in a row", cp.get("proposals_refused", "")],
        ["approval", _approval(cp.get("approval"))],
        [
            "index says",
            f"{summary.get('stage')} at state version {summary.get('state_version')}"
            if summary
            else "not indexed",
        ],
    ]
    parts.append(table(["field", "value"], facts))
    waits = [
        [
            w["wait_for"],
            w["bound_to_version"],
            ", ".join(w["allowed_signers"]) or "any allowed signer",
            w["deadline"],
            w["on_deadline"],
        ]
        for w in cp.get("pending_waits", ())
    ]
    parts += [
        tag("h2", "Waits and deadlines"),
        table(["waits for", "version", "signers", "deadline", "then"], waits, "waits for nothing"),
    ]
    actions = [
        [a.get(k) or "" for k in ("op_key", "status", "started_at", "finished_at", "attempts", "reason")]
        for a in shown.get("actions", ())
    ]
    parts += [
        tag("h2", "Actions"),
        table(["op key", "status", "intent at", "finished at", "unavailable calls", "reason"], actions),
    ]
    fields = join(
        [
            hidden("action", "freeze" if freeze is None else "thaw"),
            hidden("kind", "task"),
            hidden("name", task_id),
        ]
    )
    if freeze is None:
        fields = join([fields, Html('<label>reason <input name="reason" required size="40"></label> ')])
        parts += [tag("h2", "Kill path"), form("/switches/confirm", csrf, fields, "Freeze this task…")]
    elif freeze.scope == f"task:{task_id}":
        fields = join([fields, hidden("reason", "thawed from the ops page")])
        parts += [tag("h2", "Kill path"), form("/switches/confirm", csrf, fields, "Thaw this task…")]
    return join(parts)


def _approval(doc: Any) -> str:
    if not doc:
        return ""
    version, expires = doc.get("object_version"), doc.get("expires_at")
    return f"by {doc.get('approver_ref')} for version {version}, expires {expires}"


def waits(
    waiting: list[tuple[str, str, list[dict[str, Any]]]],
    deadlines: tuple[list[tuple[str, datetime]], int, int],
) -> Html:
    soonest, total, past = deadlines
    now = datetime.now(UTC)
    timer = [[task_link(t), at.isoformat(), _in(at, now)] for t, at in soonest]
    parts: list[object] = [
        tag("h2", "The timer's deadlines"),
        tag("p", f"{total} deadlines held; {past} already due (the timer wakes each)."),
        table(["task", "deadline", "due"], timer, "no deadlines"),
    ]
    from wakeful.operate.ops.data import runtime_id

    for tenant, kind, rows in waiting:
        body = []
        for r in rows:
            for w in r.get("waits", ()):
                if w.get("wait_for") == kind:
                    at = datetime.fromisoformat(str(w["deadline"]))
                    body.append(
                        [task_link(runtime_id(tenant, r)), r.get("stage", ""), at.isoformat(), _in(at, now)]
                    )
        parts += [
            tag("h2", f"Tenant {tenant}: waiting for {kind}"),
            table(["task", "stage", "deadline", "due"], body),
        ]
    return join(parts)


def _in(at: datetime, now: datetime) -> str:
    s = int((at - now).total_seconds())
    return f"in {s} s" if s >= 0 else f"{-s} s ago"


def stuck(rows: list[dict[str, Any]], older_than: int) -> Html:
    body = [
        [task_link(r["id"]), r["tenant"], r.get("workflow", ""), r.get("stage", ""), r["stuck"]] for r in rows
    ]
    said = f"Tasks nothing will move on (unchanged for {older_than} s, waiting for nothing, not frozen)."
    return join(
        [tag("p", said), table(["task", "tenant", "workflow", "stage", "why"], body, "no stuck tasks")]
    )


def parked(quarantined: list[dict[str, Any]], review: list[dict[str, Any]]) -> Html:
    q = [[task_link(r["task_id"]), r["reason"], r["detail"], r["at"]] for r in quarantined[:200]]
    n = [
        [task_link(r["id"]), r["tenant"], r.get("workflow", ""), r.get("updated_at", ""), r["reason"]]
        for r in review
    ]
    return join(
        [
            tag("h2", f"Quarantined ({len(quarantined)})"),
            table(["task", "reason", "detail", "at"], q, "no task is quarantined"),
            tag("h2", "Parked for review (needs_review)"),
            table(["task", "tenant", "workflow", "since", "reason"], n, "no task waits for review"),
        ]
    )
