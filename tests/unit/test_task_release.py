"""A person's release of a task gate 4 parked, as pure code: to the deployed workflow version (its
declared migration runs) or to the task's own (re-pinned, if the app still runs or keeps it); its
state must validate there; each stamp whose rule is quarantine takes the deployed value; and only
an operator (a task.reopen signer of the task's tenant) may ask."""

from __future__ import annotations

import dataclasses
from typing import Any

import contract_app
import contract_v2
import pytest
from contract_app import app as contract_v1

from wakeful.authority.snapshot import DEFAULT_COMPAT, Snapshot
from wakeful.consumers.gate import writes as gate_writes
from wakeful.operate.release import operators
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.signatures import VerifyKey
from wakeful.sdk import App
from wakeful.workflow import compat

AUTH = Snapshot(approvers=frozenset(), limit=0, policy="p-2", compat=dict(DEFAULT_COMPAT))


def parked(version: int = 1, data: dict[str, Any] | None = None, catalog: str = "catalog-old") -> Checkpoint:
    return contract_app.sleeping(catalog, data or {"title": "x"}, version)


def test_a_release_to_the_deployed_version_runs_its_declared_migration() -> None:
    moved = compat.release_to(contract_v2.migrating, parked(), 2, AUTH)
    assert not isinstance(moved, str)
    assert (moved.business.workflow_version, moved.business.data) == (2, {"title": "x", "parties": 2})


def test_a_release_to_its_own_version_repins_it_where_the_app_keeps_that_version() -> None:
    moved = compat.release_to(contract_v2.keeping, parked(), 1, AUTH)
    assert not isinstance(moved, str)
    assert (moved.business.workflow_version, moved.business.data) == (1, {"title": "x"})


@pytest.mark.parametrize(
    ("app", "cp", "to", "said"),
    [
        (
            contract_v2.dropping,
            parked(),
            2,
            "declares no migration from v1; release to v1 if the app keeps it",
        ),
        (contract_v2.dropping, parked(), 1, "the app no longer keeps workflow contract v1; release to v2"),
        (contract_v2.failing, parked(), 2, "the migration failed: KeyError"),
        (
            contract_v2.keeping,
            parked(),
            3,
            "release it to v1 (re-pin) or to the deployed v2 (migrate), not v3",
        ),
        (contract_v2.keeping, parked(2, {"title": "x"}), 2, "the task's state does not validate"),
        (
            App(name="other", workflows=[dataclasses.replace(contract_v2.v2, name="other")]),
            parked(),
            1,
            "runs no workflow",
        ),
    ],
    ids=["no-migration", "not-kept", "migration-fails", "no-such-version", "state-invalid", "no-workflow"],
)
def test_a_release_that_cannot_be_done_says_why_and_changes_nothing(
    app: App, cp: Checkpoint, to: int, said: str
) -> None:
    before = cp.model_copy(deep=True)
    found = compat.release_to(app, cp, to, AUTH)
    assert isinstance(found, str) and said in found, found
    assert cp == before


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ({}, ("p-1", "CATALOG")),  # policy pinned, the catalog that parked it taken as deployed
        ({"policy": "quarantine"}, ("p-2", "CATALOG")),
        ({"tool_catalog": "pin"}, ("p-1", "catalog-old")),
    ],
)
def test_a_release_restamps_exactly_the_stamps_whose_rule_parks(
    rules: dict[str, str], expected: tuple[str, str]
) -> None:
    app = dataclasses.replace(contract_v1, compat=rules)
    moved = compat.release_to(app, parked(), 1, AUTH)
    assert not isinstance(moved, str)
    policy, catalog = expected
    assert (moved.versions.policy, moved.versions.tool_catalog) == (
        policy,
        app.catalog if catalog == "CATALOG" else catalog,
    )
    assert not isinstance(compat.check_app(app, moved, AUTH), str)  # its next wake goes on


def test_an_operator_is_a_principal_with_a_reopen_signer_of_its_tenant() -> None:
    def key(principal: str, tenant: str) -> VerifyKey:
        return VerifyKey(f"k-{principal}-{tenant}", "ed25519", b"\0" * 32, principal, tenant)

    signers = {k.key_id: k for k in (key("ops", "default"), key("ops", "acme"), key("svc", "default"))}
    kinds = {
        "k-ops-default": frozenset({events.REOPEN}),
        "k-ops-acme": frozenset({events.REOPEN, events.RUN}),
        "k-svc-default": frozenset({events.CREATE, events.RUN}),
    }
    auth = dataclasses.replace(AUTH, signers=signers, signer_kinds=kinds)
    assert operators(auth) == {"ops": frozenset({"default", "acme"})}


def test_the_history_of_a_change_names_what_gate_4_migrated() -> None:
    old = parked()
    new = old.model_copy(
        update={
            "business": old.business.model_copy(update={"workflow_version": 2}),
            "versions": old.versions.model_copy(update={"tool_catalog": "catalog-new"}),
        }
    )
    detail = gate_writes.change_detail(None)
    assert detail(old, new) == {
        "event": "deadline",
        "migrated": {"workflow": "contract v1 -> v2", "tool_catalog": "catalog-old -> catalog-new"},
    }
    assert detail(old, old) == {"event": "deadline"}
