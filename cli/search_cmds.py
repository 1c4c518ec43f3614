"""`wakeful task query` and `wakeful task search`: a task's declared view, and a tenant's tasks by
workflow, stage, attributes and time, from the task index as the relay keeps it (docs/search.md).

An operator reads any tenant's, through the admin's login and its copy of the index keys: a summary
the relay did not sign is never shown. An upstream system reads its own tenant's through the read
door (`Upstream.query`, `Upstream.search`), which answers the same."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import click

from wakeful.cli.output import emit
from wakeful.cli.task_cmds import json_option
from wakeful.core import ids, index_signing
from wakeful.core.settings import Settings
from wakeful.schemas.search import TIMES, Query
from wakeful.state import acl
from wakeful.state import search as finder
from wakeful.state.index import PAGE, Index

tenant_option = click.option(
    "--tenant", default=ids.DEFAULT_TENANT, show_default=True, help="Whose tasks: a tenant's name."
)


def _index(settings: Settings) -> Index:
    return Index(acl.connect(settings, "admin"), index_signing.load_keys(settings, "admin"))


def _outside_id(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    if not ids.OUTSIDE_TASK_ID_RE.fullmatch(value):
        raise click.BadParameter(
            f"{value[:40]!r} is not a task id as a tenant names it ({ids.OUTSIDE_TASK_ID})"
        )
    return value


@click.command("query")
@click.argument("task_id", callback=_outside_id)
@click.argument("view")
@tenant_option
@json_option
@click.pass_obj
def task_query(settings: Settings, task_id: str, view: str, tenant: str, as_json: bool) -> None:
    """Print VIEW of the tenant's task TASK_ID: a view its workflow declares, as the task's last
    change computed it (state_version and updated_at say which). Exit 1 if there is no such task
    or view (the message lists the task's views)."""
    found = finder.view(_index(settings), tenant, ids.task_in(tenant, task_id), view)
    if found is None:
        raise click.ClickException(f"no task {task_id} of tenant {tenant} in the task index")
    if found.value is None:
        has = ", ".join(found.known) or "none (its workflow declares no views)"
        raise click.ClickException(f"task {task_id} has no view {view!r}; its views: {has}")
    human = "\n".join(f"{k}: {v}" for k, v in found.value.items())
    emit(found.as_dict(), as_json, f"{task_id} {view} (at state_version {found.state_version})\n{human}")


def _attributes(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    pairs = [v.partition("=") for v in values]
    bad = [v for v, (_, sep, _) in zip(values, pairs, strict=True) if not sep]
    if bad:
        raise click.BadParameter(f"{bad[0][:40]!r} is not NAME=VALUE")
    return {name: value for name, _, value in pairs}


def _time(_ctx: click.Context, param: click.Parameter, value: datetime | None) -> datetime | None:
    if value is not None and value.tzinfo is None:
        raise click.BadParameter(f"{value.isoformat()} has no zone: add one, e.g. +00:00", param=param)
    return value


def _time_options(command: Any) -> Any:
    for name in reversed(TIMES):
        flag = "--" + name.replace("_", "-")
        said = "from" if name.endswith("after") else "before"
        what = "created" if name.startswith("created") else "last changed"
        command = click.option(
            flag, name, type=datetime.fromisoformat, callback=_time, metavar="TIME",
            help=f"Tasks {what} {said} TIME (ISO 8601 with its zone).",
        )(command)  # fmt: skip
    return command


@click.command("search")
@tenant_option
@click.option("--workflow", default=None, help="Tasks of this workflow.")
@click.option("--stage", default=None, help="Tasks at this stage now.")
@click.option(
    "--attr", "attributes", multiple=True, callback=_attributes, metavar="NAME=VALUE",
    help="Tasks whose search attribute NAME has VALUE (the workflow declares it). Repeatable.",
)  # fmt: skip
@_time_options
@click.option("--limit", type=click.IntRange(1, PAGE), default=20, show_default=True, help="Rows per page.")
@click.option("--cursor", default=None, help="Go on from a page's `next`.")
@click.option("--all", "every", is_flag=True, help="Every page, not one.")
@json_option
@click.pass_obj
def task_search(
    settings: Settings,
    /,
    tenant: str,
    workflow: str | None,
    stage: str | None,
    attributes: dict[str, str],
    limit: int,
    cursor: str | None,
    every: bool,
    as_json: bool,
    **times: datetime | None,
) -> None:
    """List the tenant's tasks that match every filter given, newest created first, a page at a
    time (--cursor goes on from where the page says; --all reads them all)."""
    try:
        query = Query(workflow, stage, attributes, **times)
        index, rows, more = _index(settings), [], cursor
        while True:
            page = finder.search(index, tenant, query, limit=limit, cursor=more)
            rows += page.tasks
            more = page.next
            if not every or more is None:
                break
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    lines = [
        f"{r['task_id']:<30} {r.get('workflow', ''):<14} {r['stage']:<18} {r.get('created_at') or '?'}"
        + "".join(f" {k}={v}" for k, v in sorted((r.get("attributes") or {}).items()))
        for r in rows
    ]
    tail = f"next page: --cursor {more}" if more else f"{len(rows)} task(s)"
    emit({"tasks": rows, "next": more}, as_json, "\n".join([*lines, tail]))
    sys.exit(0)
