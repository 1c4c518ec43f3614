"""Gate 4's rule for each stamp is the app's: an operator's rules for one app outrank what the app
declares (App.compat), which outranks the rules set for every app, which outrank the defaults. A
rule read from the store that is not a rule quarantines, never passes."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from contract_app import app as contract_app
from contract_app import contract

from wakeful.authority.snapshot import DEFAULT_COMPAT, Snapshot, snapshot_from, stored_rules
from wakeful.core.errors import ConfigError
from wakeful.schemas.checkpoint import BusinessState, Checkpoint, SecurityScope, VersionStamps
from wakeful.sdk import App
from wakeful.workflow import compat

EVERY_APP = {"policy": "pin", "tool_catalog": "quarantine"}


def live(every: dict[str, str] | None = None, by_app: dict[str, dict[str, str]] | None = None) -> Snapshot:
    return Snapshot(
        approvers=frozenset(),
        limit=0,
        compat={**DEFAULT_COMPAT, **(every or {})},
        compat_by_app=by_app or {},
    )


def declaring(**rules: str) -> App:
    return dataclasses.replace(contract_app, compat=rules)


@pytest.mark.parametrize(
    ("every", "declared", "operator", "expected"),
    [
        ({}, {}, {}, EVERY_APP),
        ({"policy": "migrate"}, {}, {}, {"policy": "migrate", "tool_catalog": "quarantine"}),
        (
            {"policy": "migrate"},
            {"policy": "quarantine"},
            {},
            {"policy": "quarantine", "tool_catalog": "quarantine"},
        ),
        ({}, {"tool_catalog": "migrate"}, {}, {"policy": "pin", "tool_catalog": "migrate"}),
        ({}, {"tool_catalog": "migrate"}, {"tool_catalog": "pin"}, {"policy": "pin", "tool_catalog": "pin"}),
        (
            {"policy": "quarantine"},
            {"policy": "pin"},
            {"policy": "migrate"},
            {"policy": "migrate", "tool_catalog": "quarantine"},
        ),
    ],
    ids=[
        "defaults",
        "every-app",
        "declared-outranks-every-app",
        "declared",
        "operator-outranks-declared",
        "all-three",
    ],
)
def test_the_rule_for_a_stamp_is_the_operators_for_the_app_then_the_apps_then_every_apps(
    every: dict[str, str], declared: dict[str, str], operator: dict[str, str], expected: dict[str, str]
) -> None:
    app = declaring(**declared)
    assert compat.rules_for(app, live(every, {app.name: operator} if operator else {})) == expected


def test_an_operators_rules_for_one_app_do_not_reach_another() -> None:
    auth = live(by_app={"someone-else": {"tool_catalog": "migrate"}})
    assert compat.rules_for(declaring(), auth)["tool_catalog"] == "quarantine"


def test_a_task_of_an_app_that_declares_migrate_is_restamped_where_every_app_would_quarantine() -> None:
    cp = Checkpoint(
        task_id="t-1",
        business=BusinessState(workflow="contract", stage="awaiting_signature", data={"title": "lease"}),
        security=SecurityScope(tenant="default", principal_ref="principal:svc"),
        versions=VersionStamps(
            policy="refund-policy-1", tool_catalog="catalog-old", agent_id="contract-agent", state_version=2
        ),
        updated_at=datetime(2026, 3, 1, tzinfo=UTC),
    )
    auth = live()
    assert isinstance(compat.check_app(declaring(), cp, auth), str)
    moved = compat.check_app(declaring(tool_catalog="migrate"), cp, auth)
    assert not isinstance(moved, str)
    assert moved.versions.tool_catalog == contract_app.catalog


@pytest.mark.parametrize(
    ("rules", "said"),
    [
        ({"policies": "pin"}, "compat names 'policies'"),
        ({"policy": "keep"}, "compat policy='keep' is not one of pin, migrate, quarantine"),
    ],
)
def test_an_app_that_declares_a_rule_wrongly_is_refused_naming_why(rules: dict[str, str], said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        App(name="c", workflows=[contract], compat=rules)


@pytest.mark.parametrize(
    "raw",
    ["not json", "[1, 2]", '{"policy": 1}', '"pin"', "null"],
    ids=["text", "list", "number", "string", "null"],
)
def test_stored_rules_that_are_not_rules_quarantine_every_stamp(raw: str) -> None:
    assert stored_rules(raw) == {"policy": "quarantine", "tool_catalog": "quarantine"}


def test_the_snapshot_reads_each_apps_rules_from_its_own_field() -> None:
    policy = {
        b"policy": b"p-1",
        b"compat": b'{"policy": "migrate"}',
        b"compat:expenses": b'{"tool_catalog": "pin"}',
        b"compat:broken": b"{",
    }
    snap = snapshot_from(
        [set(), None, policy, {}, {}, {}, {}]
    )  # nothing frozen or revoked, no tool off, no limit
    assert snap.compat == {"policy": "migrate", "tool_catalog": "quarantine"}
    assert snap.compat_by_app == {
        "expenses": {"tool_catalog": "pin"},
        "broken": {"policy": "quarantine", "tool_catalog": "quarantine"},
    }
