"""An app's own event kind, end to end from the command line: workers run the contract app, the
notary that `authority init --app` registered signs `signature.completed` with `task send`, and the
task closes; a signer not registered for that kind is refused with a receipt."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from cli_run import doc, wakeful, with_tests_on_path
from contract_app import NOTARY, SIGNED

from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.schemas import events

APP = "contract_app:app"
FIRST_RECEIPT_S = 120.0  # the first event also waits for the fresh roles to join their groups


@pytest.fixture(scope="module")
def workers(client: Client) -> Iterator[Fleet]:
    assert wakeful("authority", "init", "--app", APP).returncode == 0
    fleet = Fleet(with_tests_on_path({**os.environ, "WAKEFUL_APP": APP})).start()
    try:  # warm: the first contract has been answered before the CLI's 30 s wait starts counting
        warm = client.send(
            "svc-refunds", events.CREATE, {"title": "warm-up"}, task_id=f"t-{uuid.uuid4().hex[:12]}"
        )
        client.receipt(warm.event_id, warm.task_id, FIRST_RECEIPT_S, key_id=warm.key_id)
        yield fleet
    finally:
        fleet.stop()


def test_an_apps_own_event_kind_sent_by_its_named_signer_moves_the_task(
    client: Client, workers: Fleet
) -> None:
    created = wakeful("task", "new", "--app", APP, "--workflow", "contract", "--field", "title=NDA", "--json")
    assert created.returncode == 0, created.stderr
    task_id = doc(created)["task_id"]
    assert doc(created)["stage"] == "awaiting_signature"

    sent = wakeful("task", "send", task_id, "--app", APP, "--kind", SIGNED, "--as", NOTARY)
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith(f"accepted: {SIGNED} accepted; task is closed"), sent.stdout
    shown = client.show(task_id)
    assert (shown["workflow"], shown["stage"], shown["title"]) == ("contract", "closed", "NDA")


def test_an_apps_own_event_kind_from_a_signer_not_registered_for_it_is_refused(
    client: Client, workers: Fleet
) -> None:
    created = wakeful("task", "new", "--app", APP, "--field", "title=MSA", "--json")
    task_id = doc(created)["task_id"]
    sent = wakeful("task", "send", task_id, "--app", APP, "--kind", SIGNED, "--as", "alice")
    assert sent.returncode == 1 and "may not send signature.completed" in sent.stdout, sent.stdout
    assert client.show(task_id)["stage"] == "awaiting_signature"
