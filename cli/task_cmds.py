"""`wakeful task ...` and `wakeful ledger`: act as an upstream system and read tasks as an operator."""

from __future__ import annotations

import re
import sys
from typing import Any

import click

from wakeful.cli.client import REQUESTER, Client
from wakeful.cli.output import emit, outcome_line
from wakeful.core.settings import Settings
from wakeful.state import keys

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _task_id(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """A task id is checked before anything is sent or read (the key builders would refuse it)."""
    if not re.fullmatch(keys.TASK_ID, value):
        raise click.BadParameter(f"{value[:40]!r} is not a task id ({keys.TASK_ID})")
    return value


def _finish(receipt: dict[str, Any], as_json: bool, extra: dict[str, Any] | None = None) -> None:
    emit({**receipt, **(extra or {})}, as_json, outcome_line(receipt))
    if receipt["status"] != "accepted":
        sys.exit(1)


@click.group()
def task() -> None:
    """Create, approve, amend, run and inspect refund tasks (through the real pipeline)."""


@task.command("new")
@click.option("--amount", type=click.IntRange(min=1), required=True, help="Refund amount (whole units).")
@click.option("--note", default=None, help="Free text from the customer: untrusted evidence.")
@click.option("--as", "principal", default=REQUESTER, show_default=True, help="Signing principal.")
@click.option("--wait-s", type=click.IntRange(min=1), default=None, help="Approval deadline in seconds.")
@json_option
@click.pass_obj
def task_new(
    settings: Settings, amount: int, note: str | None, principal: str, wait_s: int | None, as_json: bool
) -> None:
    """Publish a signed task.create event and print its outcome."""
    client = Client(settings)
    task_id, receipt = client.new_task(amount, note, principal, wait_s)
    if receipt["status"] == "accepted":
        receipt["reason"] = f"task {task_id} is {receipt.get('stage')} (version {receipt.get('version')})"
    _finish(receipt, as_json, {"task_id": task_id})


@task.command("approve")
@click.argument("task_id", callback=_task_id)
@click.option("--by", "principal", required=True, help="Approver; signs with this principal's key.")
@click.option("--version", type=int, required=True, help="The task version being approved.")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for the refund.")
@json_option
@click.pass_obj
def task_approve(
    settings: Settings, task_id: str, principal: str, version: int, timeout: float, as_json: bool
) -> None:
    """Approve a waiting task; on acceptance, wait for the refund to run and print where it ended."""
    client = Client(settings)
    receipt = client.approve(task_id, principal, version)
    extra: dict[str, Any] = {}
    if receipt["status"] == "accepted":
        shown = client.wait_settled(task_id, timeout)
        extra = {"task": shown}
        receipt["reason"] = f"approved by {principal}; task is {shown['stage']}" + (
            f" (ledger {shown['ledger'][0]['entry_id']})" if shown["ledger"] else ""
        )
    _finish(receipt, as_json, extra)


@task.command("amend")
@click.argument("task_id", callback=_task_id)
@click.option("--amount", type=click.IntRange(min=1), required=True)
@click.option("--as", "principal", default=REQUESTER, show_default=True)
@json_option
@click.pass_obj
def task_amend(settings: Settings, task_id: str, amount: int, principal: str, as_json: bool) -> None:
    """Change the amount: a new task version, and any approval is void."""
    receipt = Client(settings).amend(task_id, amount, principal)
    if receipt["status"] == "accepted":
        receipt["reason"] = f"task is {receipt.get('stage')} at version {receipt.get('version')}"
    _finish(receipt, as_json)


@task.command("run")
@click.argument("task_id", callback=_task_id)
@click.option("--as", "principal", default=REQUESTER, show_default=True)
@json_option
@click.pass_obj
def task_run(settings: Settings, task_id: str, principal: str, as_json: bool) -> None:
    """Ask a task to run now (refused while it still needs an approval)."""
    _finish(Client(settings).run(task_id, principal), as_json)


@task.command("reopen")
@click.argument("task_id", callback=_task_id)
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
@click.argument("task_id", callback=_task_id)
@json_option
@click.pass_obj
def task_show(settings: Settings, task_id: str, as_json: bool) -> None:
    """Stage, versions, amount, approval, last refusal and ledger entries of one task."""
    shown = Client(settings).show(task_id)
    lines = [f"{k}: {v}" for k, v in shown.items() if k not in ("pending_waits", "versions")]
    emit(shown, as_json, "\n".join(lines))


@task.command("list")
@json_option
@click.pass_obj
def task_list(settings: Settings, as_json: bool) -> None:
    """Every task with its stage."""
    rows = Client(settings).list_tasks()
    human = "\n".join(
        f"{r['id']:16} {r['stage']:18} v{r.get('version', '-')} {r.get('amount', '-'):>8}  "
        f"{r.get('last_refusal') or ''}"
        for r in rows
    )
    emit(rows, as_json, human or "no tasks")


@click.command("ledger")
@click.option("--task", "task_id", default=None, help="Only this task's entries.")
@json_option
@click.pass_obj
def ledger(settings: Settings, task_id: str | None, as_json: bool) -> None:
    """The reference bank's ledger entries."""
    entries = [e.model_dump(mode="json") for e in Client(settings).bank.entries(task_id)]
    human = "\n".join(
        f"{e['entry_id']:24} {e['task_id']:16} {e['amount']:>8} {e['currency']} {e['op_key']}"
        for e in entries
    )
    emit(entries, as_json, human or "no entries")
