"""Tool wording pinned like code, on the real stack (D119). Fifty tasks of egress_app's `later`
sleep under one deploy; the next deploy rewords fetch_page's description. Woken after it, each
sleeping task's model request shows the description it started with; a task created after it shows
the new one; the audit of a step names the catalog the model was shown. Then a deploy that widens
fetch_page's egress without naming it in App.refresh: `wakeful release check` says it will be
refused and shows the change, and a gate of that app does not start."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from typing import Any

import pytest
from cli_run import doc, wakeful, with_tests_on_path
from egress_app import GO, FetchPage, FetchPageReworded, reworded
from model_server import call, scripted_fleet, task_of

from wakeful.core.settings import Settings
from wakeful.devstack.model_server import Reply, Request
from wakeful.operate.client import Client
from wakeful.schemas import events

DESK = "later-desk"
SLEEPERS = 50
FIRST_RECEIPT_S = 120.0
SETTLE_S = 90.0
AUDIT_S = 90.0  # the relay puts a close on the log at once, or its outbox sweep (60 s) finds it
EGRESS = "pages=127.0.0.1:9"


@pytest.fixture(scope="module")
def client(settings: Settings) -> Client:
    """A client of egress_app, whose `later` tasks take the app's own event kind (fetch.go)."""
    return Client(replace(settings, app="egress_app:app"))


def finish(request: Request) -> Reply:
    return call("finish", {"task_id": task_of(request)})


def create(client: Client, workflow: str) -> str:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    event = client.send(DESK, events.CREATE, {"workflow": workflow, "topic": "news"}, task_id=task_id)
    receipt = client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)
    assert receipt["status"] == "accepted", receipt
    return task_id


def audited(task_id: str) -> dict[str, Any]:
    """`wakeful audit TASK --json` once the relay has put the task's step on the log."""
    deadline = time.monotonic() + AUDIT_S
    while True:
        audit = wakeful("audit", task_id, "--json")
        assert audit.returncode == 0, audit.stderr
        found = doc(audit)
        if found["effects"] or time.monotonic() > deadline:
            assert found["effects"], found
            return found
        time.sleep(0.2)


def described(bodies: list[dict[str, object]]) -> set[str]:
    """fetch_page's description in each of the chat requests (`bodies`)."""
    found = set()
    for body in bodies:
        tools = body["tools"]
        assert isinstance(tools, list)
        found |= {str(t["function"]["description"]) for t in tools if t["function"]["name"] == "fetch_page"}
    return found


def test_a_description_deployed_while_tasks_sleep_reaches_only_the_tasks_made_after_it(
    client: Client,
) -> None:
    client.add_signer(DESK, (events.CREATE, GO))
    with scripted_fleet(finish, "egress_app:app", WAKEFUL_EGRESS=EGRESS):
        sleepers = [create(client, "later") for _ in range(SLEEPERS)]
    assert {client.show(t)["stage"] for t in sleepers} == {"waiting"}

    with scripted_fleet(finish, "egress_app:reworded", WAKEFUL_EGRESS=EGRESS) as deployed:
        for task_id in sleepers:
            client.send(DESK, GO, {}, task_id=task_id)
        fresh = create(client, "fetch")
        for task_id in [*sleepers, fresh]:
            assert client.wait_settled(task_id, SETTLE_S)["stage"] == "closed", task_id
        for task_id in sleepers:
            shown = described(deployed.asked(task_id))
            assert len(shown) == 1 and FetchPage.description in next(iter(shown)), (task_id, shown)
        [new] = described(deployed.asked(fresh))
        assert FetchPageReworded.description in new
        # while its relay runs: it puts the step's close on the log (a stopped one leaves it queued)
        effects = audited(sleepers[0])["effects"]

    stamps = {str((e["proposal"] or {}).get("catalog")) for e in effects}
    assert stamps == {client.show(sleepers[0])["versions"]["tool_catalog"]}
    assert client.show(fresh)["versions"]["tool_catalog"] == reworded.catalog


def test_an_egress_widened_without_a_refresh_rule_is_refused_at_deploy(client: Client) -> None:
    with scripted_fleet(finish, "egress_app:reworded", WAKEFUL_EGRESS=EGRESS):
        pass  # deployed: its wording is the current one
    checked = wakeful("release", "check", "--app", "egress_app:widened", "--json")
    assert checked.returncode == 1, checked.stdout
    assert "fetch_page reaches 127.0.0.1:9 more" in checked.stderr
    said = doc(checked)["tools"]
    assert "tool fetch_page: egress + 127.0.0.1:9 (refused at deploy: name the tool in App.refresh)" in said

    env = with_tests_on_path(dict(os.environ)) | {"WAKEFUL_EGRESS": EGRESS}
    argv = [sys.executable, "-m", "wakeful.cli.main", "worker", "gate", "--app", "egress_app:widened"]
    gate = subprocess.run(
        [*argv, "--allow-second"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert gate.returncode != 0
    assert "widens the egress" in gate.stderr and "App(refresh=" in gate.stderr, gate.stderr[-2000:]
