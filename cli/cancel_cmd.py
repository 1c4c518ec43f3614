"""`wakeful task cancel`: end a task that is not finished, its workflow's undos run (workflow/cancels.py)."""

from __future__ import annotations

import sys

import click

from wakeful.cli.app_option import app_option
from wakeful.cli.output import emit, outcome_line
from wakeful.cli.task_cmds import json_option, task_id_argument
from wakeful.core.settings import Settings
from wakeful.operate.client import Client
from wakeful.sdk.workflow import CANCELLED, CANCELLING, NEEDS_REVIEW

ENDED_S = 60.0  # how long the command waits, by default, for the undos to end


@click.command("cancel")
@app_option
@click.argument("task_id", callback=task_id_argument)
@click.option("--reason", required=True, help="Why: kept on the task and on its receipt.")
@click.option("--by", "principal", required=True, help="Who cancels: a signer that may send task.cancel.")
@click.option(
    "--wait-s",
    type=click.FloatRange(min=0),
    default=ENDED_S,
    show_default=True,
    help="How long to wait for the undos to end (0: only for the cancel's receipt).",
)
@json_option
@click.pass_obj
def task_cancel(  # noqa: PLR0917 -- click passes every option as a parameter
    settings: Settings, task_id: str, reason: str, principal: str, wait_s: float, as_json: bool
) -> None:
    """Cancel a task that is not finished: it stops where it is (a step running finishes first), the
    steps its workflow names in undo_on_cancel are undone, newest first, each once, and it ends
    `cancelled`. A finished task's cancel is refused with the reason, exit 1."""
    client = Client(settings)
    receipt = client.cancel(task_id, reason, principal)
    if receipt["status"] != "accepted":
        emit(receipt, as_json, outcome_line(receipt))
        sys.exit(1)
    shown = client.show(task_id)
    if wait_s and shown["stage"] == CANCELLING:
        shown = client.wait_stage(task_id, {CANCELLED, NEEDS_REVIEW}, wait_s)
    undone = sorted(v for k, v in shown.get("external_refs", {}).items() if k.startswith("undone:"))
    done = {**receipt, "stage": shown["stage"], "undone": undone}
    said = f"task {task_id} is {shown['stage']}" + (f"; undid {', '.join(undone)}" if undone else "")
    if shown["stage"] == NEEDS_REVIEW:
        said += f"; a person must settle it: {shown.get('last_refusal')}"
    emit(done, as_json, said)
    sys.exit(0 if shown["stage"] == CANCELLED or (shown["stage"] == CANCELLING and not wait_s) else 1)
