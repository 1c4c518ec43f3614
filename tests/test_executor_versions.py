"""The executor runs gate 4 again before a step begins: a proposal in flight across a deploy that
changed a tool's contract is refused, with the reason, and nothing is called; one across a deploy
that only reworded the tool runs, once."""

from __future__ import annotations

from helpers import BankClient, executor_for
from release_apps import rekeyed, reworded
from test_executor_outcome import propose, ready_task
from test_round_trips import warmed


def test_a_proposal_across_a_deploy_that_changed_its_tools_contract_is_refused_and_calls_nothing(
    client: BankClient,
) -> None:
    gate, letters = warmed(client), list[str]()
    task_id, version, _ = ready_task(client, gate)
    propose(client, executor_for(client.settings, letters, app=rekeyed), task_id, version)
    assert letters and letters[-1].startswith("proposal refused: gate 4: tool_catalog"), letters
    assert client.bank.entries(task_id) == []
    assert client.store.load(task_id).stage == "ready"


def test_a_proposal_across_a_deploy_that_only_reworded_its_tool_runs_once(client: BankClient) -> None:
    gate, letters = warmed(client), list[str]()
    task_id, version, _ = ready_task(client, gate)
    propose(client, executor_for(client.settings, letters, app=reworded), task_id, version)
    assert letters == [] and len(client.bank.entries(task_id)) == 1
    assert client.store.load(task_id).stage == "closed"
