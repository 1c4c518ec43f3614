"""The support app's load for `wakeful bench`, `wakeful chaos` and the crash suite.

Each task's order and parcel are stocked in the reference shop first (examples/shop.py), then its
ticket is opened. The carrier reports the parcel lost (a replacement while the item is in stock, else
a refund), damaged (a refund), delivered or on its way (no remedy): four tool calls, or three and a
notice at its own stage. On the second path (40% under chaos, as for the refund) the order is worth
more than the approval limit, and alice's approval follows the ticket. Its effects are the shop's
records: a remedy and a notice, or the notice alone.
"""

from __future__ import annotations

import random

import redis

from wakeful.bench.traffic import Effect, Plan, Send, stream_after, stream_mark
from wakeful.examples import shop
from wakeful.examples.shop import Notice, Order, Remedy, Shop, Status, Tracking
from wakeful.examples.support_rules import remedy_due
from wakeful.operate.dev_signers import REQUESTER
from wakeful.schemas import events

LIMIT = 1000  # the local stack's approval limit (Client.reset_authority)
# Most tickets are about a loss.
STATUSES: tuple[Status, ...] = ("lost", "lost", "damaged", "delivered", "in_transit")
ITEMS = ("kettle", "desk lamp", "rain jacket", "blender", "headphones")


class SupportTraffic:
    share = 0.4
    second_path = "above the limit, through an approval"

    def plan(self, task_id: str, rng: random.Random, second: bool) -> Plan:
        amount = rng.randint(LIMIT + 1, 5 * LIMIT) if second else rng.randint(1, LIMIT)
        status, in_stock, item = rng.choice(STATUSES), rng.random() < 0.5, rng.choice(ITEMS)
        order = Order(
            order_id=f"O-{task_id}"[:64], item=item, amount=amount, currency="EUR",
            parcel=f"P-{task_id}"[:64], in_stock=in_stock,
        )  # fmt: skip
        tracking = Tracking(
            parcel=order.parcel, carrier="acme post", status=status, detail=f"Parcel {status}."
        )
        said = f"Where is my {item}? Order {order.order_id}."
        create = {"workflow": "support", "order_id": order.order_id, "amount": amount, "message": said}
        sends = [Send(REQUESTER, events.CREATE, create)]
        if second:
            sends.append(Send("alice", events.APPROVE, {"version": 1}))

        def stock(admin: redis.Redis) -> None:
            Shop(admin).stock(order, tracking)

        effects = 2 if remedy_due(status, in_stock) else 1  # the remedy and the notice, or the notice
        return Plan(sends, settles="closed", effects=effects, arrange=stock)

    def mark(self, admin: redis.Redis) -> str:
        return stream_mark(admin, shop.LOG)

    def effects(self, admin: redis.Redis, after: str) -> tuple[list[Effect], str]:
        raw, cursor = stream_after(admin, shop.LOG, after)
        found = [shop.decode(r) for r in raw]
        return [Effect(e.task_id, e.op_key, e.at) for e in found if isinstance(e, Remedy | Notice)], cursor


traffic = SupportTraffic()
