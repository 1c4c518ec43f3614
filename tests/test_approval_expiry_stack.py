"""An approval lasts as long as the app's workflow says (Workflow.approval_valid_for), on the real
stack: the gate fixes its expiry from the loaded app when it is given, and an executor that takes
the step up after that parks the task for a person and books nothing."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from cli_run import with_tests_on_path
from short_approval_app import VALID_FOR
from test_tutorial_stack import DESK, SETTLE_S, book, calendar, free_day

from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.schemas import events

APP = "short_approval_app:app"


@pytest.fixture(scope="module")
def workers(client: Client) -> Iterator[Fleet]:
    client.add_signer(DESK, (events.CREATE, events.RUN))
    fleet = Fleet(with_tests_on_path({**os.environ, "WAKEFUL_APP": APP})).start()
    yield fleet
    fleet.stop()


@pytest.mark.timeout(240)
def test_a_step_taken_up_after_the_apps_approval_validity_is_parked_and_books_nothing(
    client: Client, settings: Settings, workers: Fleet
) -> None:
    workers.stop_role("executor")  # the proposal waits for it, as behind a backlog
    task_id, created = book(client, "boardroom", free_day(settings, "boardroom"), 12)
    assert (created["status"], created["stage"]) == ("accepted", "awaiting_approval"), created
    before = datetime.now(UTC)
    assert client.approve(task_id, "alice", 1)["status"] == "accepted"
    after = datetime.now(UTC)
    expires = datetime.fromisoformat(client.show(task_id)["approval"]["expires_at"])
    assert before + VALID_FOR <= expires <= after + VALID_FOR  # the app's two seconds, not 24 hours

    deadline = time.monotonic() + VALID_FOR.total_seconds() + 30
    while datetime.now(UTC) < expires:  # the outcome waited for: the approval has lapsed
        assert time.monotonic() < deadline, "the clock did not pass the approval's expiry"
        time.sleep(0.05)
    workers.start_role("executor")
    shown = client.wait_settled(task_id, SETTLE_S)
    assert (shown["stage"], shown["last_refusal"]) == ("needs_review", "the approval has expired"), shown
    assert shown["actions"] == {}
    assert [r for r in calendar(settings) if r["op_key"] == f"BOOK:{task_id}:v1"] == []
