"""Releasing a quarantined task on the real stack refuses what it must, writing nothing: a task
parked for its integrity (its record cannot be trusted), a task of a tenant the operator does not
operate for, and a task that is not quarantined."""

from __future__ import annotations

import uuid

from cli_run import wakeful
from helpers import BankClient

from wakeful.devstack.fleet import Fleet
from wakeful.schemas import events

RELEASE = ("--to-version", "1", "--by", "ops-lead", "--reason", "looked at it")


def test_a_task_parked_for_its_integrity_is_never_released(client: BankClient, shared_fleet: Fleet) -> None:
    task_id, _ = client.new_task(2500)
    client.store.quarantine(task_id, "tampered", "the seal did not verify")
    refused = wakeful("task", "release", task_id, *RELEASE)
    assert refused.returncode != 0 and "cannot be trusted, so it is never released" in refused.stderr, (
        refused.stderr
    )
    assert client.store.quarantine_reason(task_id)["reason"] == "tampered"  # type: ignore[index]


def test_an_operator_releases_only_tasks_of_a_tenant_it_operates_for(
    client: BankClient, shared_fleet: Fleet
) -> None:
    requester = f"svc-{uuid.uuid4().hex[:8]}"
    client.add_signer(requester, (events.CREATE,), "acme")
    task_id, created = client.new_task(2500, principal=requester)
    assert created["status"] == "accepted" and task_id.startswith("acme."), (task_id, created)
    client.store.quarantine(task_id, "incompatible", "a tool's contract changed")
    refused = wakeful("task", "release", task_id, *RELEASE)
    assert refused.returncode != 0 and "no operator of tenant acme" in refused.stderr, refused.stderr
    assert client.store.quarantine_reason(task_id) is not None


def test_a_task_that_is_not_quarantined_has_nothing_to_release(
    client: BankClient, shared_fleet: Fleet
) -> None:
    task_id, _ = client.new_task(2500)
    refused = wakeful("task", "release", task_id, *RELEASE)
    assert refused.returncode != 0 and "is not quarantined" in refused.stderr, refused.stderr
