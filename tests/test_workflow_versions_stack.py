"""A release of an app whose workflow's state model changed, against the real stack: v1 contracts
sleep; `wakeful release check` forecasts each way to deploy v2 (migrate, keep v1, neither) without
writing; then a gate of that deploy takes each task's next event and does exactly what was said."""

from __future__ import annotations

import uuid

import redis
from cli_run import doc, wakeful
from contract_app import NOTARY, SIGNED
from contract_app import app as contract_v1
from helpers import BankClient, deliver_under

from wakeful.core.settings import Settings
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.state import keys

DEPLOYS = {"migrating": "migrate", "keeping": "pin", "dropping": "quarantine"}


def test_each_way_to_deploy_a_new_workflow_version_is_forecast_then_done_at_the_wake(
    client: BankClient, settings: Settings, redis_client: redis.Redis
) -> None:
    import contract_v2

    assert wakeful("authority", "init", "--app", "contract_app:app").returncode == 0  # the notary's key
    sleeping = {}
    for deploy in DEPLOYS:
        task_id = f"t-{uuid.uuid4().hex[:12]}"
        created = sign_event(client.signer("svc-refunds"), events.CREATE, {"title": deploy}, task_id=task_id)
        deliver_under(contract_v1, settings, created, "svc-refunds")
        assert client.store.load(task_id).stage == "awaiting_signature"
        sleeping[deploy] = task_id
    stored = {t: redis_client.get(keys.state(t)) for t in sleeping.values()}

    for deploy, outcome in DEPLOYS.items():
        result = wakeful(
            "release", "check", "--app", f"contract_v2:{deploy}", "--task", sleeping[deploy], "--json"
        )
        assert result.returncode == 0, result.stderr
        [said] = [f for f in doc(result)["tasks"] if f["task_id"] == sleeping[deploy]]
        assert (said["outcome"], said["workflow"], said["version"]) == (outcome, "contract", 1), said
    assert {t: redis_client.get(keys.state(t)) for t in sleeping.values()} == stored  # nothing written

    for deploy, task_id in sleeping.items():
        signed = sign_event(client.signer(NOTARY), SIGNED, {}, task_id=task_id)
        deliver_under(getattr(contract_v2, deploy), settings, signed, NOTARY)
    migrated, kept = client.store.load(sleeping["migrating"]), client.store.load(sleeping["keeping"])
    assert (migrated.stage, migrated.business.workflow_version) == ("closed", 2)
    assert migrated.business.data == {"title": "migrating", "parties": 2}
    assert (kept.stage, kept.business.workflow_version, kept.business.data) == (
        "closed",
        1,
        {"title": "keeping"},
    )
    parked = client.show(sleeping["dropping"])
    assert parked["stage"] == "quarantined", parked
    assert "no migration from v1, and the app does not keep v1" in str(parked["quarantine"])

    # The parked task stays readable, and an operator releases it after a look.
    assert (parked["title"], parked["parked_at"], parked["workflow"]) == (
        "dropping",
        "awaiting_signature",
        "contract",
    )
    task_id, release = sleeping["dropping"], ("task", "release", sleeping["dropping"], "--to-version", "2")
    why = ("--reason", "v2 reads its state; migrated by hand")
    refused = wakeful(*release, "--app", "contract_v2:migrating", "--by", "svc-refunds", *why)
    assert refused.returncode != 0 and "is not an operator" in refused.stderr, refused.stderr
    refused = wakeful(*release, "--app", "contract_v2:dropping", "--by", "ops-lead", *why)
    assert "declares no migration from v1" in refused.stderr, refused.stderr
    assert client.store.quarantine_reason(task_id) is not None  # nothing written by either

    released = wakeful(*release, "--app", "contract_v2:migrating", "--by", "ops-lead", *why, "--json")
    assert released.returncode == 0, released.stderr
    assert client.store.quarantine_reason(task_id) is None
    cp = client.store.load(task_id)
    assert (cp.stage, cp.business.workflow_version, cp.business.data) == (
        "awaiting_signature",
        2,
        {"title": "dropping", "parties": 2},
    )
    again = wakeful(*release, "--app", "contract_v2:migrating", "--by", "ops-lead", *why)
    assert "is not quarantined" in again.stderr, again.stderr
    signed = sign_event(client.signer(NOTARY), SIGNED, {}, task_id=task_id)
    deliver_under(contract_v2.migrating, settings, signed, NOTARY)
    assert client.store.load(task_id).stage == "closed"
