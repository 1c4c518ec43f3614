"""The tenant of a task is its creator's, from the signer registry, never a constant; a signer of
another tenant can neither see, move nor claim it: each tenant names its tasks in a namespace of
its own (D52), and to another tenant's signer the task does not exist."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from helpers import new_checkpoint

from wakeful.core import ids
from wakeful.core.errors import WakefulError
from wakeful.devstack.fleet import Fleet
from wakeful.examples.refund import Stage
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.state import keys

OUTSIDER = "eve-globex"  # an approver by name, registered for another tenant
KINDS = (events.CREATE, events.APPROVE, events.AMEND, events.RUN, events.REOPEN)


@pytest.fixture(scope="module", autouse=True)
def outsider(client: Client) -> Iterator[None]:
    client.add_signer(OUTSIDER, KINDS, tenant="globex")
    client.authority.add_approver(OUTSIDER)
    yield
    client.authority.remove_approver(OUTSIDER)


def test_a_task_belongs_to_the_tenant_of_the_signer_that_created_it(
    client: Client, shared_fleet: Fleet
) -> None:
    ours, _ = client.new_task(2500)
    theirs, receipt = client.create({"amount": 2500, "currency": "EUR"}, principal=OUTSIDER)
    assert receipt["status"] == "accepted"
    assert client.store.load(ours).security.tenant == "default"
    assert client.store.load(theirs).security.tenant == "globex"


@pytest.mark.parametrize(
    ("kind", "payload"),
    [(events.APPROVE, {"version": 1}), (events.AMEND, {"amount": 10}), (events.RUN, {}), (events.REOPEN, {})],
)
def test_a_signer_of_another_tenant_is_told_the_task_does_not_exist_and_changes_nothing(
    client: Client, shared_fleet: Fleet, kind: str, payload: dict[str, object]
) -> None:
    task_id, _ = client.new_task(2500)
    before = client.store.load(task_id)
    answer = client.event(task_id, kind, payload, principal=OUTSIDER)
    missing = f"t-{uuid.uuid4().hex[:12]}"
    nowhere = client.event(missing, kind, payload, principal=OUTSIDER)
    assert answer["status"] == nowhere["status"] == "rejected"
    # The answer its own namespace gives: the task it names there does not exist.
    theirs, nothing = ids.task_in("globex", task_id), ids.task_in("globex", missing)
    assert answer["reason"] == f"no task {theirs}" and nowhere["reason"] == f"no task {nothing}"
    assert answer["task_id"] == theirs and task_id != theirs
    assert set(answer) == set(nowhere)  # not a field more about a task that exists
    after = client.store.load(task_id)
    assert after.state_version == before.state_version and after.business == before.business
    assert not client.admin.exists(keys.ops(task_id))


def test_the_tasks_own_tenant_still_moves_it(client: Client, shared_fleet: Fleet) -> None:
    task_id, _ = client.new_task(2500)
    assert client.approve(task_id, "alice", 1)["status"] == "accepted"
    assert client.wait_settled(task_id)["stage"] == "closed"


def correlation_of(client: Client, task_id: str) -> str:
    [wait] = client.store.load(task_id).execution.pending_waits
    return wait.correlation_id


@pytest.mark.parametrize("stored", ["as the gate writes it now", "as written before tenants were stored"])
def test_another_tenants_correlation_id_is_answered_as_an_unknown_one_without_the_task(
    client: Client, shared_fleet: Fleet, stored: str
) -> None:
    task_id, _ = client.new_task(2500)
    corr = correlation_of(client, task_id)
    if stored != "as the gate writes it now":
        client.admin.set(keys.corr(corr), task_id)  # the bare task id: the gate will judge the tenant
    before = client.store.load(task_id)
    theirs = client.send(OUTSIDER, events.APPROVE, {"version": 1}, correlation_id=corr)
    answer = client.receipt(theirs.event_id, key_id=theirs.key_id)
    made_up = f"corr-{uuid.uuid4().hex[:12]}"
    unknown = client.send(OUTSIDER, events.APPROVE, {"version": 1}, correlation_id=made_up)
    nowhere = client.receipt(unknown.event_id, key_id=unknown.key_id)
    assert answer["status"] == nowhere["status"] == "rejected"
    assert answer["reason"] == f"unknown correlation id {corr!r}"
    assert nowhere["reason"] == f"unknown correlation id {made_up!r}"
    assert answer["task_id"] is None and task_id not in str(answer)  # nothing names the task
    assert set(answer) == set(nowhere)
    assert not client.admin.exists(keys.receipt(theirs.event_id, task_id, key_id=theirs.key_id))
    after = client.store.load(task_id)
    assert after.state_version == before.state_version and after.execution == before.execution
    assert client.approve(task_id, "alice", 1)["status"] == "accepted"  # its own tenant's answer still counts


def test_a_create_over_another_tenants_id_is_a_task_of_its_own_and_claims_nothing(
    client: Client, shared_fleet: Fleet
) -> None:
    ours, _ = client.new_task(2500)
    before = client.store.load(ours)
    theirs, answer = client.create({"amount": 10, "currency": "EUR"}, principal=OUTSIDER, task_id=ours)
    _, nowhere = client.create({"amount": 10, "currency": "EUR"}, principal=OUTSIDER)
    assert answer["status"] == nowhere["status"] == "accepted", answer  # as for an id nobody has
    assert answer["reason"] == nowhere["reason"] and set(answer) == set(nowhere)
    assert theirs == ids.task_in("globex", ours) != ours
    assert client.store.load(theirs).security.tenant == "globex"
    after = client.store.load(ours)
    assert (after.state_version, after.business, after.security) == (
        before.state_version,
        before.business,
        before.security,
    )


def test_a_tenant_cannot_take_an_id_another_tenant_will_use(client: Client, shared_fleet: Fleet) -> None:
    predictable = f"order-{uuid.uuid4().hex[:8]}"
    squatted, _ = client.create({"amount": 10, "currency": "EUR"}, principal=OUTSIDER, task_id=predictable)
    ours, answer = client.create({"amount": 2500, "currency": "EUR"}, task_id=predictable)
    assert answer["status"] == "accepted" and ours == predictable != squatted
    assert client.store.load(ours).security.tenant == "default"
    assert client.approve(ours, "alice", 1)["status"] == "accepted"
    assert client.wait_settled(ours)["stage"] == "closed"


def test_a_task_made_before_the_namespaces_still_hears_its_own_tenant_and_no_other(
    client: Client, shared_fleet: Fleet
) -> None:
    """A task of a tenant other than the default one, stored under the id it was sent with."""
    legacy = f"t-{uuid.uuid4().hex[:12]}"
    made = new_checkpoint(legacy, amount=2500, stage=Stage.AWAITING_APPROVAL)
    made = made.model_copy(update={"security": made.security.model_copy(update={"tenant": "globex"})})
    client.store.create(made, f"made-before-{legacy}")
    heard = client.event(legacy, events.AMEND, {"amount": 20}, principal=OUTSIDER)
    assert heard["task_id"] == legacy and not heard["reason"].startswith("no task"), heard
    stranger = client.event(legacy, events.AMEND, {"amount": 30})  # the default tenant's signer
    missing = f"t-{uuid.uuid4().hex[:12]}"
    assert stranger["reason"] == f"no task {legacy}"
    assert client.event(missing, events.AMEND, {"amount": 30})["reason"] == f"no task {missing}"


def test_another_tenants_quarantined_task_is_no_task_to_a_stranger_not_a_reason(
    client: Client, shared_fleet: Fleet
) -> None:
    """Its checkpoint is not read, so its tenant is not known: why it cannot resume is for its own."""
    task_id, _ = client.new_task(2500)
    client.store.quarantine(task_id, "tampered", "a test marks it")
    answer = client.event(task_id, events.RUN, {}, principal=OUTSIDER)
    theirs = ids.task_in("globex", task_id)
    assert (answer["status"], answer["reason"], answer["task_id"]) == (
        "rejected",
        f"no task {theirs}",
        theirs,
    )
    own = client.event(task_id, events.RUN, {})  # its own tenant still hears why
    assert own["status"] == "rejected" and "quarantined" in own["reason"], own


def test_a_tenants_signer_approves_its_task_by_the_id_its_tenant_gave_it(
    client: Client, shared_fleet: Fleet
) -> None:
    named = f"t-{uuid.uuid4().hex[:12]}"
    theirs, created = client.create({"amount": 2500, "currency": "EUR"}, principal=OUTSIDER, task_id=named)
    assert created["stage"] == "awaiting_approval", created
    colleague = "fay-globex"  # another approver of the same tenant: a requester approves nothing of its own
    client.add_signer(colleague, (events.APPROVE,), tenant="globex")
    client.authority.add_approver(colleague)
    approved = client.approve(named, colleague, 1)  # the tenant's own name for it, not the runtime's
    assert approved["status"] == "accepted" and approved["task_id"] == theirs, approved
    assert client.wait_settled(theirs)["stage"] == "closed"
    with pytest.raises(WakefulError, match="not in the namespace of"):
        client.create({"amount": 1, "currency": "EUR"}, principal=OUTSIDER, task_id="acme.t-1")
