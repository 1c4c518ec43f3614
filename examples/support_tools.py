"""The support agent's four tools, each calling the reference shop (examples/shop.py) with its own
credential under its own op key: two that only read (the order, the parcel's tracking) and two
effects (a refund or a replacement, a notice to the customer)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from wakeful.core.settings import Settings
from wakeful.examples.downstreams import as_tool_errors
from wakeful.examples.shop import REF, Answer, Notice, Remedy, Shop
from wakeful.sdk import Tool
from wakeful.state.stepped import as_minted

WORKING, NOTIFYING = "working", "notifying"
REMEDIES = ("refund", "replacement")


class OrderArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    task_id: str = Field(max_length=64)
    order_id: str = Field(pattern=f"^{REF}$")


class ParcelArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    task_id: str = Field(max_length=64)
    parcel: str = Field(pattern=f"^{REF}$")


class RemedyArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    task_id: str = Field(max_length=64)
    order_id: str = Field(pattern=f"^{REF}$")
    remedy: Literal["refund", "replacement"]
    amount: int
    currency: str = Field(max_length=3)


class NoticeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    task_id: str = Field(max_length=64)
    order_id: str = Field(pattern=f"^{REF}$")
    message: str = Field(min_length=1, max_length=1000)


class _AtShop:
    credential: ClassVar[str | None] = "shop"  # a shop user minted for each step (D120)

    def connect(self, settings: Settings) -> None:
        self.settings = settings

    @contextlib.contextmanager
    def _shop(self) -> Iterator[Shop]:
        with as_minted(self.settings) as client:
            yield Shop(client)

    def _read(self, op_key: str) -> Mapping[str, str] | None:
        with self._shop() as shop:
            found = shop.lookup(op_key)
        return found.answer if isinstance(found, Answer) else None


class FindOrder(_AtShop, Tool[OrderArgs]):
    name = "find_order"
    args = OrderArgs
    description = "Look an order up in the shop: the item, what was paid, its parcel, whether it is in stock."
    stages = (WORKING,)
    op_key = "ORDER:{task_id}:v{version}"
    egress = ("shop",)
    effect = False
    output_trust = "trusted"  # the shop's own order records, not outside text

    def call(self, op_key: str, args: OrderArgs, fence: int) -> Mapping[str, str]:
        with as_tool_errors(), self._shop() as shop:
            return shop.order(op_key, args.task_id, args.order_id)

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        return self._read(op_key)


class TrackParcel(_AtShop, Tool[ParcelArgs]):
    name = "track_parcel"
    args = ParcelArgs
    description = "Read a parcel's tracking as its carrier reports it: a status and the carrier's own words."
    stages = (WORKING,)
    op_key = "TRACK:{task_id}:v{version}"
    egress = ("shop",)
    effect = False  # output_trust stays "untrusted": the carrier's text is outside text

    def call(self, op_key: str, args: ParcelArgs, fence: int) -> Mapping[str, str]:
        with as_tool_errors(), self._shop() as shop:
            return shop.tracking(op_key, args.task_id, args.parcel)

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        return self._read(op_key)


class RemedyOrder(_AtShop, Tool[RemedyArgs]):
    name = "remedy_order"
    args = RemedyArgs
    description = (
        "Make good on an order, once, under its op key: refund what was paid, or send a replacement. "
        "Above the approval limit it needs an approver's OK."
    )
    stages = (WORKING,)
    op_key = "REMEDY:{task_id}:v{version}"
    egress = ("shop",)

    def call(self, op_key: str, args: RemedyArgs, fence: int) -> Mapping[str, str]:
        with as_tool_errors(), self._shop() as shop:
            made = shop.remedy(
                op_key, args.task_id, fence, remedy=args.remedy, order_id=args.order_id,
                amount=args.amount, currency=args.currency,
            )  # fmt: skip
        return _remedied(made)

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        with self._shop() as shop:
            found = shop.lookup(op_key)
        return _remedied(found) if isinstance(found, Remedy) else None


class SendNotice(_AtShop, Tool[NoticeArgs]):
    name = "send_notice"
    args = NoticeArgs
    description = "Tell the customer what was done about their order, once; this ends the task."
    stages = (WORKING, NOTIFYING)
    op_key = "NOTICE:{task_id}:v{version}"
    egress = ("shop",)

    def call(self, op_key: str, args: NoticeArgs, fence: int) -> Mapping[str, str]:
        with as_tool_errors(), self._shop() as shop:
            sent = shop.notify(op_key, args.task_id, fence, order_id=args.order_id, message=args.message)
        return _noticed(sent)

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        with self._shop() as shop:
            found = shop.lookup(op_key)
        return _noticed(found) if isinstance(found, Notice) else None


def _remedied(made: Remedy) -> Mapping[str, str]:
    return {"remedy": made.remedy, "reference": made.op_key, "amount": str(made.amount)}


def _noticed(sent: Notice) -> Mapping[str, str]:
    return {"notice": sent.op_key}
