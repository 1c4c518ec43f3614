"""The executor runs gate 4 again before a step begins: a proposal in flight across a deploy that
changed a tool's contract calls nothing and quarantines its task with the reason, as the gate would,
never leaving it at its stage with the request spent and nothing to wake it; one across a deploy
that only reworded the tool runs, once."""

from __future__ import annotations

from helpers import BankClient, executor_for
from release_apps import rekeyed, reworded
from test_executor_outcome import propose, ready_task
from test_round_trips import warmed


def test_a_proposal_across_a_deploy_that_changed_its_tools_contract_quarantines_its_task_and_calls_nothing(
    client: BankClient,
) -> None:
    gate, letters = warmed(client), list[str]()
    task_id, version, _ = ready_task(client, gate)
    propose(client, executor_for(client.settings, letters, app=rekeyed), task_id, version)
    assert letters == [], "a sound proposal for a task the deploy cannot run is no dead letter"
    assert client.bank.entries(task_id) == []
    parked = client.store.quarantine_reason(task_id)
    assert parked is not None and parked["reason"] == "incompatible", parked
    assert str(parked["detail"]).startswith("tool_catalog"), parked


def test_a_proposal_across_a_deploy_that_only_reworded_its_tool_runs_once(client: BankClient) -> None:
    gate, letters = warmed(client), list[str]()
    task_id, version, _ = ready_task(client, gate)
    propose(client, executor_for(client.settings, letters, app=reworded), task_id, version)
    assert letters == [] and len(client.bank.entries(task_id)) == 1
    assert client.store.load(task_id).stage == "closed"
