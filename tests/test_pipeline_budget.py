"""The token budget through the whole pipeline: the gate names the task's tenant in the proposal
request, and a task or tenant whose budget is spent is parked for a person with the reason, while
another tenant's task goes on. One process per role, the real Kafka and Redis."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.schemas import events
from wakeful.state import keys
from wakeful.state.budget import Account

SPENDER = "carol-initech"  # a requester registered for a tenant of its own
TASK_TOKENS, TENANT_TOKENS = 200_000, 5_000_000  # the settings' defaults, which the fleet runs with
SMALL = 10  # under the approval limit: the task goes straight to a proposal


@pytest.fixture(scope="module", autouse=True)
def spender(client: Client) -> None:
    client.add_signer(SPENDER, (events.CREATE,), tenant="initech")


def test_a_task_whose_token_budget_is_spent_is_parked_with_the_reason(
    client: Client, shared_fleet: Fleet
) -> None:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    client.admin.xadd(keys.spent(task_id), {"n": TASK_TOKENS}, id=f"{TASK_TOKENS}-0")
    client.create({"amount": SMALL, "currency": "EUR"}, task_id=task_id)
    shown = client.wait_settled(task_id)
    assert shown["stage"] == "needs_review", shown
    assert shown["last_refusal"] == (
        f"the model failed: token budget of {TASK_TOKENS} for task {task_id} is spent ({TASK_TOKENS} used)"
    )
    assert shown["actions"] == {} and shown["ledger"] == []  # nothing ran
    assert shown["model_tokens"] == TASK_TOKENS  # what `wakeful task show` prints


def test_a_tenant_whose_daily_budget_is_spent_is_parked_while_another_tenant_goes_on(
    client: Client, shared_fleet: Fleet
) -> None:
    account = Account.at("any", "initech", datetime.now(UTC))
    day = account.tenant_key
    client.admin.xadd(day, {"n": TENANT_TOKENS}, id=f"{account.floor + TENANT_TOKENS}-0")
    try:
        theirs, _ = client.create({"amount": SMALL, "currency": "EUR"}, principal=SPENDER)
        ours, _ = client.new_task(SMALL)
        spent = client.wait_settled(theirs)
        assert spent["stage"] == "needs_review", spent
        assert f"daily token budget of {TENANT_TOKENS} for tenant initech on " in spent["last_refusal"]
        assert client.wait_settled(ours)["stage"] == "closed"  # the default tenant's budget has room
    finally:
        client.admin.delete(day)


def test_a_task_run_by_a_model_that_reports_no_tokens_shows_none_used(
    client: Client, shared_fleet: Fleet
) -> None:
    task_id, _ = client.new_task(SMALL)
    shown = client.wait_settled(task_id)
    assert shown["stage"] == "closed"
    assert shown["model_tokens"] == 0
    assert not client.admin.exists(keys.spent(task_id), keys.tokens(task_id))  # nothing cost, nothing written
