"""`wakeful authority limits ...`: how many of a tenant's tasks may be in flight at once (D108),
and how many calls a second a tool may take (D109), not `wakeful authority limit`, an app's
approval amount. The limits are authority data: operators
change them, each change recorded with who, when and why; the gate holds a tenant's creates over
its limit and the timer lets them in as its tasks end (docs/limits.md)."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from wakeful.authority.limit_store import DEFAULT_SCOPE, scope_of, tool_scope, workflow_scope
from wakeful.cli.app_option import app_option
from wakeful.cli.kill_cmds import operator
from wakeful.cli.output import emit, say
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.workflow import limits as rules
from wakeful.workflow import rates

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
by_option = click.option(
    "--by", required=True, help="The operator who changes it (a signer that may send task.reopen): recorded."
)
reason_option = click.option("--reason", default="", help="Why: recorded.")
tenant_option = click.option("--tenant", default=None, help="The tenant whose limit it is.")
default_option = click.option(
    "--default", "default", is_flag=True, help="Every tenant with no limit of its own."
)
tool_option = click.option(
    "--tool", default=None, help="A tool of the app (--app), whose calls a second or at once it is."
)
workflow_option = click.option(
    "--workflow", default=None, help="A workflow of the app (--app): each tenant's tasks of it in flight."
)


@click.group()
def limits() -> None:
    """How many of a tenant's tasks run at once, and a tool's calls a second.

    A tenant's in-flight limit: at most N of its tasks in flight at once, the rest of its creates
    held (never refused) until one ends. A tool's rate: at most R calls a second, over every
    executor, and at most N of its calls running at once; a call over either made at its turn.
    Not `authority limit`, an app's approval amount."""


def _scope(client: Client, tenant: str | None, default: bool, tool: str | None, workflow: str | None) -> str:
    if sum((tenant is not None, default, tool is not None, workflow is not None)) != 1:
        raise click.UsageError("name one of --tenant T, --default, --workflow W or --tool T")
    if tool is not None:
        known = client.tool_names()
        if tool not in known:
            raise click.UsageError(
                f"--tool: app {client.app.name} has no tool {tool!r}: {', '.join(sorted(known))}"
            )
        return tool_scope(client.app.name, tool)
    if workflow is not None:
        names = {wf.name for wf in client.app.workflows}
        if workflow not in names:
            raise click.UsageError(
                f"--workflow: app {client.app.name} has no workflow {workflow!r}: {', '.join(sorted(names))}"
            )
        return workflow_scope(client.app.name, workflow)
    return DEFAULT_SCOPE if default else scope_of(tenant or "")


@limits.command("set")
@app_option
@click.option(
    "--max-in-flight",
    type=int,
    default=None,
    help="How many tasks (with --tool: calls) may be in flight at once.",
)
@click.option("--calls-per-s", type=float, default=None, help="With --tool: how many calls a second.")
@click.option("--burst", type=int, default=None, help="With --tool: calls at once after a quiet spell.")
@by_option
@reason_option
@tenant_option
@default_option
@workflow_option
@tool_option
@click.pass_obj
def limits_set(settings: Settings, /, by: str, reason: str, **said: Any) -> None:
    """Hold a tenant (or, with --default, every tenant with no limit of its own) to --max-in-flight
    tasks in flight, or each tenant to --max-in-flight tasks of a --workflow, from the roles' next
    wake on; raising it lets held creates in at the timers' next look. Or hold a --tool to
    --calls-per-s calls a second (--burst of them at once; default: a second's worth), to --max-in-flight
    calls running at once, or both, from the executors' next call on: the tool's record is replaced
    whole."""
    client = Client(settings)
    scope = _scope(client, said["tenant"], said["default"], said["tool"], said["workflow"])
    operator(client, by)
    if said["tool"] is not None:
        return _set_rate(client, scope, by, reason, said)
    if said["max_in_flight"] is None or said["calls_per_s"] is not None or said["burst"] is not None:
        raise click.UsageError(
            "a tenant's or a workflow's limit is --max-in-flight N (--calls-per-s is a tool's)"
        )
    was = client.limits.set(scope, said["max_in_flight"], by=by, reason=reason)
    before = f" (was {rules.parse(scope, was).max_in_flight})" if was is not None else ""
    each = " of each tenant" if said["workflow"] is not None else ""
    return say(f"{scope}: at most {said['max_in_flight']} tasks{each} in flight{before}")


def _set_rate(client: Client, scope: str, by: str, reason: str, said: dict[str, Any]) -> None:
    calls, at_once = said["calls_per_s"], said["max_in_flight"]
    if calls is None and at_once is None:
        raise click.UsageError(
            "a tool's limit is --calls-per-s R, --max-in-flight N (calls at once), or both"
        )
    if calls is None and said["burst"] is not None:
        raise click.UsageError("--burst goes with --calls-per-s")
    burst = None if calls is None else said["burst"] or rates.default_burst(calls)
    was = client.limits.set_rate(scope, calls, burst, max_in_flight=at_once, by=by, reason=reason)
    before = f" (was {_tool_amount(rates.parse(scope, was))})" if was is not None else ""
    say(f"{scope}: {_tool_amount(rates.parse(scope, client.limits.all()[scope]))}{before}")


def _tool_amount(rate: rates.Rate) -> str:
    """What a tool's record holds it to, in words."""
    parts = (
        []
        if rate.calls_per_s is None
        else [f"at most {rate.calls_per_s:g} calls a second, {rate.burst} at once"]
    )
    parts += [] if rate.max_in_flight is None else [f"at most {rate.max_in_flight} calls running at once"]
    return "; ".join(parts)


@limits.command("unset")
@app_option
@by_option
@reason_option
@tenant_option
@default_option
@workflow_option
@tool_option
@click.pass_obj
def limits_unset(settings: Settings, /, by: str, reason: str, **said: Any) -> None:
    """Lift a tenant's own limit (it is then held by the default one, if any) or, with
    --default, the default one, or a --workflow's: its held creates are let in at the timers' next
    looks. Or lift a --tool's calls a second and at once."""
    client = Client(settings)
    scope = _scope(client, said["tenant"], said["default"], said["tool"], said["workflow"])
    operator(client, by)
    client.limits.unset(scope, by=by, reason=reason)
    say(f"{scope}: no limit of its own")


@limits.command("list")
@json_option
@click.pass_obj
def limits_list(settings: Settings, as_json: bool) -> None:
    """Every limit: its scope, how many tasks in flight or calls a second, who set it, when and why,
    and what a tenant's or a tool's holds now."""
    store = Client(settings).limits
    rows = [{**_row(found), **store.now(found.scope)} for found in rules.every(store.all())]
    lines = [
        f"{r['scope']:<24} {_amount(r):>7}  by {r['by']} at {r['at']} {r['reason']}{_now(r)}"
        + (f"  DAMAGED ({r['damaged']}): held at {_held(r)}" if r["damaged"] else "")
        for r in rows
    ]
    emit({"limits": rows}, as_json, "\n".join(lines) or "no limits: no tenant's tasks are counted")


@limits.command("history")
@json_option
@click.pass_obj
def limits_history(settings: Settings, as_json: bool) -> None:
    """The last changes to the limits: what, by whom, when and why."""
    rows = Client(settings).limits.history()
    lines = [
        f"{r['at']} {r['action']:<5} {r['scope']:<24} {_amount(r):>7} by {r['by']} {r['reason']}"
        for r in rows
    ]
    emit({"history": rows}, as_json, "\n".join(lines) or "no changes")


def _row(found: rules.Limit | rates.Rate) -> dict[str, Any]:
    return dataclasses.asdict(found)


def _amount(row: dict[str, Any]) -> str:
    """A record's or a change's amount: its tasks in flight, or its calls a second and burst and
    its calls at once."""
    if "calls_per_s" not in row:
        return str(row.get("max_in_flight", ""))
    rate = f"{float(row['calls_per_s']):g}/s x{row['burst']}" if row["calls_per_s"] not in (None, "") else ""
    at_once = f"{row['max_in_flight']} at once" if row.get("max_in_flight") not in (None, "") else ""
    return " ".join(p for p in (rate, at_once) if p)


def _now(row: dict[str, Any]) -> str:
    """What the scope holds now, when one key says it."""
    if "in_flight" in row:
        return f"  (now: {row['in_flight']} in flight, {row['held']} held)"
    return f"  (now: {row['calls_running']} running)" if "calls_running" in row else ""


def _held(row: dict[str, Any]) -> str:
    if "calls_per_s" in row:
        return f"{rates.DAMAGED_RATE:g}/s, {rates.DAMAGED_AT_ONCE} at once"
    return str(rules.DAMAGED)
