"""Gate 4, as pure code: each version stamp that differs from what is deployed is pinned, migrated or
quarantined by its declared rule; one quarantine rule parks the whole task, and a migration
re-stamps exactly the migrated names and nothing else."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wakeful.authority.snapshot import DEFAULT_COMPAT, Snapshot
from wakeful.examples.refund import Stage
from wakeful.schemas.checkpoint import (
    BusinessState,
    Checkpoint,
    ExecutionState,
    PendingWait,
    SecurityScope,
    VersionStamps,
)
from wakeful.workflow import compat

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
STAMPS = ("policy", "tool_catalog")


def check(cp: Checkpoint, auth: Snapshot) -> Checkpoint | str:
    """Gate 4 with the deployed tool catalog the snapshot names (in a role: the loaded app's)."""
    return compat.check(cp, auth, auth.tool_catalog)


def checkpoint(policy: str = "policy-1", tool_catalog: str = "catalog-1") -> Checkpoint:
    wait = PendingWait(
        wait_for="approval",
        correlation_id="corr-1",
        bound_to_version=1,
        allowed_signers=("role:approver",),
        deadline=T0,
        on_deadline="escalate:ops-lead",
    )
    return Checkpoint(
        task_id="t-1",
        business=BusinessState(stage=Stage.AWAITING_APPROVAL, data={"amount": 5000, "currency": "EUR"}),
        execution=ExecutionState(pending_waits=(wait,), attempts=1, fence=3),
        external_refs={"crm": "case-9"},
        security=SecurityScope(tenant="acme", principal_ref="principal:alice"),
        versions=VersionStamps(
            policy=policy, tool_catalog=tool_catalog, agent_id="refund-agent", state_version=7
        ),
        updated_at=T0,
    )


def deployed(
    policy: str = "policy-1", tool_catalog: str = "catalog-1", compat: dict[str, str] | None = None
) -> Snapshot:
    return Snapshot(
        approvers=frozenset({"bob"}),
        limit=1000,
        policy=policy,
        tool_catalog=tool_catalog,
        compat=dict(DEFAULT_COMPAT) if compat is None else compat,
    )


def test_a_task_on_the_deployed_versions_goes_on_unchanged_whatever_the_rules() -> None:
    cp = checkpoint()
    for rule in ("pin", "migrate", "quarantine", "nonsense"):
        assert check(cp, deployed(compat={"policy": rule, "tool_catalog": rule})) is cp


@pytest.mark.parametrize(
    ("live", "compat", "expected"),
    [
        (("policy-2", "catalog-1"), {"policy": "pin"}, ("policy-1", "catalog-1")),
        (("policy-2", "catalog-1"), {"policy": "migrate"}, ("policy-2", "catalog-1")),
        (("policy-1", "catalog-2"), {"tool_catalog": "pin"}, ("policy-1", "catalog-1")),
        (("policy-1", "catalog-2"), {"tool_catalog": "migrate"}, ("policy-1", "catalog-2")),
        (("policy-2", "catalog-2"), {"policy": "pin", "tool_catalog": "migrate"}, ("policy-1", "catalog-2")),
        (("policy-2", "catalog-2"), {"policy": "migrate", "tool_catalog": "pin"}, ("policy-2", "catalog-1")),
        (
            ("policy-2", "catalog-2"),
            {"policy": "migrate", "tool_catalog": "migrate"},
            ("policy-2", "catalog-2"),
        ),
    ],
)
def test_a_changed_stamp_is_kept_when_pinned_and_restamped_when_migrated(
    live: tuple[str, str], compat: dict[str, str], expected: tuple[str, str]
) -> None:
    result = check(checkpoint(), deployed(*live, compat=compat))
    assert isinstance(result, Checkpoint)
    assert (result.versions.policy, result.versions.tool_catalog) == expected


@pytest.mark.parametrize("stamp", STAMPS)
def test_a_changed_stamp_whose_rule_is_quarantine_parks_the_task_naming_both_versions(stamp: str) -> None:
    cp = checkpoint()
    auth = deployed(
        policy="policy-2" if stamp == "policy" else "policy-1",
        tool_catalog="catalog-2" if stamp == "tool_catalog" else "catalog-1",
        compat={stamp: "quarantine"},
    )
    old, new = ("policy-1", "policy-2") if stamp == "policy" else ("catalog-1", "catalog-2")
    assert check(cp, auth) == f"{stamp} {old} -> {new} (quarantine)"


def test_the_default_rules_pin_a_new_policy_and_quarantine_a_new_tool_catalog() -> None:
    pinned = check(checkpoint(), deployed(policy="policy-2"))
    assert isinstance(pinned, Checkpoint)
    assert pinned.versions.policy == "policy-1"
    assert check(checkpoint(), deployed(tool_catalog="catalog-2")) == (
        "tool_catalog catalog-1 -> catalog-2 (quarantine)"
    )


@pytest.mark.parametrize("stamp", STAMPS)
@pytest.mark.parametrize("rule", [None, "", "Migrate", "PIN", "skip", "migrate "], ids=repr)
def test_a_changed_stamp_without_a_known_rule_is_quarantined(stamp: str, rule: str | None) -> None:
    compat = {} if rule is None else {stamp: rule}
    auth = deployed(
        policy="policy-2" if stamp == "policy" else "policy-1",
        tool_catalog="catalog-2" if stamp == "tool_catalog" else "catalog-1",
        compat=compat,
    )
    reason = check(checkpoint(), auth)
    assert isinstance(reason, str)
    assert reason.startswith(f"{stamp} ")
    assert f"({rule if rule is not None else 'quarantine'})" in reason


def test_one_quarantine_wins_over_a_migration_of_the_other_stamp() -> None:
    auth = deployed("policy-2", "catalog-2", {"policy": "migrate", "tool_catalog": "quarantine"})
    reason = check(checkpoint(), auth)
    assert reason == (
        "policy policy-1 -> policy-2 (migrate), tool_catalog catalog-1 -> catalog-2 (quarantine)"
    )


def test_a_migration_changes_only_the_version_stamps_it_names() -> None:
    cp = checkpoint()
    result = check(cp, deployed("policy-2", "catalog-2", {"policy": "migrate", "tool_catalog": "pin"}))
    assert isinstance(result, Checkpoint)
    assert result.versions == cp.versions.model_copy(update={"policy": "policy-2"})
    # The compare-and-swap bumps state_version when it writes; gate 4 must not.
    assert result.versions.state_version == 7
    assert result.model_dump(exclude={"versions"}) == cp.model_dump(exclude={"versions"})
    assert cp.versions.policy == "policy-1"  # the checkpoint read from the store is left as it was


def test_a_migrated_checkpoint_encodes_and_decodes_with_its_new_stamps() -> None:
    result = check(
        checkpoint(), deployed("policy-2", "catalog-2", {"policy": "migrate", "tool_catalog": "migrate"})
    )
    assert isinstance(result, Checkpoint)
    again = Checkpoint.decode(result.encode())
    assert (again.versions.policy, again.versions.tool_catalog) == ("policy-2", "catalog-2")


VERSIONS = st.sampled_from(["v1", "v2", "v3"])
RULES = st.sampled_from(["pin", "migrate", "quarantine", "bogus", None])


@settings(max_examples=150, deadline=None)
@given(
    stamped=st.tuples(VERSIONS, VERSIONS),
    live=st.tuples(VERSIONS, VERSIONS),
    rules=st.tuples(RULES, RULES),
)
def test_never_migrates_what_it_should_quarantine_and_restamps_exactly_the_migrated_names(
    stamped: tuple[str, str], live: tuple[str, str], rules: tuple[str | None, str | None]
) -> None:
    cp = checkpoint(*stamped)
    compat = {name: rule for name, rule in zip(STAMPS, rules, strict=True) if rule is not None}
    result = check(cp, deployed(*live, compat=compat))

    changed = [name for name, a, b in zip(STAMPS, stamped, live, strict=True) if a != b]
    rule_of = {name: compat.get(name, "quarantine") for name in STAMPS}
    must_park = [name for name in changed if rule_of[name] not in ("pin", "migrate")]
    if must_park:
        assert isinstance(result, str)
        for name in changed:
            assert f"{name} " in result and f"({rule_of[name]})" in result
        return
    assert isinstance(result, Checkpoint)
    for name, was, now in zip(STAMPS, stamped, live, strict=True):
        migrated = name in changed and rule_of[name] == "migrate"
        assert getattr(result.versions, name) == (now if migrated else was)
    assert result.model_dump(exclude={"versions"}) == cp.model_dump(exclude={"versions"})
    assert result.versions.state_version == cp.versions.state_version
    assert (result is cp) is not any(rule_of[n] == "migrate" for n in changed)
