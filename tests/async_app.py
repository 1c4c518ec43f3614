"""A test app with a tool whose answer comes later (sdk.tools.Pending). `invoice`: the model asks
the bank to pay an invoice; the bank takes the order at once and settles it later, when its
settlement hook (principal `bank-hook`) sends `tool.completed` for the payment's handle. Then the
model, shown the settlement, sends the supplier a notice, which closes the task. The payment is
booked on a JSON-lines file in $WAKEFUL_HOME, one line per op key, found again by it. The bank
promises a settlement within the hour, but one it queues for a later run (an invoice whose id
starts `queued-`) within seconds only: a test lets that deadline pass."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from loop_app import Ledger, NoticeArgs, SendNotice
from pydantic import BaseModel, ConfigDict

from wakeful.sdk import CLOSED, App, Context, Effect, Next, Pending, Refuse, Review, Start, Tool, Workflow

PAYING = "paying"
HOOK = "bank-hook"
SETTLES_WITHIN = timedelta(hours=1)
QUEUED = "queued-"  # the id's prefix of an invoice the bank queues
QUEUED_WITHIN = timedelta(seconds=10)  # long enough to answer after a reopen, short to let it pass


class Invoice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    invoice: str
    amount: int


class PayArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    invoice: str
    amount: int


def handle_of(op_key: str) -> str:
    """The bank's own id for the payment ordered under op_key."""
    return "pay-" + hashlib.sha256(op_key.encode()).hexdigest()[:16]


def settles_within(invoice: str) -> timedelta:
    """How long the bank takes, at most, to settle the payment of `invoice`."""
    return QUEUED_WITHIN if invoice.startswith(QUEUED) else SETTLES_WITHIN


class PayInvoice(Ledger, Tool[PayArgs]):
    name, args, stages = "pay_invoice", PayArgs, (PAYING,)
    description = "Order the invoice's payment; the bank settles it later and says so."
    completed_by = (f"principal:{HOOK}",)

    def call(self, op_key: str, args: PayArgs, fence: int) -> Pending:
        self.once(op_key, {"invoice": args.invoice, "amount": args.amount})
        return Pending(handle_of(op_key), settles_within(args.invoice))

    def lookup(self, op_key: str) -> Pending | None:  # type: ignore[override]
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        rows = [row for row in map(json.loads, lines) if row["op_key"] == op_key]
        return Pending(handle_of(op_key), settles_within(rows[0]["invoice"])) if rows else None


class Notice(SendNotice):
    stages = (PAYING,)


def start(s: Start) -> Next[Invoice] | Refuse:
    invoice, amount = s.payload.get("invoice"), s.payload.get("amount")
    if not isinstance(invoice, str) or not isinstance(amount, int) or isinstance(amount, bool):
        return Refuse("an invoice needs its id and a whole amount")
    return Next(PAYING, Invoice(invoice=invoice, amount=amount))


def check(ctx: Context[Any], effect: Effect) -> Effect | Refuse | Review:
    args: Any = effect.args
    return effect if args.task_id == ctx.task_id else Review(f"the proposal names task {args.task_id}")


def done(ctx: Context[Invoice], tool: str, result: Mapping[str, Any]) -> Next[Invoice]:
    if tool == PayInvoice.name:
        return Next(PAYING, refs={"settlement": str(result.get("settlement", ""))})
    return Next(CLOSED)


invoice = Workflow(
    name="invoice",
    version=1,
    state=Invoice,
    stages={"received": (PAYING,), PAYING: (CLOSED,)},
    start=start,
    check=check,
    done=done,
    max_steps=3,
)

app = App(name="settling", workflows=[invoice], tools=[PayInvoice(), Notice()])

__all__ = ["NoticeArgs", "app"]
