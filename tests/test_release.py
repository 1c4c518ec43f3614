"""`wakeful release check` against the real stack: it forecasts, writing nothing, what gate 4 does to
each sleeping task under a new app, and a gate of that app then does exactly that at the wake."""

from __future__ import annotations

from typing import Any

import redis
from cli_run import doc, wakeful
from helpers import BankClient, deliver_under
from release_apps import rekeyed, reworded

from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.examples.refund import app as refund_app
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.sdk import App
from wakeful.state import keys


def forecasts(spec: str, task_ids: set[str]) -> dict[str, dict[str, Any]]:
    only = [arg for task_id in sorted(task_ids) for arg in ("--task", task_id)]
    result = wakeful("release", "check", "--app", spec, *only, "--json")
    assert result.returncode == 0, result.stderr
    found = {f["task_id"]: f for f in doc(result)["tasks"]}
    assert set(found) == task_ids, found  # the tasks named, and only they
    return found


def approve_under(app: App, client: BankClient, settings: Settings, task_id: str) -> None:
    approval = sign_event(client.signer("alice"), events.APPROVE, {"version": 1}, task_id=task_id)
    deliver_under(app, settings, approval, "alice")


def test_the_dry_run_forecasts_each_sleeping_task_and_the_wake_does_what_it_said(
    client: BankClient, shared_fleet: Fleet, settings: Settings, redis_client: redis.Redis
) -> None:
    kept, parked = client.new_task(2500)[0], client.new_task(2600)[0]
    stored = {t: redis_client.get(keys.state(t)) for t in (kept, parked)}

    under_reworded = forecasts("release_apps:reworded", {kept, parked})
    under_rekeyed = forecasts("release_apps:rekeyed", {kept, parked})
    human = wakeful("release", "check", "--app", "release_apps:rekeyed").stdout.strip().splitlines()
    assert human[-1].endswith("; nothing was written"), human
    assert {t: redis_client.get(keys.state(t)) for t in (kept, parked)} == stored  # nothing written

    assert under_reworded[kept]["outcome"] == "pin", under_reworded[kept]  # keeps its wording (D119)
    assert under_rekeyed[parked]["outcome"] == "quarantine", under_rekeyed[parked]
    assert f"{refund_app.catalog} -> {rekeyed.catalog} (quarantine)" in under_rekeyed[parked]["detail"]
    assert (under_rekeyed[parked]["workflow"], under_rekeyed[parked]["version"]) == ("refund", 1)

    approve_under(reworded, client, settings, kept)
    approve_under(rekeyed, client, settings, parked)
    went_on = client.store.load(kept)
    assert went_on.stage == "ready" and went_on.versions.tool_catalog == refund_app.catalog
    assert client.show(parked)["stage"] == "quarantined"


def test_the_dry_run_of_an_app_that_will_not_load_says_why_in_one_line() -> None:
    result = wakeful("release", "check", "--app", "release_apps:missing")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("error: --app"), result.stderr


def test_the_dry_run_reads_the_compatibility_rules_and_the_policy_version_live(
    client: BankClient, shared_fleet: Fleet
) -> None:
    task_id = client.new_task(2500)[0]
    try:
        said = wakeful("authority", "policy", "set", "--compat", "tool_catalog=migrate")
        assert said.returncode == 0, said.stderr
        assert forecasts("release_apps:rekeyed", {task_id})[task_id]["outcome"] == "migrate"
        mine = ("--compat", "tool_catalog=quarantine", "--this-app", "--app", "release_apps:rekeyed")
        said = wakeful("authority", "policy", "set", *mine)
        assert said.returncode == 0 and "for app refund" in said.stdout + said.stderr, said.stderr
        assert forecasts("release_apps:rekeyed", {task_id})[task_id]["outcome"] == "quarantine"  # outranks
        client.authority.forget_app_rules()
        deployed = client.policies.deploy("refund", refund_app.policy + "\n// next\n", by="test")
        pinned = forecasts("wakeful.examples.refund:app", {task_id})[task_id]
        assert pinned["outcome"] == "pin" and f"(deployed {deployed.stamp})" in pinned["detail"], pinned
    finally:
        client.reset_authority()


def test_the_dry_run_of_named_tasks_reads_only_those_and_names_one_that_is_not_there(
    client: BankClient, shared_fleet: Fleet
) -> None:
    task_id = client.new_task(2500)[0]
    result = wakeful(
        "release",
        "check",
        "--app",
        "release_apps:reworded",
        "--task",
        task_id,
        "--task",
        "t-nowhere1",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    said = doc(result)
    assert [f["task_id"] for f in said["tasks"]] == [task_id]
    assert said["unreadable"] == [{"id": "t-nowhere1", "error": "task t-nowhere1: no such task"}]
