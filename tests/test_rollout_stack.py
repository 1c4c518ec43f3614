"""A bounded rollout on the real stack (D122): contracts of two tenants sleep on v1; v2 is deployed
rolled out to acme only (`wakeful release rollout`), then promoted to all, then rolled back. At each
step a new task of each tenant starts on the version the rollout gives its tenant, and a sleeping
task woken meets gate 4's rule: moved to v2 for a tenant v2 reached, left on v1 for one it did not,
and never moved back. Every task, asleep throughout, closes."""

from __future__ import annotations

import uuid
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import rollout_app
from cli_run import doc, wakeful
from contract_app import SIGNED
from helpers import BankClient, gate_for, inbound_wake, role_message

from wakeful.core import ids
from wakeful.core.settings import Settings
from wakeful.core.topics import WAKE
from wakeful.operate.client import Client
from wakeful.producers.signing import sign_event
from wakeful.schemas import events
from wakeful.sdk import App

SPEC = "rollout_app:app"
TENANTS = {"acme": "svc-acme", "globex": "svc-globex"}


def deliver(client: Client, settings: Settings, app: App, tenant: str, *, kind: str, outside: str) -> str:
    """One event of `tenant`'s signer about task `outside`, as inbound wakes a gate of `app` with it."""
    principal = TENANTS[tenant]
    payload: dict[str, Any] = {"title": f"{tenant} {outside}"} if kind == events.CREATE else {}
    event = sign_event(client.signer(principal), kind, payload, task_id=outside)
    task_id = ids.task_in(tenant, outside)
    gate = gate_for(settings, app=app)
    gate.runner = SimpleNamespace(dead_letter=lambda *_: None)
    gate.handle(
        role_message(settings, "inbound", WAKE, task_id, inbound_wake(event, task_id, principal).encode())
    )
    return task_id


def create(client: Client, settings: Settings, app: App, tenant: str) -> str:
    task_id = deliver(client, settings, app, tenant, kind=events.CREATE, outside=f"c-{uuid.uuid4().hex[:12]}")
    assert client.store.load(task_id).stage == "awaiting_signature"
    return task_id


def version(client: Client, task_id: str) -> int:
    return client.store.load(task_id).business.workflow_version


def sign(client: Client, settings: Settings, task_id: str) -> tuple[str, int]:
    tenant, _, outside = task_id.rpartition(".")
    deliver(client, settings, rollout_app.app, tenant, kind=SIGNED, outside=outside)
    cp = client.store.load(task_id)
    return cp.stage, cp.business.workflow_version


def release(*argv: str) -> dict[str, Any]:
    done = wakeful("release", *argv, "--app", SPEC, "--by", "ops-lead", "--json")
    assert done.returncode == 0, done.stderr
    return doc(done)


def test_a_rollout_to_one_tenant_is_promoted_then_rolled_back_with_both_tenants_asleep(
    client: BankClient, settings: Settings
) -> None:
    rolling = Client(replace(settings, app=SPEC))
    for tenant, principal in TENANTS.items():
        rolling.add_signer(principal, (events.CREATE, SIGNED), tenant=tenant)
    v1 = rollout_app.before
    asleep = {t: [create(rolling, settings, v1, t) for _ in range(2)] for t in TENANTS}
    assert {version(rolling, t) for ts in asleep.values() for t in ts} == {1}

    said = release("rollout", "--tenant", "acme", "--reason", "canary")
    assert said["tenants"] == ["acme"] and said["version"] == 2 and said["stable"] == 1
    new = {t: create(rolling, settings, rollout_app.app, t) for t in TENANTS}
    assert (version(rolling, new["acme"]), version(rolling, new["globex"])) == (2, 1)
    woken = {t: asleep[t].pop() for t in TENANTS}  # one sleeper of each wakes under the rollout
    assert sign(rolling, settings, woken["acme"]) == ("closed", 2)  # migrated: v2 reached acme
    assert sign(rolling, settings, woken["globex"]) == ("closed", 1)  # left on v1
    assert rolling.store.load(woken["acme"]).business.data["parties"] == 2  # by v2's migration

    assert release("promote", "--all")["rollout"] is None
    promoted = {t: create(rolling, settings, rollout_app.app, t) for t in TENANTS}
    assert {version(rolling, t) for t in promoted.values()} == {2}

    said = release("rollback", "--reason", "v2 misreads parties")
    assert said["state"] == "rolled_back" and any("rollback by ops-lead" in h for h in said["history"])
    back = {t: create(rolling, settings, rollout_app.app, t) for t in TENANTS}
    assert {version(rolling, t) for t in back.values()} == {1}

    everyone = [*asleep["acme"], *asleep["globex"], *new.values(), *promoted.values(), *back.values()]
    closed = {t: sign(rolling, settings, t) for t in everyone}
    assert {stage for stage, _ in closed.values()} == {"closed"}, closed  # none lost, none parked
    assert closed[new["acme"]][1] == 2 and closed[promoted["globex"]][1] == 2  # v2's kept: never moved back
    assert closed[asleep["globex"][0]][1] == 1 and closed[back["acme"]][1] == 1
