"""The refund app as two later deploys would ship it, importable by `wakeful release check --app`:
one rewords its tool, the other changes the tool's op key (its contract)."""

from __future__ import annotations

from wakeful.examples.refund import BankRefund
from wakeful.examples.refund import refund as refund_workflow
from wakeful.sdk import App


class Reworded(BankRefund):
    description = BankRefund.description + " It also emails the customer a receipt."


class Rekeyed(BankRefund):
    op_key = "REFUND-V2:{task_id}:v{version}"


reworded = App(name="refund", workflows=[refund_workflow], tools=[Reworded()])
rekeyed = App(name="refund", workflows=[refund_workflow], tools=[Rekeyed()])
