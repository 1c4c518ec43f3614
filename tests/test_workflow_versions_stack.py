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
        result = wakeful("release", "check", "--app", f"contract_v2:{deploy}", "--json")
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
