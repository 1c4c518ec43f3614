"""The ops page's HTML, made on the server (D76): a page shell, tables, forms, the confirmation a
switch asks for, and charts as inline SVG. Pure: text in, text out. Every value from Redis or Kafka
is escaped here; only an `Html` (made by these functions) goes out as it is.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# Sent with every answer: no script, frame or outside resource; nothing cached.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
NAV = (
    ("/", "Overview"),
    ("/tasks", "Tasks"),
    ("/waits", "Waits and deadlines"),
    ("/stuck", "Stuck"),
    ("/parked", "Quarantined and review"),
    ("/dlq", "Dead letters"),
    ("/activity", "Retries and approvals"),
    ("/switches", "Kill path"),
)
STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#222}
header{background:#223;color:#fff;padding:.5em 1em;display:flex;gap:1em;flex-wrap:wrap;align-items:center}
header a{color:#cde}main{padding:1em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}th{background:#eee}
.warn{background:#fee;border:1px solid #c66;padding:.5em}
.ok{background:#efe;border:1px solid #6a6;padding:.5em}
.frozen{color:#a00;font-weight:bold}form.inline{display:inline}svg{background:#fafafa;border:1px solid #ddd}
"""


class Html(str):
    """Markup made by this module: goes out unescaped."""

    __slots__ = ()


def esc(value: object) -> Html:
    if isinstance(value, Html):
        return value
    return Html(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable[object]) -> Html:
    return Html("".join(esc(p) for p in parts))


def tag(name: str, body: object = "", **attrs: object) -> Html:
    """<name attrs>body</name>; attribute names end with `_` where Python reserves them (class_)."""
    shown = "".join(
        f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None
    )
    return Html(f"<{name}{shown}>{esc(body)}</{name}>")


def link(href: str, text: object) -> Html:
    return tag("a", text, href=href)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], empty: str = "none") -> Html:
    rows = list(rows)
    if not rows:
        return tag("p", empty)
    head = tag("tr", join(tag("th", h) for h in headers))
    body = join(tag("tr", join(tag("td", c) for c in row)) for row in rows)
    return tag("table", join([head, body]))


def hidden(name: str, value: object) -> Html:
    return Html(f'<input type="hidden" name="{esc(name)}" value="{esc(value)}">')


def form(action: str, csrf: str, fields: Html, button: str, *, method: str = "post") -> Html:
    """A form that carries the session's CSRF token."""
    body = join([hidden("csrf", csrf), fields, Html(f'<button type="submit">{esc(button)}</button>')])
    return Html(f'<form method="{esc(method)}" action="{esc(action)}">{body}</form>')


def page(title: str, body: Html, *, operator: str | None = None, csrf: str | None = None) -> str:
    """A whole page: navigation and a log-out button once someone is logged in."""
    nav = Html("")
    if operator is not None and csrf is not None:
        out = form("/logout", csrf, Html(""), "Log out").replace("<form", '<form class="inline"', 1)
        search = Html(
            '<form class="inline" method="get" action="/task"><input name="id" placeholder="task id" '
            'aria-label="task id"><button type="submit">Find task</button></form>'
        )
        links = join(link(href, text) for href, text in NAV)
        nav = join([links, search, tag("span", f"operator: {operator}"), Html(out)])
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)} · wakeful ops</title><style>{STYLE}</style></head>"
        f"<body><header><strong>wakeful ops</strong>{nav}</header><main><h1>{esc(title)}</h1>{body}</main>"
        "</body></html>"
    )


# ---- the kill path's confirmation -------------------------------------------------------------


@dataclass(frozen=True)
class Switch:
    """One switch a person asks to throw: freeze or thaw a scope, or disable or enable a tool."""

    action: str  # freeze, thaw, disable, enable
    target: str  # a freeze scope (task:T, tenant:N, app:A, all), or a tool's name
    reason: str
    by: str
    app: str = ""  # the tool's app, for disable and enable


def confirm_text(s: Switch) -> str:
    """Exactly what throwing the switch will do, in one paragraph a person reads before agreeing."""
    who = f"Recorded as done by {s.by}, because: {s.reason or '(no reason given)'}."
    if s.action == "freeze":
        what = _scope_words(s.target)
        return (
            f"Freeze {what}. From the next wake, no new step runs for {_them(s.target)}: events that "
            f"arrive are held (not refused) until a thaw, and no new effect begins; a step whose "
            f"intent is already written completes. The page waits up to a few seconds for every "
            f"live gate and executor to take the freeze in. {who}"
        )
    if s.action == "thaw":
        return (
            f"Thaw {_scope_words(s.target)}. The freeze is lifted and every task with held work is "
            f"woken, its held events replayed oldest first. {who}"
        )
    if s.action == "disable":
        return (
            f"Disable tool {s.target} of app {s.app}. From their next step, executors refuse every "
            f"step of {s.target} before its intent is written and park its task in needs_review, "
            f"naming this switch; a step already begun completes. {who}"
        )
    if s.action == "enable":
        return (
            f"Enable tool {s.target} of app {s.app} again. Tasks it parked stay in needs_review until "
            f"a person reopens each. {who}"
        )
    raise ValueError(f"unknown switch action {s.action!r}")


def _scope_words(scope: str) -> str:
    if scope == "all":
        return "the whole fleet (every task of every tenant and app)"
    kind, _, name = scope.partition(":")
    return {
        "task": f"task {name}",
        "tenant": f"every task of tenant {name}",
        "app": f"every task of app {name}",
    }[kind]


def _them(scope: str) -> str:
    return "this task" if scope.startswith("task:") else "any of them"


# ---- charts -----------------------------------------------------------------------------------


def _nice(top: float) -> float:
    """A round number at or above `top` for the y axis."""
    if top <= 0:
        return 1.0
    step = 10 ** math.floor(math.log10(top))
    for m in (1, 2, 5, 10):
        if m * step >= top:
            return float(m * step)
    return float(10 * step)


def svg_chart(
    values: Sequence[float | None],
    *,
    title: str,
    unit: str,
    x_label: str = "minutes ago",
    bars: bool = True,
    width: int = 640,
    height: int = 180,
) -> Html:
    """One series, oldest first, as bars (counts) or a line (a measure; None: no point there), with a
    y axis from 0 to a round top and the x axis as minutes before now."""
    left, bottom, top_pad, right = 48, 24, 20, 8
    plot_w, plot_h = width - left - right, height - bottom - top_pad
    n = max(1, len(values))
    known = [v for v in values if v is not None]
    top = _nice(max(known, default=0.0))
    step = plot_w / n
    base, small_end = top_pad + plot_h, 'font-size="10" text-anchor="end"'

    def y(v: float) -> float:
        return top_pad + plot_h - (v / top) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{esc(title)}"><title>{esc(title)}</title>',
        f'<text x="{left}" y="14" font-size="12">{esc(title)}</text>',
        f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#888"/>',
        f'<line x1="{left}" y1="{top_pad}" x2="{left}" y2="{base}" stroke="#888"/>',
        f'<text x="{left - 4}" y="{top_pad + 4}" {small_end}>{_num(top)} {esc(unit)}</text>',
        f'<text x="{left - 4}" y="{base}" {small_end}>0</text>',
        f'<text x="{left}" y="{height - 6}" font-size="10">{n} {esc(x_label)}</text>',
        f'<text x="{left + plot_w}" y="{height - 6}" font-size="10" text-anchor="end">now</text>',
    ]
    if bars:
        for i, v in enumerate(values):
            if v:
                h = (v / top) * plot_h
                parts.append(
                    f'<rect x="{left + i * step + 0.5:.1f}" y="{y(v):.1f}" width="{max(step - 1, 1):.1f}" '
                    f'height="{h:.1f}" fill="#47a"><title>{_num(v)} {esc(unit)}</title></rect>'
                )
    else:
        points = [(left + (i + 0.5) * step, y(v)) for i, v in enumerate(values) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            parts.append(f'<polyline points="{path}" fill="none" stroke="#a54" stroke-width="1.5"/>')
        for (px, py), v in zip(points, known, strict=True):
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="2" fill="#a54">'
                f"<title>{_num(v)} {esc(unit)}</title></circle>"
            )
    parts.append("</svg>")
    return Html("".join(parts))


def _num(v: float) -> str:
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"
