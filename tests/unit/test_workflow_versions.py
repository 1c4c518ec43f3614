"""Gate 4 for the workflow version a sleeping task started under: the deployed version migrates it
by the function it declares, a version the app keeps runs it (pinned, for real), and anything else
quarantines it with the reason; a state that no longer validates is quarantined, never a dead letter."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import contract_app
import contract_v2
import pytest
from contract_app import app as contract_v1
from contract_app import contract

from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.gate import rules as gate_rules
from wakeful.core.errors import ConfigError
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import App
from wakeful.workflow import compat, engine, release

LIVE = Snapshot(approvers=frozenset(), limit=0, policy="p-1")


def sleeping(app: App = contract_v1, data: dict[str, Any] | None = None, version: int = 1) -> Checkpoint:
    """A v1 contract waiting for its signature, stamped as `app` would stamp it."""
    return contract_app.sleeping(app.catalog, data, version)


def test_a_declared_migration_upgrades_the_state_and_restamps_the_version() -> None:
    moved = compat.workflow_version(contract_v2.migrating, sleeping())
    assert isinstance(moved, Checkpoint)
    assert moved.business.workflow_version == 2 and moved.business.data == {"title": "lease", "parties": 2}
    assert engine.workflow_of(contract_v2.migrating, moved).state is contract_v2.ContractV2


def test_a_kept_version_runs_its_own_code_for_real() -> None:
    cp = sleeping()
    assert compat.workflow_version(contract_v2.keeping, cp) is cp
    assert engine.workflow_of(contract_v2.keeping, cp) is contract  # v1's stages, handlers and model


@pytest.mark.parametrize(
    ("app", "said"),
    [
        (
            contract_v2.dropping,
            "workflow contract v1 -> v2: no migration from v1, and the app does not keep v1",
        ),
        (contract_v2.failing, "workflow contract v1 -> v2: the migration failed: KeyError"),
    ],
    ids=["neither-migrated-nor-kept", "migration-raises"],
)
def test_a_version_neither_migrated_nor_kept_is_quarantined_with_the_reason(app: App, said: str) -> None:
    found = compat.workflow_version(app, sleeping(app))
    assert isinstance(found, str) and found.startswith(said), found
    ruling = gate_rules.decide(
        app, sleeping(app), None, "", tenant="default", auth=LIVE, now=datetime(2026, 3, 2, tzinfo=UTC)
    )
    assert ruling == gate_rules.Incompatible(found)  # the gate quarantines it: no dead letter, no retry


def test_a_state_the_same_version_no_longer_reads_is_quarantined_not_dead_lettered() -> None:
    redeployed = App(name="contract", workflows=[dataclasses.replace(contract_v2.v2, version=1)])
    found = compat.workflow_version(redeployed, sleeping(redeployed))
    assert isinstance(found, str) and "the task's state no longer validates: ValidationError" in found


def test_the_dry_run_says_what_the_gate_does_for_each_way_to_deploy() -> None:
    outcomes = {
        name: release.forecast(sleeping(app), LIVE, app)
        for name, app in {
            "migrating": contract_v2.migrating,
            "keeping": contract_v2.keeping,
            "dropping": contract_v2.dropping,
            "failing": contract_v2.failing,
        }.items()
    }
    assert {n: f.outcome for n, f in outcomes.items()} == {
        "migrating": "migrate",
        "keeping": "pin",
        "dropping": "quarantine",
        "failing": "quarantine",
    }
    assert "workflow v1 -> v2" in outcomes["migrating"].detail
    assert "pinned workflow v1 (deployed v2)" in outcomes["keeping"].detail


@pytest.mark.parametrize(
    ("app", "said"),
    [
        (
            lambda: App(name="c", workflows=[contract], retired=[contract]),
            "retired workflow contract v1 is not an older",
        ),
        (
            lambda: App(name="c", workflows=[dataclasses.replace(contract, migrate={1: dict})]),
            "migrates from v1",
        ),
        (lambda: App(name="c", workflows=[contract_v2.v2], retired=[contract, contract]), "kept twice"),
    ],
    ids=["retired-not-older", "migrates-from-itself", "kept-twice"],
)
def test_an_app_that_declares_versions_wrongly_is_refused_naming_why(app: Any, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        app()


def test_a_kept_version_is_what_the_store_lets_its_tasks_move_by() -> None:
    allowed = engine.moves(contract_v2.keeping)
    assert allowed("contract", "awaiting_signature", "closed")
    assert not allowed("contract", "closed", "awaiting_signature")
