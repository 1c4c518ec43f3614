"""Gate 4 and the tool catalog: a task waits through a reworded tool (its description, its egress),
and meets its app's rule when what it was admitted under changes (a tool's arguments, stages,
reversibility or op key). A task stamped before the two were told apart is judged the same way."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pay_tool import Pay
from pydantic import BaseModel

from wakeful.authority.snapshot import DEFAULT_COMPAT, Snapshot
from wakeful.schemas.checkpoint import BusinessState, Checkpoint, SecurityScope, VersionStamps
from wakeful.sdk.tools import Tool, catalog, contract_of, legacy_catalog
from wakeful.workflow import compat


class PayArgsWithNote(BaseModel):
    amount: int
    note: str


def variant(**changed: Any) -> Tool[Any]:
    """Pay as a later deploy declares it, with `changed` class attributes."""
    later: type[Tool[Any]] = type("PayLater", (Pay,), changed)
    return later()


REWORDED = [
    {"description": "Pay the supplier once, and email them a remittance."},
    {"egress": ("bank", "mail")},
]
RECONTRACTED = [
    {"args": PayArgsWithNote},
    {"stages": ("ready", "approved")},
    {"reversible": True},
    {"op_key": "PAY:{task_id}:{version}"},
]


def gate4(stamped: str, tools: list[Tool[Any]], rules: dict[str, str] | None = None) -> Checkpoint | str:
    """Gate 4 for a waiting task stamped `stamped`, under `tools` deployed and `rules` (the defaults)."""
    cp = Checkpoint(
        task_id="t-1",
        business=BusinessState(stage="ready", data={"amount": 10}),
        security=SecurityScope(tenant="default", principal_ref="principal:svc"),
        versions=VersionStamps(policy="p-1", tool_catalog=stamped, agent_id="pay-agent", state_version=3),
        updated_at=datetime(2026, 3, 1, tzinfo=UTC),
    )
    auth = Snapshot(approvers=frozenset(), limit=0, policy="p-1", compat=rules or dict(DEFAULT_COMPAT))
    return compat.check(cp, auth, catalog(tools), legacy_catalog(tools))


@pytest.mark.parametrize("changed", REWORDED, ids=lambda c: next(iter(c)))
def test_a_reworded_tool_neither_stops_a_task_nor_reaches_it_whatever_the_rule(
    changed: dict[str, Any],
) -> None:
    before, after = catalog([Pay()]), catalog([variant(**changed)])
    assert before != after and contract_of(before) == contract_of(after)
    for rule in ("quarantine", "pin", "migrate"):
        went_on = gate4(before, [variant(**changed)], {"policy": "pin", "tool_catalog": rule})
        assert isinstance(went_on, Checkpoint), went_on
        # Its stamp is kept: the model goes on reading the wording the task started with (D119),
        # and a later contract change is judged by the contract part, the same in both.
        assert went_on.versions.tool_catalog == before


@pytest.mark.parametrize("changed", RECONTRACTED, ids=lambda c: next(iter(c)))
def test_a_changed_tool_contract_meets_the_apps_rule_and_the_default_quarantines(
    changed: dict[str, Any],
) -> None:
    before, after = catalog([Pay()]), catalog([variant(**changed)])
    assert contract_of(before) != contract_of(after)
    assert gate4(before, [variant(**changed)]) == f"tool_catalog {before} -> {after} (quarantine)"
    pinned = gate4(before, [variant(**changed)], {"policy": "pin", "tool_catalog": "pin"})
    assert isinstance(pinned, Checkpoint) and pinned.versions.tool_catalog == before


def test_a_task_stamped_before_the_contract_was_told_apart_goes_on_under_the_same_tools() -> None:
    stamped = legacy_catalog([Pay()])
    assert contract_of(stamped) is None
    went_on = gate4(stamped, [Pay()])
    assert isinstance(went_on, Checkpoint) and went_on.versions.tool_catalog == catalog([Pay()])


def test_a_task_stamped_before_under_other_tools_meets_the_rule() -> None:
    stamped = legacy_catalog([Pay()])
    reworded = variant(description="Pay the supplier once, politely.")
    assert gate4(stamped, [reworded]) == f"tool_catalog {stamped} -> {catalog([reworded])} (quarantine)"


def test_a_catalog_stamp_has_its_contract_first_and_its_wording_second() -> None:
    stamp = catalog([Pay()])
    contract, _, wording = stamp.removeprefix("catalog-").partition(".")
    assert len(contract) == len(wording) == 16 and contract_of(stamp) == f"catalog-{contract}"
