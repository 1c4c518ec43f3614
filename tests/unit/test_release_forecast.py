"""A release's dry run says, per stored task, what gate 4 does at its next wake under a new app: the
very rules the gate runs (workflow/compat.py), so its forecast and the wake cannot disagree."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
import release_apps

from wakeful.authority.snapshot import DEFAULT_COMPAT, Snapshot
from wakeful.examples.onboarding import app as onboarding_app
from wakeful.examples.refund import app as refund_app
from wakeful.schemas.checkpoint import BusinessState, Checkpoint, SecurityScope, VersionStamps
from wakeful.sdk.app import App
from wakeful.workflow import release

REWORDED, REKEYED = release_apps.reworded, release_apps.rekeyed


def task(
    stage: str = "awaiting_approval", catalog: str = refund_app.catalog, policy: str = "p-1"
) -> Checkpoint:
    return Checkpoint(
        task_id="t-1",
        business=BusinessState(stage=stage, data={"amount": 2500, "currency": "EUR"}),
        security=SecurityScope(tenant="default", principal_ref="principal:svc-refunds"),
        versions=VersionStamps(policy="p-1", tool_catalog=catalog, agent_id="refund-agent", state_version=2),
        updated_at=datetime(2026, 3, 1, tzinfo=UTC),
    )


def live(deployed: str = "p-1", **rules: str) -> Snapshot:
    """The live authority: policy version `deployed`, the default compatibility rules but `rules`."""
    return Snapshot(
        approvers=frozenset({"alice"}), limit=1000, policy=deployed, compat=DEFAULT_COMPAT | rules
    )


@pytest.mark.parametrize(
    ("cp", "auth", "app", "outcome", "said"),
    [
        (task(), live(), refund_app, "unchanged", ""),
        # reworded only: the task keeps the wording it started with (D119)
        (
            task(),
            live(),
            REWORDED,
            "pin",
            f"pinned tool_catalog {refund_app.catalog} (deployed {REWORDED.catalog})",
        ),
        (task(), live(), REKEYED, "quarantine", "(quarantine)"),
        (task(), live(tool_catalog="pin"), REKEYED, "pin", f"pinned tool_catalog {refund_app.catalog}"),
        (task(), live(tool_catalog="migrate"), REKEYED, "migrate", f"-> {REKEYED.catalog}"),
        (task(), live("p-2"), refund_app, "pin", "pinned policy p-1 (deployed p-2)"),
        (task(), live("p-2", policy="migrate"), refund_app, "migrate", "policy p-1 -> p-2"),
        (
            task(),
            live("p-2", policy="quarantine"),
            refund_app,
            "quarantine",
            "policy p-1 -> p-2 (quarantine)",
        ),
        (task(catalog=refund_app.legacy_catalog), live(), refund_app, "migrate", refund_app.legacy_catalog),
        (task("closed"), live(), REKEYED, "ended", "task is closed"),
        (task(), live(), onboarding_app, "no-workflow", "no workflow 'refund'"),
    ],
    ids=[
        "same",
        "reworded-tool",
        "new-op-key",
        "new-op-key-pinned",
        "new-op-key-migrated",
        "new-policy-pinned",
        "new-policy-migrated",
        "new-policy-quarantined",
        "stamped-before-two-part-catalogs",
        "closed",
        "workflow-gone",
    ],
)
def test_the_forecast_is_what_gate_4_does_at_the_next_wake(
    cp: Checkpoint, auth: Snapshot, app: App, outcome: str, said: str
) -> None:
    forecast = release.forecast(cp, auth, app)
    assert (forecast.outcome, forecast.workflow, forecast.version) == (outcome, "refund", 1)
    assert said in forecast.detail


def test_the_tally_counts_outcomes_by_workflow_and_the_version_tasks_started_under() -> None:
    forecasts = [release.forecast(task(), live(), REKEYED), release.forecast(task("closed"), live(), REKEYED)]
    assert release.tally(forecasts * 2) == {("refund", 1): {"quarantine": 2, "ended": 2}}
