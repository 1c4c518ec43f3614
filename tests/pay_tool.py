"""A supplier payment tool, for the unit tables that hash a tool's contract and wording."""

from __future__ import annotations

from pydantic import BaseModel

from wakeful.sdk.tools import Tool


class PayArgs(BaseModel):
    amount: int


class Pay(Tool[PayArgs]):
    name = "pay"
    args = PayArgs
    description = "Pay the supplier once."
    stages = ("ready",)
    egress = ("bank",)
