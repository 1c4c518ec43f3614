"""The ops page's panels for dead letters, retries and approvals, and the kill path (D76). Pure."""

from __future__ import annotations

from typing import Any

from wakeful.authority.freezes import Freeze
from wakeful.operate.dlq.read import Letter
from wakeful.operate.ops.log import Activity, percentile
from wakeful.operate.ops.pages import task_link
from wakeful.operate.ops.render import Html, form, hidden, join, link, table, tag


def dlq(letters: list[Letter]) -> Html:
    rows = []
    for x in letters:
        d = x.letter
        if d is None:
            rows.append([x.id, x.written or "", "", "", x.problem])
        else:
            rows.append(
                [x.id, x.written or "", f"{d.source} ({d.topic or 'outbox'})", d.task_id or "", d.reason]
            )
    said = f"The newest {len(letters)} letters (the tail of wakeful.dlq); `wakeful dlq show ID` shows one."
    return join(
        [
            tag("p", said),
            table(["letter", "written", "refused by", "task", "reason"], rows, "no dead letters"),
        ]
    )


def activity(found: Activity, skipped: int, approvals_chart: Html, problem: str = "") -> Html:
    waits = [ms for _, ms in found.approvals]
    effects = [ms for _, ms in found.effects]

    def line(name: str, values: list[float]) -> list[object]:
        if not values:
            return [name, 0, "", "", ""]
        return [name, len(values), *(f"{percentile(values, p):.0f} ms" for p in (50, 95, 99))]

    stats = table(
        ["measure", "count", "p50", "p95", "p99"],
        [line("approval latency", waits), line("wake to effect", effects)],
    )
    retried = [[task_link(t), op, n] for t, op, n in found.retried[:100]]
    failed = [[task_link(t), op, why] for t, op, why in found.failed[:100]]
    note = f" ({skipped} messages without the relay's tag or unreadable were skipped)" if skipped else ""
    return join(
        [
            tag("p", f"From the tail of wakeful.log{note}."),
            tag("p", f"The last read of the log failed: {problem}", class_="warn") if problem else "",
            stats,
            approvals_chart,
            tag("h2", "Effects retried (their tool was found unavailable)"),
            table(["task", "op key", "unavailable calls"], retried),
            tag("h2", "Effects that failed"),
            table(["task", "op key", "reason"], failed),
        ]
    )


def switches(
    frozen: dict[str, Freeze],
    *,
    log: list[dict[str, str]],
    tools: list[dict[str, Any]],
    app: str,
    live: list[str],
    csrf: str,
) -> Html:
    rows = []
    for scope, f in frozen.items():
        kind, _, name = scope.partition(":")
        fields = join(
            [
                hidden("action", "thaw"),
                hidden("kind", kind),
                hidden("name", name),
                hidden("reason", "thawed from the ops page"),
            ]
        )
        rows.append([scope, f.by, f.at, f.reason, form("/switches/confirm", csrf, fields, "Thaw…")])
    kinds = join(tag("option", k, value=k) for k in ("task", "tenant", "app", "all"))
    freeze_fields = Html(
        '<input type="hidden" name="action" value="freeze">'
        f'<label>scope <select name="kind">{kinds}</select></label> '
        '<label>name <input name="name" size="24"></label> '
        '<label>reason <input name="reason" required size="40"></label> '
    )
    tool_rows = []
    for t in tools:
        action = "enable" if t["switch"] else "disable"
        fields = join([hidden("action", action), hidden("tool", t["name"])])
        if action == "disable":
            fields = join([fields, Html('<input name="reason" required placeholder="reason" size="24"> ')])
        else:
            fields = join([fields, hidden("reason", "enabled from the ops page")])
        said = (
            "on"
            if not t["switch"]
            else f"OFF: by {t['switch']['by']} at {t['switch']['at']}: {t['switch']['reason']}"
        )
        tool_rows.append(
            [
                t["name"],
                ", ".join(t.get("stages", ())),
                said,
                form("/switches/confirm", csrf, fields, f"{action.title()}…"),
            ]
        )
    history = [
        [e.get("at", ""), e.get("switch", ""), e.get("scope", ""), e.get("by", ""), e.get("reason", "")]
        for e in log
    ]
    return join(
        [
            tag("h2", "Freezes in force"),
            table(["scope", "by", "at", "reason", ""], rows, "nothing is frozen"),
            tag("h2", "Freeze"),
            form("/switches/confirm", csrf, freeze_fields, "Freeze…"),
            tag("h2", f"Tools of app {app}"),
            table(["tool", "stages", "switch", ""], tool_rows, "the app has no tools"),
            tag("h2", "Switches thrown lately"),
            table(["at", "switch", "scope", "by", "reason"], history, "none"),
            tag("p", f"Live gates and executors: {', '.join(live) or 'none'}."),
        ]
    )


def confirm(text: str, fields: dict[str, str], csrf: str) -> Html:
    hiddens = join([*(hidden(k, v) for k, v in fields.items()), hidden("confirmed", "yes")])
    return join(
        [
            tag("p", text, class_="warn", id="what-will-happen"),
            form("/switches/apply", csrf, hiddens, "Yes, do exactly this"),
            tag("p", link("/switches", "No, go back")),
        ]
    )
