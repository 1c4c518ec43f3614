"""A test app whose one working stage is a loop (Workflow.max_steps): the model looks an order up,
reads its shipment (both read-only tools), refunds it, then tells the customer (two effects), each
result shown to its next proposal. The refunds and notices go to a JSON-lines file in
$WAKEFUL_HOME, one line per op key."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from wakeful.core.settings import Settings
from wakeful.sdk import CLOSED, App, Context, Effect, Next, Refuse, Review, Start, Tool, Workflow

RECEIVED, WORKING = "received", "working"
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


class NoticeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    text: str


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


def start(s: Start) -> Next[Order] | Refuse:
    order = s.payload.get("order_id")
    return Next(WORKING, Order(order_id=order)) if isinstance(order, str) else Refuse("no order_id")


def check(ctx: Context[Order], effect: Effect) -> Effect | Refuse | Review:
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

app = App(name="loopy", workflows=[support], tools=[FindOrder(), TrackParcel(), RefundOrder(), SendNotice()])
