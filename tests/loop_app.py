"""A test app of loops (Workflow.max_steps). `support`: the model looks an order up, reads its
shipment (both read-only tools), refunds it, then tells the customer (two effects), each result
shown to its next proposal. `payout`: after an approver's OK, the model posts to a ledger and pays,
two money steps under the one approval, whose plan caps their sum at the approved amount
(Workflow.approval_plan). Effects go to a JSON-lines file in $WAKEFUL_HOME, one line per op key."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from wakeful.core.settings import Settings
from wakeful.schemas import events
from wakeful.sdk import (
    APPROVERS,
    CLOSED,
    App,
    Context,
    Effect,
    Next,
    Plan,
    Refuse,
    Review,
    Start,
    Tool,
    Wait,
    Workflow,
)

RECEIVED, WORKING, AWAITING, PAYING = "received", "working", "awaiting_approval", "paying"
ORDERS = {"o-1": {"status": "shipped", "parcel": "p-9", "paid": "40"}}
PARCELS = {"p-9": {"carrier": "acme post", "state": "lost in transit"}}
LEDGER = "loop-refunds.jsonl"


class Order(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    order_id: str


class OrderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    order_id: str


class ParcelArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    parcel: str


class RefundArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    order_id: str
    amount: int


class FindOrder(Tool[OrderArgs]):
    name, args, stages, effect = "find_order", OrderArgs, (WORKING,), False
    description = "Look an order up: its status, its parcel and what was paid."

    def call(self, op_key: str, args: OrderArgs, fence: int) -> Mapping[str, str]:
        return ORDERS.get(args.order_id, {"status": "unknown"})

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        return None  # read-only: called again with the same key after a crash


class TrackParcel(Tool[ParcelArgs]):
    name, args, stages, effect = "track_parcel", ParcelArgs, (WORKING,), False
    description = "Read a parcel's tracking, as its carrier reports it (outside text)."

    def call(self, op_key: str, args: ParcelArgs, fence: int) -> Mapping[str, str]:
        return PARCELS.get(args.parcel, {"state": "unknown parcel"})

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        return None


class MoneyArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    amount: int


class NoticeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    text: str


def booked(settings: Settings, op_key: str) -> list[dict[str, Any]]:
    """The lines the ledger file holds for `op_key` (one, once its effect ran)."""
    path = settings.home / LEDGER
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [row for row in rows if row["op_key"] == op_key]


class Ledger:
    """An effect's downstream: one line per op key in $WAKEFUL_HOME/LEDGER, found again by it."""

    name: ClassVar[str]

    def connect(self, settings: Settings) -> None:
        self.path, self.lock = settings.home / LEDGER, threading.Lock()

    def once(self, op_key: str, row: dict[str, Any]) -> Mapping[str, str]:
        with self.lock:
            if (found := self.lookup(op_key)) is not None:
                return found
            with self.path.open("a") as ledger:
                ledger.write(json.dumps({"op_key": op_key, "tool": self.name, **row}) + "\n")
        return {"done": op_key}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        return {"done": op_key} if any(json.loads(line)["op_key"] == op_key for line in lines) else None


class RefundOrder(Ledger, Tool[RefundArgs]):
    name, args, stages = "refund_order", RefundArgs, (WORKING,)
    description = "Refund an order, once."
    op_key = "LOOPREFUND:{task_id}:v{version}"

    def call(self, op_key: str, args: RefundArgs, fence: int) -> Mapping[str, str]:
        return self.once(op_key, {"order": args.order_id, "amount": args.amount})


class SendNotice(Ledger, Tool[NoticeArgs]):
    name, args, stages = "send_notice", NoticeArgs, (WORKING,)
    description = "Tell the customer what was done; this ends the task."

    def call(self, op_key: str, args: NoticeArgs, fence: int) -> Mapping[str, str]:
        return self.once(op_key, {"text": args.text})


class PostLedger(Ledger, Tool[MoneyArgs]):
    name, args, stages = "post_ledger", MoneyArgs, (PAYING,)
    description = "Post the payout to the ledger, once."

    def call(self, op_key: str, args: MoneyArgs, fence: int) -> Mapping[str, str]:
        return self.once(op_key, {"amount": args.amount})


class PayBank(Ledger, Tool[MoneyArgs]):
    name, args, stages = "pay_bank", MoneyArgs, (PAYING,)
    description = "Pay the payout through the bank, once; this ends the task."

    def call(self, op_key: str, args: MoneyArgs, fence: int) -> Mapping[str, str]:
        return self.once(op_key, {"amount": args.amount})


def start(s: Start) -> Next[Order] | Refuse:
    order = s.payload.get("order_id")
    return Next(WORKING, Order(order_id=order)) if isinstance(order, str) else Refuse("no order_id")


def check(ctx: Context[Any], effect: Effect) -> Effect | Refuse | Review:
    args: Any = effect.args
    if args.task_id != ctx.task_id:
        return Review(f"the proposal names task {args.task_id}")
    return effect


def done(ctx: Context[Order], tool: str, result: Mapping[str, Any]) -> Next[Order]:
    if tool == SendNotice.name:  # the finishing call
        return Next(CLOSED, refs={"notice": str(result["done"])})
    if tool == RefundOrder.name:
        return Next(WORKING, refs={"refund": str(result["done"])})
    return Next(WORKING)  # a lookup: the loop goes on, the model reads what it returned


support = Workflow(
    name="support",
    version=1,
    state=Order,
    stages={RECEIVED: (WORKING,), WORKING: (CLOSED,)},
    start=start,
    check=check,
    done=done,
    max_steps=6,
)


class Payout(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    amount: int


def start_payout(s: Start) -> Next[Payout] | Refuse:
    amount = s.payload.get("amount")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
        return Refuse("a payout needs a positive whole amount")
    ok = Wait(events.APPROVE, (APPROVERS,), timedelta(hours=8), on_deadline="expire", then=PAYING)
    return Next(AWAITING, Payout(amount=amount), wait=ok)


def paid(ctx: Context[Payout], tool: str, result: Mapping[str, Any]) -> Next[Payout]:
    return Next(CLOSED) if tool == PayBank.name else Next(PAYING)


payout = Workflow(
    name="payout",
    version=1,
    state=Payout,
    stages={RECEIVED: (AWAITING, PAYING), AWAITING: (PAYING, CLOSED), PAYING: (CLOSED,)},
    start=start_payout,
    check=check,
    done=paid,
    needs_approval=lambda ctx: True,
    approval_plan=Plan((PostLedger.name, PayBank.name), total="amount"),
    max_steps=4,
)

app = App(
    name="loopy",
    workflows=[support, payout],
    tools=[FindOrder(), TrackParcel(), RefundOrder(), SendNotice(), PostLedger(), PayBank()],
)
