"""A bounded rollout's app (D122): the contract of contract_app, signed by anyone of the task's
tenant registered for it, as `before` (v1) and as `app` (v2, migrating from v1, with v1 kept)."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from contract_app import SIGNED, contract, signed
from contract_v2 import ContractV2, from_v1, v2

from wakeful.sdk import ANYONE, Accept, App, Next, Refuse, Start, Workflow


def start_v2(s: Start) -> Next[ContractV2] | Refuse:
    title = s.payload.get("title")
    if not isinstance(title, str) or not title:
        return Refuse("a contract needs a title")
    return Next("awaiting_signature", ContractV2(title=title, parties=2))


anyone = {SIGNED: Accept(signed, signers=(ANYONE,))}
v1: Workflow[Any] = dataclasses.replace(cast(Workflow[Any], contract), events=anyone)
before = App(name="rollout", workflows=[v1])
v2_rolled = dataclasses.replace(v2, start=start_v2, events=anyone, migrate={1: from_v1})
app = App(name="rollout", workflows=[v2_rolled], retired=[v1])
