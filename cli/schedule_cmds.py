"""`wakeful schedule ...`: tasks started on a cron rule or an interval, one per tick (D104). The
schedules are authority data: operators change them, each change recorded with who and when; the
timers publish their ticks."""

from __future__ import annotations

import signal
import threading
from typing import Any, Literal

import click
import orjson

from wakeful.cli.app_option import app_option
from wakeful.cli.kill_cmds import operator
from wakeful.cli.output import emit, say
from wakeful.core.cron import CATCH_UP
from wakeful.core.errors import ConfigError
from wakeful.core.ids import DEFAULT_TENANT, TENANT_RE
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.schemas.schedule import ScheduleRecord
from wakeful.workflow import schedules

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
by_option = click.option(
    "--by", required=True, help="The operator who changes it (a signer that may send task.reopen): recorded."
)
reason_option = click.option("--reason", default="", help="Why: recorded.")


@click.group()
def schedule() -> None:
    """Start a workflow's tasks, or purge, on a cron rule or an interval: add, list, pause, resume,
    delete, history, run-purges."""


@schedule.command("add")
@app_option
@click.argument("name")
@click.option(
    "--cron",
    "cron_expr",
    default=None,
    help="Five fields, UTC: minute hour day month weekday; `CRON_TZ=<zone> ` first reads them in that zone.",
)
@click.option("--every", default=None, help="An interval: 30s, 5m, 2h, 1d or 1h30m; ticks count from now.")
@click.option("--workflow", default=None, help="The app's workflow each tick starts.")
@click.option(
    "--purge", is_flag=True, help="Each tick runs the app's retention purge instead (`schedule run-purges`)."
)
@click.option("--payload", default="{}", show_default=True, help="The task.create fields, as a JSON object.")
@click.option(
    "--catch-up",
    type=click.Choice(CATCH_UP),
    default="one",
    show_default=True,
    help="After an outage: skip the missed ticks, run the newest one, or run all of them.",
)
@click.option(
    "--tenant",
    default=DEFAULT_TENANT,
    show_default=True,
    help="The tenant whose tasks the ticks start; its ticks are signed by `scheduler@<tenant>`.",
)
@by_option
@json_option
@click.pass_obj
def schedule_add(settings: Settings, /, name: str, by: str, as_json: bool, **said: Any) -> None:
    """Add schedule NAME: from now on, each tick of --cron or --every starts one task of --workflow
    with --payload in --tenant, signed by the `scheduler` principal (another tenant's:
    `scheduler@<tenant>`, registered here if it is not yet). With --purge instead, each tick purges
    what the app's retention lets go, of every tenant (`wakeful schedule run-purges` runs them)."""
    client = Client(settings)
    operator(client, by)
    tenant = said["tenant"]
    if not TENANT_RE.fullmatch(tenant):
        raise click.BadParameter(f"{tenant[:60]!r} must match {TENANT_RE.pattern}", param_hint="'--tenant'")
    try:
        rule = schedules.rule_text(said["cron_expr"], said["every"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--cron' / '--every'") from None
    workflow, fields = _what(client, said)
    if tenant != DEFAULT_TENANT:  # its own scheduler: a signer of the tenant, as any upstream of it
        principal = schedules.signer_of(tenant)
        key_id = client.add_signer(principal, (events.CREATE,), tenant=tenant)
        say(
            f"ticks of tenant {tenant} are signed by {principal} ({key_id}); every timer reads its key "
            f"from {client.keystore() / f'{principal}.key'}"
        )
    job: Literal["create", "purge"] = "purge" if said["purge"] else "create"
    added = client.schedules.add(
        name, rule, workflow, fields, by=by, catch_up=said["catch_up"], tenant=tenant, job=job
    )
    row = _row(added, None)
    emit(row, as_json, f"schedule {name} added: {row['rule']}, next tick {row['next_tick']}")


def _what(client: Client, said: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The workflow and payload each tick starts; ("", {}) for a purge's."""
    workflow = said["workflow"]
    if said["purge"]:
        if workflow is not None or said["payload"] != "{}" or said["tenant"] != DEFAULT_TENANT:
            raise click.UsageError(
                "--purge runs the app's retention over every tenant: no --workflow, --payload or --tenant"
            )
        return "", {}
    if workflow is None:
        raise click.UsageError("name the --workflow each tick starts, or --purge")
    if client.app.workflow(workflow) is None:
        have = ", ".join(wf.name for wf in client.app.workflows)
        raise click.BadParameter(
            f"app {client.app.name} has no workflow {workflow!r}; it has {have}", param_hint="'--workflow'"
        )
    return workflow, _payload(said["payload"])


@schedule.command("run-purges")
@app_option
@click.option("--once", is_flag=True, help="Look once, run what is due, and stop.")
@click.option("--json", "as_json", is_flag=True, help="With --once: print the purges' reports as JSON.")
@click.pass_obj
def schedule_run_purges(settings: Settings, once: bool, as_json: bool) -> None:
    """Run the purge schedules (`schedule add --purge`) as their ticks fall due, until Ctrl-C or
    SIGTERM: one purge per due tick over every replica, as the admin, as `task purge` runs."""
    from wakeful.operate.purge_schedules import PurgeSchedules

    client = Client(settings)
    runner = PurgeSchedules(client.admin, client.app, settings, say)
    if once:
        ran = runner.look()
        rows = [{"schedule": name, **report.as_dict()} for name, report in ran]
        return emit(
            {"ran": rows},
            as_json,
            "\n".join(f"{r['schedule']}: purged {r['purged']}" for r in rows) or "nothing due",
        )
    say(f"running the purge schedules of app {client.app.name}; Ctrl-C stops")
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    runner.serve(stop)
    return None


@schedule.command("list")
@app_option
@json_option
@click.pass_obj
def schedule_list(settings: Settings, as_json: bool) -> None:
    """Every schedule: its rule, workflow, catch-up policy, paused or not, its newest tick published
    and its next."""
    store = Client(settings).schedules
    fired = store.fired()
    rows = [
        _row(found, fired.get(name)) if isinstance(found, ScheduleRecord) else {"name": name, "error": found}
        for name, found in store.all().items()
    ]
    lines = [f"{r['name']:<20} {r.get('error') or _line(r)}" for r in rows] or [
        "no schedules (`wakeful schedule add NAME --every 1h --workflow W --by P`)"
    ]
    emit({"schedules": rows}, as_json, "\n".join(lines))


# (command, what it does to the schedule, its help)
CHANGES = (
    (
        "pause",
        "paused",
        "Publish no tick of NAME until it is resumed; the ticks that fall meanwhile are never owed.",
    ),
    ("resume", "resumed", "Tick again from now: none of the ticks that fell while NAME was paused."),
    (
        "delete",
        "deleted",
        "Remove NAME: no tick of it is published again. The tasks it started are left as they are.",
    ),
)


def _changing(action: str, done: str, help_text: str) -> click.Command:
    @click.pass_obj
    def command(settings: Settings, name: str, by: str, reason: str) -> None:
        client = Client(settings)
        operator(client, by)
        store = client.schedules
        if action == "delete":
            store.delete(name, by=by, reason=reason)
        else:
            (store.pause if action == "pause" else store.resume)(name, by=by, reason=reason)
        click.echo(f"schedule {name} {done}")

    for option in (reason_option, by_option, click.argument("name"), app_option):
        command = option(command)
    return click.command(action, help=help_text)(command)


for _action, _done, _help in CHANGES:
    schedule.add_command(_changing(_action, _done, _help))


@schedule.command("history")
@app_option
@json_option
@click.pass_obj
def schedule_history(settings: Settings, as_json: bool) -> None:
    """The last changes to the schedules: what, by whom, when and why."""
    rows = Client(settings).schedules.history()
    lines = [f"{r['at']} {r['action']:<7} {r['name']:<20} by {r['by']} {r['reason']}" for r in rows]
    emit({"history": rows}, as_json, "\n".join(lines) or "no changes")


def _payload(text: str) -> dict[str, Any]:
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ConfigError("--payload", f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError("--payload", "must be a JSON object of the task.create fields")
    return doc


def _row(found: ScheduleRecord, fired: Any) -> dict[str, Any]:
    return {
        **found.model_dump(mode="json"),
        "newest_tick": fired.isoformat() if fired else None,
        "next_tick": None if found.paused else schedules.next_tick(found, fired).isoformat(),
    }


def _line(row: dict[str, Any]) -> str:
    state = "paused" if row["paused"] else f"next {row['next_tick']}"
    tenant = f" tenant {row['tenant']}" if row.get("tenant", DEFAULT_TENANT) != DEFAULT_TENANT else ""
    what = "(purge)" if row.get("job") == "purge" else row["workflow"]
    return f"{row['rule']:<24} {what:<20} catch-up {row['catch_up']:<4} {state}{tenant}"
