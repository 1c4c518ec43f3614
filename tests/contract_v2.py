"""The contract app (contract_app.py) as its second release would ship it: the state model gained a
field, so version 2 of the workflow reads a task's state differently. Three ways to deploy it, for
`wakeful release check --app contract_v2:<name>` and the gate alike:

    migrating   v2 declares how a v1 task's state becomes v2's: waiting v1 tasks are migrated
    keeping     v2 declares no migration, but the app keeps v1: waiting v1 tasks run v1's code
    dropping    v2 declares neither: waiting v1 tasks are quarantined for a person
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from contract_app import contract
from pydantic import BaseModel, ConfigDict

from wakeful.sdk import App, Workflow


class ContractV2(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    title: str
    parties: int  # new in v2: how many must sign


def from_v1(state: dict[str, Any]) -> dict[str, Any]:
    """A v1 contract had two parties, always."""
    return {**state, "parties": 2}


def broken(state: dict[str, Any]) -> dict[str, Any]:
    raise KeyError("counterparty")


v2: Workflow[Any] = dataclasses.replace(cast(Workflow[Any], contract), version=2, state=ContractV2)
migrating = App(name="contract", workflows=[dataclasses.replace(v2, migrate={1: from_v1})])
keeping = App(name="contract", workflows=[v2], retired=[contract])
dropping = App(name="contract", workflows=[v2])
failing = App(name="contract", workflows=[dataclasses.replace(v2, migrate={1: broken})])
# v2 migrating from v1, and v1 kept: what a bounded rollout ships (D122)
rolling = App(name="contract", workflows=[dataclasses.replace(v2, migrate={1: from_v1})], retired=[contract])
