"""The onboarding's two tools, both calling the reference supplier register (examples/suppliers.py)
with a credential minted for each step (D120), each under its own operation key."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from wakeful.core.settings import Settings
from wakeful.examples.downstreams import as_tool_errors
from wakeful.examples.suppliers import Payment, Registration, Suppliers
from wakeful.sdk import Tool
from wakeful.state.stepped import as_minted


class RegisterArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    task_id: str = Field(max_length=64)
    legal_name: str = Field(max_length=200)
    account: str = Field(max_length=34)


class PaymentArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    task_id: str = Field(max_length=64)
    supplier_id: str = Field(max_length=18)
    account: str = Field(max_length=34)
    amount: int
    currency: str = Field(max_length=3)


class _OnRegister:
    credential: ClassVar[str | None] = "suppliers"  # a register user minted for each step (D120)

    def connect(self, settings: Settings) -> None:
        self.settings = settings

    @contextlib.contextmanager
    def _register(self) -> Iterator[Suppliers]:
        with as_minted(self.settings) as client:
            yield Suppliers(client)


class RegisterSupplier(_OnRegister, Tool[RegisterArgs]):
    name = "register_supplier"
    args = RegisterArgs
    description = (
        "Enter the supplier in the supplier register with its verified remittance account, once, "
        "under its op key. Reversible: a later failure removes it again."
    )
    stages = ("registering",)
    op_key = "SUPPLIER-REG:{task_id}:v{version}"
    reversible = True
    egress = ("suppliers",)

    def call(self, op_key: str, args: RegisterArgs, fence: int) -> Mapping[str, str]:
        with as_tool_errors(), self._register() as register:
            made = register.register(
                op_key, args.task_id, fence, legal_name=args.legal_name, account=args.account
            )
        return {"supplier_id": made.supplier_id}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        with self._register() as register:
            found = register.lookup(op_key)
        return {"supplier_id": found.supplier_id} if isinstance(found, Registration) else None

    def undo(self, op_key: str, args: RegisterArgs, fence: int) -> Mapping[str, str]:
        with as_tool_errors(), self._register() as register:
            removed = register.undo(op_key, args.task_id, fence)
        return {"removed": removed.supplier_id or "nothing had been registered"}


class ScheduleFirstPayment(_OnRegister, Tool[PaymentArgs]):
    name = "schedule_first_payment"
    args = PaymentArgs
    description = (
        "Schedule the registered supplier's first payment to its verified account on record, once, "
        "under its op key. Irreversible."
    )
    stages = ("scheduling",)
    op_key = "FIRST-PAY:{task_id}:v{version}"
    egress = ("suppliers",)

    def call(self, op_key: str, args: PaymentArgs, fence: int) -> Mapping[str, str]:
        with as_tool_errors(), self._register() as register:
            paid = register.schedule(
                op_key, args.task_id, fence, supplier_id=args.supplier_id, account=args.account,
                amount=args.amount, currency=args.currency,
            )  # fmt: skip
        return {"payment_id": paid.payment_id}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        with self._register() as register:
            found = register.lookup(op_key)
        return {"payment_id": found.payment_id} if isinstance(found, Payment) else None
