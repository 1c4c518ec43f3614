"""`wakeful task ...` and `wakeful ledger`: act as an upstream system and read tasks as an operator."""

from __future__ import annotations

import re
import sys
from datetime import timedelta
from typing import IO, Any

import click

from wakeful.cli import ledger_view
from wakeful.cli.app_option import app_option
from wakeful.cli.output import emit, outcome_line
from wakeful.cli.payload import build_payload
from wakeful.core import ids
from wakeful.core.settings import Settings
from wakeful.operate.client import REQUESTER, Client
from wakeful.schemas import events
from wakeful.sdk.app import load_app
from wakeful.sdk.workflow import WORKFLOW_FIELD
from wakeful.state import acl
from wakeful.workflow.stuck import STUCK_AFTER_S

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")
field_option = click.option(
    "--field",
    "fields",
    multiple=True,
    metavar="KEY=VALUE",
    help="A payload field; VALUE is read as JSON when it parses (2500, true), else as text. Repeatable.",
)
payload_option = click.option(
    "--payload",
    "payload_file",
    type=click.File("rb"),
    default=None,
    help="A file holding the payload as a JSON object (- for stdin); --field overrides its keys.",
)


def task_id_argument(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A task id is checked before anything is sent or read (the key builders would refuse it)."""
    if not re.fullmatch(ids.TASK_ID, value):
        raise click.BadParameter(f"{value[:40]!r} is not a task id ({ids.TASK_ID})")
    return value


def _correlation_id(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not re.fullmatch(ids.CORRELATION_ID, value):
        raise click.BadParameter(f"{value[:40]!r} is not a correlation id ({ids.CORRELATION_ID})")
    return value


def _accepting(settings: Settings, kind: str) -> None:
    """An event kind the loaded app does not know is refused here, before anything is signed."""
    app = load_app(settings.app)
    if kind not in app.kinds:
        raise click.BadParameter(
            f"app {app.name} accepts no {kind!r} events; it knows: {', '.join(sorted(app.kinds))}",
            param_hint="'--kind'",
        )


def _moved(receipt: dict[str, Any], what: str) -> None:
    if receipt["status"] == "accepted":
        receipt["reason"] = f"{what} {receipt.get('stage')} (version {receipt.get('version')})"


def _finish(receipt: dict[str, Any], as_json: bool, extra: dict[str, Any] | None = None) -> None:
    emit({**receipt, **(extra or {})}, as_json, outcome_line(receipt))
    if receipt["status"] == "rejected":  # "held" is kept for the thaw, not refused: exit 0
        sys.exit(1)


@click.group()
def task() -> None:
    """Create tasks of the loaded app, send them its events, and inspect them (through the real
    pipeline, signed as an upstream system)."""


@task.command("new")
@app_option
@click.option("--workflow", default=None, help="The app's workflow to start (default: its first).")
@field_option
@payload_option
@click.option("--amount", type=click.IntRange(min=1), default=None, help="Shorthand for --field amount=N.")
@click.option(
    "--note",
    default=None,
    help="The note field, as text (the bundled example app keeps it as untrusted evidence).",
)
@click.option("--as", "principal", default=REQUESTER, show_default=True, help="Signing principal.")
@click.option("--wait-s", type=click.IntRange(min=1), default=None, help="Approval deadline in seconds.")
@json_option
@click.pass_obj
def task_new(
    settings: Settings,
    workflow: str | None,
    fields: tuple[str, ...],
    payload_file: IO[bytes] | None,
    amount: int | None,
    note: str | None,
    principal: str,
    wait_s: int | None,
    as_json: bool,
) -> None:
    """Publish a signed task.create event with the payload given and print its outcome."""
    shortcuts = {WORKFLOW_FIELD: workflow, "amount": amount, "note": note, "wait_s": wait_s}
    payload = build_payload(payload_file, fields, shortcuts)
    app, named = load_app(settings.app), payload.get(WORKFLOW_FIELD)
    if named is not None and (not isinstance(named, str) or app.workflow(named) is None):
        have = ", ".join(wf.name for wf in app.workflows)
        raise click.BadParameter(
            f"app {app.name} has no workflow {named!r}; it has: {have}", param_hint="'--workflow'"
        )
    task_id, receipt = Client(settings).create(payload, principal)
    _moved(receipt, f"task {task_id} is")
    _finish(receipt, as_json, {"task_id": task_id})


@task.command("send")
@app_option
@click.argument("task_id", callback=task_id_argument)
@click.option(
    "--kind", required=True, help="An event kind the app accepts, e.g. its own signature.completed."
)
@field_option
@payload_option
@click.option("--as", "principal", default=REQUESTER, show_default=True, help="Signing principal.")
@click.option("--correlation-id", default=None, callback=_correlation_id, help="The wait it answers.")
@json_option
@click.pass_obj
def task_send(
    settings: Settings,
    task_id: str,
    kind: str,
    fields: tuple[str, ...],
    payload_file: IO[bytes] | None,
    principal: str,
    correlation_id: str | None,
    as_json: bool,
) -> None:
    """Publish one signed event of KIND for a task and print its outcome (exit 1 if refused)."""
    _accepting(settings, kind)
    payload = build_payload(payload_file, fields)
    receipt = Client(settings).event(task_id, kind, payload, principal, correlation_id)
    _moved(receipt, f"{kind} accepted; task is")
    _finish(receipt, as_json, {"task_id": task_id})


@task.command("approve")
@app_option
@click.argument("task_id", callback=task_id_argument)
@click.option("--by", "principal", required=True, help="Approver; signs with this principal's key.")
@click.option("--version", type=int, required=True, help="The task version being approved.")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for the task to settle.")
@json_option
@click.pass_obj
def task_approve(
    settings: Settings, task_id: str, principal: str, version: int, timeout: float, as_json: bool
) -> None:
    """Approve a waiting task; on acceptance, wait for it to settle (closed, quarantined or parked
    for review) and print where it ended."""
    client = Client(settings)
    receipt = client.approve(task_id, principal, version)
    extra: dict[str, Any] = {}
    if receipt["status"] == "accepted":
        shown = client.wait_settled(receipt.get("task_id") or task_id, timeout)  # the runtime's id
        extra = {"task": shown}
        did = [f"{op}: {effect}" for op, effect in shown["effects"].items() if effect]
        receipt["reason"] = f"approved by {principal}; task is {shown['stage']}" + (
            f" ({'; '.join(did)})" if did else ""
        )
    _finish(receipt, as_json, extra)


@task.command("amend")
@app_option
@click.argument("task_id", callback=task_id_argument)
@click.option("--amount", type=click.IntRange(min=1), required=True, help="The new amount field.")
@click.option("--as", "principal", default=REQUESTER, show_default=True)
@json_option
@click.pass_obj
def task_amend(settings: Settings, task_id: str, amount: int, principal: str, as_json: bool) -> None:
    """Send a task.amend event with a new amount field (refused unless the loaded app accepts
    amends; the bundled example app makes it a new task version, and any approval is void)."""
    _accepting(settings, events.AMEND)
    receipt = Client(settings).amend(task_id, amount, principal)
    if receipt["status"] == "accepted":
        receipt["reason"] = f"task is {receipt.get('stage')} at version {receipt.get('version')}"
    _finish(receipt, as_json)


@task.command("run")
@app_option
@click.argument("task_id", callback=task_id_argument)
@click.option("--as", "principal", default=REQUESTER, show_default=True)
@json_option
@click.pass_obj
def task_run(settings: Settings, task_id: str, principal: str, as_json: bool) -> None:
    """Ask a task to run now (refused while it still needs an approval)."""
    _finish(Client(settings).run(task_id, principal), as_json)


@task.command("reopen")
@app_option
@click.argument("task_id", callback=task_id_argument)
@click.option("--as", "principal", default="ops-lead", show_default=True, help="The person settling it.")
@click.option("--wait-s", type=click.IntRange(min=1), default=None, help="New approval deadline in seconds.")
@json_option
@click.pass_obj
def task_reopen(settings: Settings, task_id: str, principal: str, wait_s: int | None, as_json: bool) -> None:
    """Put a task parked in needs_review (an escalated deadline, a blocked proposal) back into the flow."""
    receipt = Client(settings).reopen(task_id, principal, wait_s)
    if receipt["status"] == "accepted":
        receipt["reason"] = f"task is {receipt.get('stage')} again"
    _finish(receipt, as_json)


@task.command("show")
@app_option
@click.argument("task_id", callback=task_id_argument)
@json_option
@click.pass_obj
def task_show(settings: Settings, task_id: str, as_json: bool) -> None:
    """Workflow, stage, version, the app's own fields, approval, last refusal, the waits, the actions
    and what each one's downstream says it did (its tool's lookup)."""
    shown = Client(settings).show(task_id)
    lines = show_lines(shown)
    emit(shown, as_json, "\n".join(lines))


@task.command("list")
@app_option
@click.option(
    "--stuck",
    is_flag=True,
    help="Only tasks that nothing will move on: a stage that waits for nothing, no proposal in flight.",
)
@click.option(
    "--older-than",
    "older_than",
    type=click.IntRange(min=0),
    default=STUCK_AFTER_S,
    show_default=True,
    metavar="SECONDS",
    help="With --stuck: how long a task must have been unchanged.",
)
@json_option
@click.pass_obj
def task_list(settings: Settings, stuck: bool, older_than: int, as_json: bool) -> None:
    """Every task with its workflow, stage, version and last refusal; with --stuck, only the stuck
    ones, each with why (exit 0 either way)."""
    client = Client(settings)
    rows = client.stuck_tasks(timedelta(seconds=older_than)) if stuck else client.list_tasks()
    human = "\n".join(
        f"{r['id']:16} {r.get('workflow') or '-':12} {r['stage']:18} v{r.get('version', '-')}  "
        f"{r.get('stuck') or r.get('last_refusal') or r.get('quarantine') or r.get('error') or ''}"
        for r in rows
    )
    emit(rows, as_json, human or ("no stuck tasks" if stuck else "no tasks"))


@click.command("ledger")
@click.option("--task", "task_id", default=None, help="Only this task's entries.")
@json_option
@click.pass_obj
def ledger(settings: Settings, task_id: str | None, as_json: bool) -> None:
    """What each downstream booked (the bank's bookings, the shop's remedies and notices, the
    register's outcomes), or one task's; each in its own shape (cli/ledger_view.py)."""
    admin = Client(settings).admin
    booked = [(d.user, d.entries(admin, task_id)) for d in acl.downstreams_of(settings) if d.entries]
    if as_json:  # decided before any formatting: no downstream's shape is assumed by the other form
        emit(ledger_view.as_json(booked), True, "")
    else:
        click.echo(ledger_view.human(booked))


def show_lines(shown: dict[str, Any]) -> list[str]:
    """`task show` for a person: a line per field, then one per wait, action and effect."""
    plain = ("pending_waits", "versions", "actions", "effects")
    lines = [f"{k}: {v}" for k, v in shown.items() if k not in plain]
    for wait in shown.get("pending_waits", []):
        who = ", ".join(wait["allowed_signers"]) or "any allowed signer"
        count, counted = wait.get("count", 1), wait.get("counted", [])
        quorum = (
            f"; {len(counted)} of {count} counted ({', '.join(counted) or 'none yet'})" if count > 1 else ""
        )
        lines.append(
            f"waits for: {wait['wait_for']} of version {wait['bound_to_version']} by {who} until "
            f"{wait['deadline']}, then {wait['on_deadline']} (correlation id {wait['correlation_id']})"
            + quorum
        )
    for op, entry in shown["actions"].items():
        result = f" {entry['result']}" if entry.get("result") else ""
        tried = entry.get("attempts") or 0  # calls that found the tool unavailable (D61)
        retried = f" (tool unavailable at {tried} call{'s' if tried > 1 else ''})" if tried else ""
        lines.append(f"action: {op} {entry['status']}{result}{retried}")
    for op, did in shown["effects"].items():
        lines.append(f"effect: {op} -> {'nothing done' if did is None else did}")
    return lines
