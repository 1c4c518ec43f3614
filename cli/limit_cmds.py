"""`wakeful authority limits ...`: how many of a tenant's tasks may be in flight at once (D108),
not `wakeful authority limit`, an app's approval amount. The limits are authority data: operators
change them, each change recorded with who, when and why; the gate holds a tenant's creates over
its limit and the timer lets them in as its tasks end (docs/limits.md)."""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from wakeful.authority.limit_store import DEFAULT_SCOPE, scope_of
from wakeful.cli.kill_cmds import operator
from wakeful.cli.output import emit, say
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.workflow import limits as rules

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
by_option = click.option(
    "--by", required=True, help="The operator who changes it (a signer that may send task.reopen): recorded."
)
reason_option = click.option("--reason", default="", help="Why: recorded.")
tenant_option = click.option("--tenant", default=None, help="The tenant whose limit it is.")
default_option = click.option(
    "--default", "default", is_flag=True, help="Every tenant with no limit of its own."
)


@click.group()
def limits() -> None:
    """How many of a tenant's tasks run at once.

    A tenant's in-flight limit: at most N of its tasks in flight at once, the rest of its creates
    held (never refused) until one ends. Not `authority limit`, an app's approval amount."""


def _scope(tenant: str | None, default: bool) -> str:
    if (tenant is None) == (not default):
        raise click.UsageError("name one of --tenant T or --default")
    return DEFAULT_SCOPE if default else scope_of(tenant or "")


@limits.command("set")
@click.option("--max-in-flight", type=int, required=True, help="How many tasks may be in flight at once.")
@by_option
@reason_option
@tenant_option
@default_option
@click.pass_obj
def limits_set(
    settings: Settings, max_in_flight: int, by: str, reason: str, tenant: str | None, default: bool
) -> None:
    """Hold a tenant (or, with --default, every tenant with no limit of its own) to
    --max-in-flight tasks in flight, from the roles' next wake on. Raising it lets held creates in
    at the timers' next look."""
    scope = _scope(tenant, default)
    client = Client(settings)
    operator(client, by)
    was = client.limits.set(scope, max_in_flight, by=by, reason=reason)
    before = f" (was {rules.parse(scope, was).max_in_flight})" if was is not None else ""
    say(f"{scope}: at most {max_in_flight} tasks in flight{before}")


@limits.command("unset")
@by_option
@reason_option
@tenant_option
@default_option
@click.pass_obj
def limits_unset(settings: Settings, by: str, reason: str, tenant: str | None, default: bool) -> None:
    """Lift a tenant's own limit (it is then held by the default one, if any) or, with
    --default, the default one. Its held creates are let in at the timers' next looks."""
    scope = _scope(tenant, default)
    client = Client(settings)
    operator(client, by)
    client.limits.unset(scope, by=by, reason=reason)
    say(f"{scope}: no limit of its own")


@limits.command("list")
@json_option
@click.pass_obj
def limits_list(settings: Settings, as_json: bool) -> None:
    """Every limit: its scope, how many tasks in flight, who set it, when and why."""
    rows = [_row(found) for found in rules.every(Client(settings).limits.all())]
    lines = [
        f"{r['scope']:<24} {r['max_in_flight']:>7}  by {r['by']} at {r['at']} {r['reason']}"
        + (f"  DAMAGED ({r['damaged']}): held at {rules.DAMAGED}" if r["damaged"] else "")
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
        f"{r['at']} {r['action']:<5} {r['scope']:<24} {r['max_in_flight']:>7} by {r['by']} {r['reason']}"
        for r in rows
    ]
    emit({"history": rows}, as_json, "\n".join(lines) or "no changes")


def _row(found: rules.Limit) -> dict[str, Any]:
    return dataclasses.asdict(found)
