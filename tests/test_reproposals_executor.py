"""A refused proposal is counted once, in the task's own state, through the executor's handle()
against the stack `wakeful dev up` starts: a redelivered proposal is dead-lettered as stale and not
counted again, a forged one is dead-lettered and never counted, each refusal wakes the task to be
asked again, and the refusal past the limit parks it in needs_review."""

from __future__ import annotations

import pytest
from helpers import BankClient, RecordedLog, executor_for, proposal_envelope, role_message
from test_executor_outcome import ready_task
from test_round_trips import warmed

from wakeful.core import topics
from wakeful.examples.refund import app as refund_app
from wakeful.schemas.events import Envelope
from wakeful.schemas.proposals import Proposal
from wakeful.state import keys

pytestmark = pytest.mark.timeout(120)
UNUSABLE = "the model answered without a tool call"


def unusable(task_id: str, state_version: int) -> Envelope:
    """What the proposer publishes for a reply that is no proposal, decided on `state_version`."""
    body = Proposal(tool="none", args={}, rationale="", model="openai", unusable=UNUSABLE)
    envelope: Envelope = proposal_envelope(task_id, state_version, body)
    return envelope


def wakes_due(client: BankClient, task_id: str) -> int:
    mine = f"{task_id}|".encode()
    return sum(
        1 for m in client.admin.zrange(keys.DEADLINES, 0, -1) if isinstance(m, bytes) and m.startswith(mine)
    )


def test_a_redelivered_refused_proposal_is_dropped_and_a_forged_one_dead_lettered_counted_once(
    client: BankClient,
) -> None:
    gate, letters, log = warmed(client), list[str](), RecordedLog()
    executor = executor_for(client.settings, letters, log=log)
    task_id, version, _ = ready_task(client, gate)
    message = role_message(
        client.settings, "proposer", topics.PROPOSALS, task_id, unusable(task_id, version).encode()
    )

    executor.handle(message)
    once = client.store.load(task_id)
    assert (once.stage, once.execution.attempts, once.state_version) == ("ready", 1, version + 1)
    assert once.business.last_refusal is not None and UNUSABLE in once.business.last_refusal
    assert wakes_due(client, task_id) >= 1 and letters == []  # woken to be asked again

    executor.handle(message)  # redelivered: it answers the state_version the refusal left behind
    again = client.store.load(task_id)
    assert (again.execution.attempts, again.state_version) == (1, version + 1)
    dropped = log.said("executor.superseded")  # the task moved on: superseded, not wrong
    assert letters == [] and len(dropped) == 1 and dropped[0]["why"].startswith("stale proposal"), dropped

    forged_body = unusable(task_id, version + 1).encode()
    forged = role_message(client.settings, "gate", topics.PROPOSALS, task_id, forged_body)  # not the proposer
    executor.handle(forged)
    assert client.store.load(task_id).execution.attempts == 1 and len(letters) == 1, letters
    assert "not a key of proposer" in letters[0], letters  # refused before the task is read


def test_the_refusal_past_the_workflows_limit_parks_the_task_with_the_count(client: BankClient) -> None:
    gate, letters = warmed(client), list[str]()
    executor = executor_for(client.settings, letters)
    task_id, version, _ = ready_task(client, gate)
    limit = refund_app.workflows[0].max_reproposals
    for n in range(limit + 1):
        body = unusable(task_id, version + n).encode()
        executor.handle(role_message(client.settings, "proposer", topics.PROPOSALS, task_id, body))
    parked = client.store.load(task_id)
    assert letters == [] and parked.stage == "needs_review", (letters, parked.business)
    assert parked.business.last_refusal is not None
    assert f"{limit + 1} proposals in a row were refused" in parked.business.last_refusal
    assert parked.external_refs["parked-from"] == "ready"
